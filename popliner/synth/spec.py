"""What to generate: :class:`SynthSpec` and the named presets.

A spec is a frozen value: every field is checked when it is built, so the
generator never meets a nonsensical parameter half-way through its work.
Bad values raise :class:`~popliner.errors.UsageProblem` naming the field,
the value and the allowed range.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from popliner.errors import UsageProblem
from popliner.hardware import CLOCK_HZ_RANGE
from popliner.synth.naming import NAMINGS, SYNTH_FRAMEWORKS

__all__ = ["CALIBRATION_FIELDS", "FIRST_MOMENTS", "HEADS", "KINDS", "MODES", "OPTIMIZERS", "OPTIMIZER_STATES",
           "PRESETS", "RECOMPUTES", "UNCALIBRATED", "SynthSpec", "preset_mode", "preset_names", "preset_spec"]

#: Model families the generator knows.
KINDS: Final = ("encoder", "decoder", "cnn", "efficientnet")
MODES: Final = ("inference", "training")
OPTIMIZERS: Final = ("adam", "sgd")
#: How the profile was "compiled": recomputation, where optimizer state lives, its first-moment type.
RECOMPUTES: Final = ("none", "every-layer", "pipeline")
#: Heads of an encoder: SQuAD (fine-tuning, inference) or the masked-LM head of pretraining.
HEADS: Final = ("squad", "mlm")
OPTIMIZER_STATES: Final = ("on-chip", "off-chip")
FIRST_MOMENTS: Final = ("float", "half")
#: Spec fields that scale the catalog's code and state amounts.
CALIBRATION_FIELDS: Final = ("vertex_code_factor", "vertex_state_factor", "exchange_code_factor",
                             "control_code_factor")
#: Scale is a granularity factor; beyond this the output gets silly (and huge).
MAX_SCALE: Final = 16.0
MIN_SCALE: Final = 1.0 / 64
MAX_TILES: Final = 1 << 16  # same limit as the loader


#: The spec's true-or-false fields, each checked to be a bool.
_FLAGS: Final = ("compiler_categories", "edgetpu_builder", "linear_mapping", "planner_inputs", "shape_cache",
                 "exchange_by_size", "reference_bert", "checkpoints", "var_names", "untied_head",
                 "sharded_optimizer_state")


@dataclass(frozen=True)
class SynthSpec:
    """Parameters of one synthetic profile.

    ``kind`` picks the model family. For ``encoder`` (BERT-like) and
    ``decoder`` (GPT-like) models ``hidden`` is the model width, ``seq`` the
    sequence length and ``vocab`` the vocabulary. For ``cnn`` (ResNet-like)
    models ``layers`` is the number of bottleneck blocks, ``hidden`` the base
    channel width (64 in ResNet-50), ``seq`` the image side in pixels and
    ``vocab`` the number of classes.

    ``scale`` changes the granularity of the profile, not the model: at 2 the
    same model is described by about twice as many lowered variables,
    programs and steps (finer pieces, more compute sets), while its memory
    footprint and cycle totals stay roughly the same.
    """

    kind: str = "encoder"
    mode: str = "inference"
    layers: int = 4
    hidden: int = 128
    seq: int = 128
    batch: int = 1
    vocab: int = 4096
    tiles: int = 1472
    bytes_per_tile: int = 638976
    clock_hz: float = 1.33e9
    seed: int = 0
    scale: float = 1.0
    optimizer: str = "adam"
    var_names: bool = True
    model: str = "custom"
    # Training as it is compiled in practice (docs/synthetic-profiles.md, "Compiled-with options").
    recompute: str = "none"
    split_after: tuple[int, ...] = ()
    optimizer_state: str = "on-chip"
    replication_factor: int = 1
    sharded_optimizer_state: bool = False
    first_moment: str = "float"
    head: str = "squad"
    #: The LM/MLM head has a decoder weight of its own instead of reading the word embedding (GPT-2's LM head and
    #: BERT's MLM head are tied by default, as Hugging Face builds them).
    untied_head: bool = False
    #: The model puts a recomputation checkpoint after every layer (optimum's recompute_checkpoint_every_layer).
    checkpoints: bool = False
    # Calibration: multipliers of the catalog's per-program amounts (docs/synthetic-profiles.md, "Calibration").
    vertex_code_factor: float = 1.0
    vertex_state_factor: float = 1.0
    exchange_code_factor: float = 1.0
    control_code_factor: float = 1.0
    #: Embeddings, attention mask and SQuAD head as Google's reference BERT builds them (calibrated presets).
    reference_bert: bool = False
    #: ``tileMemory`` also has the compiler's categories the five components leave out (stack, descriptors, ...).
    compiler_categories: bool = False
    #: Exchange code per tile grows with the square root of the bytes an operation moves per tile (size rule,
    #: docs/synthetic-profiles.md); off: a fixed amount per kind of operation.
    exchange_by_size: bool = False
    #: EfficientNet blocks as TensorFlow's EdgeTPU builder makes them (popliner/synth/effnet.py); off: the
    #: earlier approximation (stride in a fused block's expansion), which the committed fixture keeps.
    edgetpu_builder: bool = False
    #: Convolutions as TensorFlow's Poplar backend caches them: one body per shape, model-wide,
    #: that every operation of that shape calls (popliner/synth/effnet.py).
    shape_cache: bool = False
    #: The planner's choices per group of blocks fitted to the real EfficientNet-EdgeTPU-L (popliner/synth/plans.py).
    planner_inputs: bool = False
    #: Tensors smaller than the IPU are mapped from tile 0, as Poplar's linear mapping does (else from seeded starts).
    linear_mapping: bool = False
    #: How operations are named: ``popart``, or as ``poptorch`` or ``tensorflow`` would (popliner/synth/naming.py).
    naming: str = "popart"
    #: Whose debug contexts and ``source.framework`` to write (popliner.synth.naming).
    framework: str = "synthetic"

    def __post_init__(self) -> None:
        _choice("kind", self.kind, KINDS)
        _choice("mode", self.mode, MODES)
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        _int_range("layers", self.layers, 1, 512)
        _int_range("hidden", self.hidden, 8, 1 << 16)
        _int_range("seq", self.seq, 32 if self.image else 1, 1 << 16)
        _int_range("batch", self.batch, 1, 1 << 12)
        _int_range("vocab", self.vocab, 2, 1 << 22)
        _int_range("tiles", self.tiles, 1, MAX_TILES)
        _int_range("bytes_per_tile", self.bytes_per_tile, 1, 1 << 40)
        _int_range("seed", self.seed, 0, 2**63 - 1)
        _number_range("clock_hz", self.clock_hz, *CLOCK_HZ_RANGE)
        _number_range("scale", self.scale, MIN_SCALE, MAX_SCALE)
        for name in CALIBRATION_FIELDS:
            _number_range(name, getattr(self, name), 0.01, 100.0)
        _choice("naming", self.naming, NAMINGS)
        for flag in _FLAGS:
            if not isinstance(getattr(self, flag), bool):
                raise UsageProblem(f"{flag} must be true or false, got {getattr(self, flag)!r}")
        if self.checkpoints and self.kind not in ("encoder", "decoder"):
            raise UsageProblem(f"checkpoints are written for encoder and decoder models, not kind={self.kind}")
        if not isinstance(self.model, str) or not self.model:
            raise UsageProblem(f"model must be a non-empty label, got {self.model!r}")
        if not self.image and self.hidden % self.heads:
            raise UsageProblem(f"hidden={self.hidden} is not a multiple of its {self.heads} attention heads of 64")
        self._check_training_options()

    def _check_training_options(self) -> None:
        _choice("recompute", self.recompute, RECOMPUTES)
        _choice("optimizer_state", self.optimizer_state, OPTIMIZER_STATES)
        _choice("first_moment", self.first_moment, FIRST_MOMENTS)
        _choice("head", self.head, HEADS)
        _choice("framework", self.framework, SYNTH_FRAMEWORKS)
        if self.head != "squad" and self.kind != "encoder":
            raise UsageProblem(f"head={self.head} is an encoder head; kind={self.kind} has its own")
        if self.untied_head and not (self.kind == "decoder" or self.head == "mlm"):
            raise UsageProblem("untied_head applies to a head tied to the embedding: a decoder's LM head or the "
                               f"encoder's mlm head, not kind={self.kind} with head={self.head}")
        _int_range("replication_factor", self.replication_factor, 1, 1 << 12)
        if not isinstance(self.split_after, tuple):
            raise UsageProblem(f"split_after must be a tuple of layer numbers, got {self.split_after!r}")
        for layer in self.split_after:
            _int_range("split_after layer", layer, 0, self.layers - 2)
        if list(self.split_after) != sorted(set(self.split_after)):
            raise UsageProblem(f"split_after must be increasing layer numbers, got {list(self.split_after)}")
        if self.split_after and self.recompute != "pipeline":
            raise UsageProblem("split_after (the pipeline stages) only applies with recompute=pipeline")
        if self.recompute == "pipeline" and not self.split_after:
            raise UsageProblem("recompute=pipeline needs split_after, the last layer of every stage but the last "
                               "(the last stage is not recomputed)")
        if self.sharded_optimizer_state and self.replication_factor < 2:
            raise UsageProblem("sharded_optimizer_state needs replication_factor of 2 or more")
        if not self.training:
            used = [name for name, value, default in (
                ("recompute", self.recompute, "none"), ("optimizer_state", self.optimizer_state, "on-chip"),
                ("sharded_optimizer_state", self.sharded_optimizer_state, False),
                ("first_moment", self.first_moment, "float")) if value != default]
            if used:
                raise UsageProblem(f"{', '.join(used)} only apply to mode=training")
        if self.first_moment == "half" and self.optimizer != "adam":
            raise UsageProblem("first_moment=half applies to the adam optimizer only")

    @property
    def state_shards(self) -> int:
        """Replicas the optimizer state is divided over (1 without sharding)."""
        return self.replication_factor if self.sharded_optimizer_state else 1

    @property
    def image(self) -> bool:
        """A CNN (``seq`` is the image side, ``hidden`` the stem width)."""
        return self.kind in ("cnn", "efficientnet")

    @property
    def training(self) -> bool:
        return self.mode == "training"

    @property
    def heads(self) -> int:
        """Attention heads: BERT and GPT-2 use a head size of 64."""
        return max(1, self.hidden // 64)

    def replace(self, **changes: Any) -> SynthSpec:
        """A copy with some fields changed (validated again); unknown names are a UsageProblem."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise UsageProblem(f"unknown synth parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        return dataclasses.replace(self, **changes)

    def record(self) -> dict[str, Any]:
        """The parameters as written in a profile's ``source.generator``.

        The fields after ``model`` (the compiled-with options, calibration and
        naming, added since) are left out at their defaults, so that profiles
        generated before they existed keep their exact bytes.
        """
        out = dataclasses.asdict(self)
        fields = dataclasses.fields(self)
        for f in fields[[f.name for f in fields].index("model") + 1:]:
            if out[f.name] == f.default:
                del out[f.name]
        if "split_after" in out:
            out["split_after"] = list(self.split_after)
        return out


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise UsageProblem(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


def _int_range(name: str, value: Any, lo: int, hi: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise UsageProblem(f"{name} must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise UsageProblem(f"{name}={value} is outside [{lo}, {hi}]")


def _number_range(name: str, value: Any, lo: float, hi: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise UsageProblem(f"{name} must be a finite number, got {value!r}")
    if not lo <= value <= hi:
        raise UsageProblem(f"{name}={value} is outside [{lo:g}, {hi:g}]")


#: Calibration of the Mk2 transformer presets against a real BERT-Large profile (docs/synthetic-profiles.md).
_CALIBRATED: Final = {"vertex_code_factor": 0.247, "vertex_state_factor": 0.301, "exchange_code_factor": 0.342,
                      "control_code_factor": 0.545, "compiler_categories": True}

#: The catalog's own amounts and graph (what the small presets and the committed fixtures use).
UNCALIBRATED: Final = MappingProxyType({**{name: 1.0 for name in CALIBRATION_FIELDS}, "reference_bert": False,
                                        "compiler_categories": False, "exchange_by_size": False,
                                        "planner_inputs": False})

# Preset parameters (mode is given separately). The real-model presets keep a
# Mk2 IPU (1472 tiles of 624 KiB); the small ones use a few tens of tiles so
# that their profiles are small enough to read and to commit.
_PRESETS: dict[str, dict[str, Any]] = {
    "bert-tiny": {"kind": "encoder", "layers": 4, "hidden": 128, "seq": 128, "batch": 4, "vocab": 4096, "tiles": 32},
    "bert-base": {"kind": "encoder", "layers": 12, "hidden": 768, "seq": 128, "batch": 8, "vocab": 30522,
                  **_CALIBRATED, "reference_bert": True},
    "bert-large": {"kind": "encoder", "layers": 24, "hidden": 1024, "seq": 128, "batch": 16, "vocab": 30522,
                   **_CALIBRATED, "reference_bert": True},
    "gpt2-tiny": {"kind": "decoder", "layers": 4, "hidden": 128, "seq": 128, "batch": 2, "vocab": 4096, "tiles": 32},
    "gpt2-small": {"kind": "decoder", "layers": 12, "hidden": 768, "seq": 1024, "batch": 1, "vocab": 50257,
                   **_CALIBRATED},
    "resnet-small": {"kind": "cnn", "layers": 8, "hidden": 16, "seq": 64, "batch": 32, "vocab": 10, "tiles": 32,
                     "optimizer": "sgd"},
    # Calibrated to the real profiles of Graphcore's PopLiner tests (docs/synthetic-profiles.md, "Calibration").
    "poptorch-bert-tiny": {"kind": "encoder", "layers": 3, "hidden": 128, "seq": 128, "batch": 6, "vocab": 30522,
                           "naming": "poptorch", "vertex_code_factor": 0.417, "vertex_state_factor": 0.329,
                           "exchange_code_factor": 1.245, "control_code_factor": 0.788, "compiler_categories": True,
                           "exchange_by_size": True, "planner_inputs": True, "linear_mapping": True},
    "bert-large-sdk-old": {"kind": "encoder", "layers": 24, "hidden": 1024, "seq": 128, "batch": 20, "vocab": 30522,
                           "vertex_code_factor": 0.269, "vertex_state_factor": 0.353, "exchange_code_factor": 0.899,
                           "control_code_factor": 0.415, "compiler_categories": True, "reference_bert": True,
                           "planner_inputs": True},
    # The real EfficientNet profile's images are 224 pixels, 4 to a batch (its block tensors say so; see effnet.py).
    "efficientnet-edgetpu-l": {"kind": "efficientnet", "layers": 27, "hidden": 40, "seq": 224, "batch": 4,
                               "vocab": 1001, "naming": "tensorflow", "vertex_code_factor": 0.45,
                               "vertex_state_factor": 0.27, "exchange_code_factor": 1.017, "control_code_factor": 0.3,
                               "compiler_categories": True, "edgetpu_builder": True, "exchange_by_size": True,
                               "shape_cache": True, "planner_inputs": True},
    "resnet50": {"kind": "cnn", "layers": 16, "hidden": 64, "seq": 224, "batch": 16, "vocab": 1000,
                 "optimizer": "sgd", "compiler_categories": True},
}
#: name -> parameters (read-only view).
PRESETS: Final = MappingProxyType(_PRESETS)
#: Parameters a preset takes in training only (compiled-with options are refused in inference; the real
#: demo_tiny_128 trains Adam with a half first moment).
_TRAINING_ONLY: dict[str, dict[str, Any]] = {"poptorch-bert-tiny": {"first_moment": "half"}}
#: The mode of the real profile a preset was calibrated to, where that was training (else inference).
_CALIBRATED_MODE: dict[str, str] = {"poptorch-bert-tiny": "training"}


def preset_mode(name: str) -> str:
    """The mode a preset generates when none is asked for: that of the real profile it follows."""
    return _CALIBRATED_MODE.get(name, "inference")


def preset_names() -> tuple[str, ...]:
    return tuple(_PRESETS)


def preset_spec(name: str, mode: str | None = None, **overrides: Any) -> SynthSpec:
    """The spec of a named preset in ``mode`` (default: :func:`preset_mode`), with some fields overridden."""
    params = _PRESETS.get(name)
    if params is None:
        raise UsageProblem(f"unknown preset {name!r}; choose one of {', '.join(_PRESETS)}")
    mode = mode or preset_mode(name)
    training = _TRAINING_ONLY.get(name, {}) if mode == "training" else {}
    base = SynthSpec(**{**params, **training, "mode": mode, "model": name})
    return base.replace(**overrides) if overrides else base

"""A recording stand-in for PopTorch, for the real-client test only (tests/client).

PopTorch needs IPU hardware and the Poplar SDK; optimum-graphcore imports it
and calls a handful of its functions while it builds a pipeline. This
module records those calls instead: every ``BeginBlock`` (its ``user_id``
and ``ipu_id``), the pipeline stage PopTorch would give the block, every
``poptorch.Options`` call and every recomputation checkpoint. It computes
nothing else.

The stage rule is PopTorch's own (``python/options.py``,
``_DefaultStageManager.getStage``): with ``AutoStage.SameAsIpu`` a block's
stage is its IPU; with ``AutoStage.AutoIncrement`` each new block ``user_id``
gets the next number, from 1. PopTorch starts a block when the wrapped
module runs (``BeginBlock`` wraps the module), so the order is the forward
pass's.
"""

from __future__ import annotations

import enum
from typing import Any

import torch

# -- what the test reads -----------------------------------------------------------------------------

#: (user_id, ipu_id, stage) of every block started, in the order the forward pass starts them.
BLOCKS: list[tuple[str, int, int]] = []
#: Tensors passed to recomputationCheckpoint (their count is what the test checks).
CHECKPOINTS: list[Any] = []


class AutoStage(enum.IntEnum):
    SameAsIpu = 0
    AutoIncrement = 1


class _StageManager:
    """PopTorch's default stage manager, as ``options.py`` defines it."""

    def __init__(self) -> None:
        self.auto_stage = AutoStage.SameAsIpu
        self.reset()

    def reset(self) -> None:
        self._next_id = 1
        self._stage_of: dict[str, int] = {}

    def begin(self, user_id: str, ipu: int) -> None:
        if user_id not in self._stage_of:
            if self.auto_stage == AutoStage.SameAsIpu:
                self._stage_of[user_id] = ipu
            else:
                self._stage_of[user_id] = self._next_id
                self._next_id += 1
        BLOCKS.append((user_id, ipu, self._stage_of[user_id]))


STAGES = _StageManager()


def start_trace(strategy: PipelinedExecution) -> None:
    """What ``poptorch.trainingModel``/``inferenceModel`` do before tracing: clear the blocks, take the AutoStage."""
    BLOCKS.clear()
    CHECKPOINTS.clear()
    STAGES.auto_stage = strategy.auto_stage
    STAGES.reset()


# -- blocks --------------------------------------------------------------------------------------------

_auto_ids = iter(range(1 << 30))


def BeginBlock(layer_to_call: torch.nn.Module, user_id: str | None = None, ipu_id: int | None = None) -> Any:  # noqa: N802
    """Record a block starting at ``layer_to_call`` on ``ipu_id`` each time the module runs; return the module."""
    if ipu_id is None:
        raise AssertionError("the stand-in expects every block to name its IPU")
    name = user_id if user_id is not None else str(next(_auto_ids))

    def start(module: Any, inputs: Any) -> None:
        STAGES.begin(name, ipu_id)

    handle = layer_to_call.register_forward_pre_hook(start)
    layer_to_call.__dict__.setdefault("_standin_blocks", []).append(handle)
    return layer_to_call


def removeBlocks(module: torch.nn.Module) -> None:  # noqa: N802
    for handle in module.__dict__.pop("_standin_blocks", []):
        handle.remove()


def recomputationCheckpoint(*tensors: Any) -> Any:  # noqa: N802
    CHECKPOINTS.extend(tensors)
    return tensors[0] if len(tensors) == 1 else tensors


def identity_loss(x: Any, reduction: str = "none") -> Any:
    return x


class Attribute:
    """An outlining attribute: nothing to record."""

    def __init__(self, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> Attribute:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


# -- options ---------------------------------------------------------------------------------------------


class PipelinedExecution:
    def __init__(self, *args: Any) -> None:
        if len(args) != 1 or not isinstance(args[0], AutoStage):
            raise AssertionError(f"the stand-in knows AutoStage strategies only, got {args!r}")
        self.auto_stage = args[0]


class ShardedExecution(PipelinedExecution):
    pass


class _Recorder:
    """Records every call made through it (``opts.Training.gradientAccumulation(16)``) and returns its owner."""

    def __init__(self, log: list[tuple[str, tuple[Any, ...]]], prefix: str, owner: Any) -> None:
        self._log, self._prefix, self._owner = log, prefix, owner

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        path = f"{self._prefix}{name}"

        class _Call(_Recorder):
            def __call__(inner, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
                self._log.append((path, args + tuple(sorted(kwargs.items()))))
                return self._owner

        return _Call(self._log, path + ".", self._owner)


class Options:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self._recorder = _Recorder(self.calls, "", self)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("calls", "_recorder"):
            raise AttributeError(name)
        return getattr(self._recorder, name)

    @property
    def replication_factor(self) -> int:
        given = [args[0] for path, args in self.calls if path == "replicationFactor"]
        return int(given[-1]) if given else 1

    def strategy(self) -> PipelinedExecution:
        given = [args[0] for path, args in self.calls if path == "setExecutionStrategy"]
        if not given:
            raise AssertionError("no execution strategy was set")
        return given[-1]  # type: ignore[no-any-return]

    def value(self, path: str) -> Any:
        given = [args for p, args in self.calls if p == path]
        return given[-1] if given else None


class TensorLocationSettings(_Recorder):
    def __init__(self) -> None:
        super().__init__([], "", self)


class OutputMode(enum.IntEnum):
    All = 0
    Sum = 1
    Final = 2
    Default = 3


class ReductionType(enum.IntEnum):
    Sum = 0
    Mean = 1
    NoReduction = 2


class MatMulSerializationMode(enum.Enum):
    InputChannels = "input_channels"
    ReducingDim = "reducing_dim"
    OutputChannels = "output_channels"
    Disabled = "no_serialization"


def ipuHardwareVersion() -> int:  # noqa: N802
    return 0  # no IPU here: optimum's to_options needs compile_only=True


# -- names optimum-graphcore only imports (trainer, data loaders) -------------------------------------------


class DataLoader:
    pass


class DataLoaderMode(enum.IntEnum):
    Sync = 0
    Async = 1
    AsyncRebatched = 2


class PoplarExecutor:
    pass


def setLogLevel(level: Any) -> None:  # noqa: N802
    pass

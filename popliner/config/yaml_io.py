"""Reading pipeline configs (YAML, schema in docs/pipeline-config.md); the writer is
:mod:`popliner.writers.pipeline_yaml`.

Reading uses ``yaml.safe_load`` only and checks everything a hand edit can break; every
problem is a :class:`ConfigError` whose one-line message names the file, the
place (``stages[2].layers[0]``) and the fix. Which parts decide the placement and
which are regenerated on read: docs/pipeline-config.md ('Editing by hand').
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from popliner.config.layering import read_layer_options
from popliner.config.model import (
    CONFIG_VERSION,
    MODES,
    PREDICTED_FIGURES,
    PREDICTED_OPTIONAL,
    ConfigStage,
    ConfigTraining,
    PipelineConfig,
)
from popliner.config.reader import Reader, describe
from popliner.errors import ConfigError, UsageProblem
from popliner.framework import FRAMEWORKS
from popliner.hardware import CLOCK_HZ_RANGE
from popliner.layout import HEAD_PLACEMENTS, Layout
from popliner.memory.training import OPTIMIZER_STATES
from popliner.memory.types import COMPONENTS, OTHER, ComponentBytes
from popliner.pipeline import StageLayout
from popliner.profile.limits import limit
from popliner.profile.rules import MAX_TILES
from popliner.training_record import CONFIG_RECOMPUTES

__all__ = ["CONFIG_BYTES_ENV", "config_from_document", "parse_config", "read_config",
           "training_from_document"]

logger = logging.getLogger(__name__)

#: Micro-batches a simulated step may have; the schedule is built cycle by cycle.
MAX_MICRO_BATCHES = 100_000

TOP_KEYS = ("version", "profile", "target", "framework", "execution", "matmul_proportion", "mode", "num_ipus",
            "pipeline_stages", "gradient_accumulation",
            "training", "layer_options", "solver", "stages", "layers", "snippets")
TRAINING_KEYS = ("recompute", "recompute_requested", "optimizer_state", "replication_factor",
                 "sharded_optimizer_state", "head_placement", "update_regex", "optimizer_state_regex")
STAGE_KEYS = ("index", "ipu", "pipeline_stages", "layers", "predicted")
PREDICTED_KEYS = ("for_layers", "memory", *PREDICTED_FIGURES)
LAYER_KEYS = ("name", "ipu", "pipelineStage", "backwardPipelineStage")
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


def read_config(path: str | os.PathLike[str]) -> PipelineConfig:
    """Read and validate a config file; any problem raises :class:`ConfigError`."""
    source = os.fspath(path)
    most = limit(CONFIG_BYTES_ENV)  # characters (default 1 MiB)
    try:
        with open(source, encoding="utf-8") as f:
            text = _read_at_most(f, most + 1)  # characters: at least as many bytes
    except FileNotFoundError:
        raise ConfigError(f"{source}: no such file; check the path of the pipeline config") from None
    except IsADirectoryError:
        raise ConfigError(f"{source}: is a folder; give the pipeline config's YAML file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source}: not UTF-8 text (byte {exc.start}); save the file as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read: {exc.strerror}; check the path and permissions") from None
    if len(text) > most:
        # PyYAML reads some 150-300 KB/s: a config of megabytes would take minutes. popliner's own are
        # about 10 KB (BERT-Large over 16 IPUs).
        raise ConfigError(f"{source}: larger than {most:,} characters; a pipeline config is a few KB, so this is "
                          f"no config popliner wrote (if it is genuine, raise {CONFIG_BYTES_ENV})")
    return parse_config(text, source)


def _read_at_most(stream: Any, count: int) -> str:
    """Up to ``count`` characters, read a piece at a time: a huge limit (POPLINER_MAX_CONFIG_BYTES=10^26)
    allocates nothing up front, as one read of that size would."""
    pieces: list[str] = []
    held = 0
    while held < count:
        piece = stream.read(min(count - held, 1 << 16))
        if not piece:
            break
        pieces.append(piece)
        held += len(piece)
    return "".join(pieces)


#: The characters a pipeline config may have, read or written (popliner writes none it would refuse to read).
CONFIG_BYTES_ENV = "POPLINER_MAX_CONFIG_BYTES"


def parse_config(text: str, source: str = "<config>") -> PipelineConfig:
    """Validate YAML text; ``source`` names it in error messages."""
    try:
        doc = yaml.safe_load(text)
    except yaml.constructor.ConstructorError as exc:
        raise ConfigError(_tag_message(exc, source)) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "somewhere"
        problem = _one_line(exc.problem or str(exc))
        raise ConfigError(f"{source}: {where}: YAML syntax error ({problem}); fix the syntax there "
                          "(indentation, a missing ':' or an unclosed quote)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: YAML error ({_one_line(str(exc))}); fix the file's syntax") from None
    except RecursionError:  # PyYAML composes nodes recursively: thousands of nested [ or { exhaust the stack
        raise ConfigError(f"{source}: YAML nested too deeply to read; a pipeline config nests a few levels, "
                          "so this is no config popliner wrote") from None
    except ValueError as exc:  # an integer past Python's 4,300-digit conversion limit
        raise ConfigError(f"{source}: a number in it is too long to read ({_one_line(str(exc)).split(';')[0]}); "
                          "no value of a pipeline config has more than 20 digits") from None
    return config_from_document(doc, source)


_TAG = re.compile(r"tag '([^']*)'")


def _tag_message(exc: yaml.constructor.ConstructorError, source: str) -> str:
    """An unknown tag (``!!python/object:...``, ``!custom``): name it, not "syntax error"."""
    mark = exc.problem_mark
    line = f" at line {mark.line + 1}" if mark is not None else ""
    found = _TAG.search(exc.problem or "")
    if found is None:
        return f"{source}{line}: YAML error ({_one_line(exc.problem or str(exc))}); use plain values"
    tag = found.group(1).replace("tag:yaml.org,2002:", "!!")
    return (f"{source}: unsupported YAML tag {tag}{line}; a pipeline config holds plain values only "
            "(remove the tag)")


def _clock(r: Reader, value: Any) -> float:
    """target.clock_hz: within the clocks popliner accepts anywhere (5e-324 Hz made every time infinite)."""
    clock = r.number(value, "target.clock_hz")
    low, high = CLOCK_HZ_RANGE
    if not low <= clock <= high:
        r.fail("target.clock_hz", f"{clock:g} Hz is no IPU clock (expected {low:g} to {high:g} Hz)",
               "write e.g. 1330000000.0")
    return clock


def config_from_document(doc: Any, source: str = "<config>") -> PipelineConfig:
    """Validate an already parsed document (see :func:`parse_config`)."""
    r = Reader(source)
    top = _read_top(r, doc)
    profile, sha = _read_profile(r, top["profile"])
    target = r.mapping(top["target"], "target", ("tiles_per_ipu", "bytes_per_tile", "clock_hz"),
                       ("tiles_per_ipu", "bytes_per_tile", "clock_hz"))
    mode = top["mode"]
    if mode not in MODES:
        r.fail("mode", f"unknown mode {mode!r}", "use `inference` or `training`")
    stages = _read_stages(r, top["stages"], top["num_ipus"])
    model_layers = _read_layer_names(r, top["layers"])
    _check_assignment(r, stages, model_layers)
    training = _read_training(r, top.get("training"), mode) if "training" in top else None
    layer_options = read_layer_options(r, top["layer_options"]) if "layer_options" in top else ()
    g = _read_gradient_accumulation(r, top["gradient_accumulation"], stages, training, mode, model_layers)
    solver_name, solver_status, budget = _read_solver(r, top.get("solver"))
    tiles = _read_tiles(r, target["tiles_per_ipu"], stages)
    cfg = PipelineConfig(
        profile_path=r.text(profile["path"], "profile.path"),
        profile_sha256=sha.lower(),
        tiles_per_ipu=tiles,
        bytes_per_tile=r.integer(target["bytes_per_tile"], "target.bytes_per_tile", minimum=1),
        clock_hz=_clock(r, target["clock_hz"]),
        mode=mode,
        gradient_accumulation=g,
        stages=stages,
        model_layers=model_layers,
        solver=solver_name,
        solver_status=solver_status,
        budget_bytes=budget,
        layer_options=layer_options,
        training_options=training,
        # One of popliner's names (popliner.framework), or absent in an older config.
        framework=None if top.get("framework") is None else r.choice(top["framework"], "framework", FRAMEWORKS),
        matmul_proportion=_read_matmul_proportion(r, top.get("matmul_proportion"), len(stages)),
    )
    if "execution" in top:  # derived from the framework and the mode, like the layers table
        r.choice(top["execution"], "execution", ("pipelined", "sharded"))
    _warn_if_table_differs(source, cfg, top["layers"])
    return cfg


def _read_profile(r: Reader, value: Any) -> tuple[Mapping[str, Any], str]:
    """The ``profile`` mapping, and its sha256 (the path is read with the rest)."""
    profile = r.mapping(value, "profile", ("path", "sha256"), ("path", "sha256"))
    sha = r.text(profile["sha256"], "profile.sha256")
    if not _SHA256.fullmatch(sha):
        r.fail("profile.sha256", "not a sha256 digest (64 hex digits)", "restore the value popliner wrote")
    return profile, sha


def _read_top(r: Reader, doc: Any) -> Mapping[str, Any]:
    """The top level: a mapping of known keys, this version, every required entry there."""
    if doc is None:
        r.fail("", "the file is empty", "write a config with `popliner PROFILE --solve` and edit that")
    top = r.mapping(doc, "", TOP_KEYS, ("version",), what="the top level")
    version = top["version"]
    if isinstance(version, bool) or not isinstance(version, int) or version != CONFIG_VERSION:
        r.fail("version", f"unsupported version {version!r}", f"this popliner reads `version: {CONFIG_VERSION}`")
    for key in ("profile", "target", "mode", "num_ipus", "gradient_accumulation", "stages", "layers"):
        if key not in top:
            r.fail(key, "missing", f"add the `{key}:` entry (see docs/pipeline-config.md)")
    return top


def _read_gradient_accumulation(r: Reader, value: Any, stages: tuple[ConfigStage, ...],
                                training: ConfigTraining | None, mode: str, model_layers: tuple[str, ...]) -> int:
    """G: a whole number, at least one micro-batch per pipeline stage of the layout the stages make."""
    groups = [s.layers for s in stages]
    placement = training.head_placement if training is not None else None
    p = StageLayout.of(Layout.of_stages(groups, placement, model_layers), groups, mode == "training").num_stages
    g = r.integer(value, "gradient_accumulation", minimum=1, maximum=MAX_MICRO_BATCHES)
    if g < p:
        r.fail("gradient_accumulation", f"{g} is smaller than the {p} pipeline stages",
               f"set it to {p} or more (at least one micro-batch per pipeline stage)")
    return g


def _read_tiles(r: Reader, value: Any, stages: tuple[ConfigStage, ...]) -> int:
    """Tiles per IPU; every stage's worst tile must be one of them."""
    tiles = r.integer(value, "target.tiles_per_ipu", minimum=1, maximum=MAX_TILES)
    for s in stages:
        if s.worst_tile >= tiles:
            r.fail(f"stages[{s.index}].predicted.worst_tile", f"tile {s.worst_tile} does not exist on an IPU "
                   f"of {tiles} tiles", "restore the value popliner wrote")
    return tiles


def training_from_document(value: Any, source: str) -> ConfigTraining:
    """Validate a ``training`` block given as plain data; ``source`` names where it was read (one-line errors)."""
    return _read_training(Reader(source), value, "training", where="")


def _read_training(r: Reader, value: Any, mode: str, where: str = "training") -> ConfigTraining:
    """The ``training`` block: every key optional (the default), each checked where it is."""
    p = f"{where}." if where else ""
    if mode != "training":
        r.fail(where, "training options in an inference config", "remove the `training:` block "
               "(or set `mode: training` if the split is for training)")
    m = r.mapping(value, where, TRAINING_KEYS, ())
    recompute = m.get("recompute", "none")
    if recompute == "auto":
        r.fail(f"{p}recompute", "`auto` is a request, not a mode",
               "write the mode --recompute auto chose (see `recompute_requested`), e.g. `every-layer`")
    r.choice(recompute, f"{p}recompute", CONFIG_RECOMPUTES)
    requested = m.get("recompute_requested")
    if requested is not None:
        r.choice(requested, f"{p}recompute_requested", ("auto",))
    factor = r.integer(m.get("replication_factor", 1), f"{p}replication_factor", minimum=1)
    sharded = r.boolean(m.get("sharded_optimizer_state", False), f"{p}sharded_optimizer_state")
    if sharded and factor < 2:
        r.fail(f"{p}sharded_optimizer_state", "true needs `replication_factor: 2` or more",
               "raise replication_factor or set sharded_optimizer_state to false")
    t = ConfigTraining(
        recompute=recompute,
        optimizer_state=r.choice(m.get("optimizer_state", "on-chip"), f"{p}optimizer_state",  # type: ignore[arg-type]
                                 OPTIMIZER_STATES),
        replication_factor=factor,
        sharded_optimizer_state=sharded,
        head_placement=r.choice(m.get("head_placement", "first"), f"{p}head_placement",  # type: ignore[arg-type]
                                HEAD_PLACEMENTS),
        update_regex=r.regex(m.get("update_regex"), f"{p}update_regex"),
        optimizer_state_regex=r.regex(m.get("optimizer_state_regex"), f"{p}optimizer_state_regex"),
        requested=requested,
    )
    try:
        t.options()
    except UsageProblem as exc:  # anything the per-key checks above did not catch
        r.fail(where, str(exc), "fix the training options")
    return t


def _read_matmul_proportion(r: Reader, value: Any, num_ipus: int) -> tuple[float, ...]:
    """``matmul_proportion``: one fraction in (0, 1], or one per IPU; absent for Poplar's default."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) not in (1, num_ipus):
        r.fail("matmul_proportion", f"expected a list of one value or one per IPU ({num_ipus}), got {describe(value)}",
               f"write e.g. [0.6] or {num_ipus} values")
    for k, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            r.fail(f"matmul_proportion[{k}]", f"{describe(v)} is not a fraction in (0, 1]", "write e.g. 0.6")
    return tuple(float(v) for v in value)


def _read_solver(r: Reader, value: Any) -> tuple[str, str, int | None]:
    if value is None:
        return "", "", None
    m = r.mapping(value, "solver", ("name", "status", "budget_bytes"), ())
    budget = m.get("budget_bytes")
    return (
        r.text(m.get("name", ""), "solver.name", allow_empty=True),
        r.text(m.get("status", ""), "solver.status", allow_empty=True),
        None if budget is None else r.integer(budget, "solver.budget_bytes", minimum=1),
    )


def _read_stages(r: Reader, value: Any, num_ipus: Any) -> tuple[ConfigStage, ...]:
    """The stages, one per IPU: as many as ``num_ipus`` says."""
    if not isinstance(value, list) or not value:
        r.fail("stages", "must be a non-empty list of stages", "list one `- index: ...` entry per IPU")
    stages = tuple(_read_stage(r, position, item) for position, item in enumerate(value))
    count = r.integer(num_ipus, "num_ipus", minimum=1)
    if count != len(stages):
        r.fail("num_ipus", f"is {count} but `stages` lists {len(stages)}",
               f"set `num_ipus: {len(stages)}` (one stage per IPU)")
    return stages


def _read_stage(r: Reader, position: int, item: Any) -> ConfigStage:
    where = f"stages[{position}]"
    m = r.mapping(item, where, STAGE_KEYS, ("index", "ipu", "layers", "predicted"))
    index = r.integer(m["index"], f"{where}.index")
    if index != position:
        r.fail(f"{where}.index", f"is {index} but this is entry {position} of `stages`",
               "list the stages in pipeline (data-flow) order and number them 0, 1, 2, ...")
    ipu = r.integer(m["ipu"], f"{where}.ipu")
    if ipu != position:
        r.fail(f"{where}.ipu", f"is {ipu} but stage {position} must run on IPU {position}",
               "each IPU 0..K-1 holds exactly one stage, in pipeline order")
    layers = m["layers"]
    if not isinstance(layers, list) or not layers:
        r.fail(f"{where}.layers", "must be a non-empty list of layer names",
               "give every IPU at least one layer, or remove the stage and lower num_ipus")
    names = tuple(r.layer_name(name, f"{where}.layers[{j}]") for j, name in enumerate(layers))
    pw = f"{where}.predicted"
    pred = r.mapping(m["predicted"], pw, (*PREDICTED_KEYS, *PREDICTED_OPTIONAL), PREDICTED_KEYS)
    optional: dict[str, Any] = {key: r.integer(pred[key], f"{pw}.{key}") if key in pred else None
                                for key in PREDICTED_OPTIONAL}
    memory = _read_memory(r, pred["memory"], f"{pw}.memory")
    figures: dict[str, Any] = {key: r.integer(pred[key], f"{pw}.{key}") for key in PREDICTED_FIGURES}
    return ConfigStage(index=index, ipu=ipu, layers=names, memory=memory, **figures,
                       predicted_for=r.text(pred["for_layers"], f"{pw}.for_layers", allow_empty=True), **optional)


def _read_memory(r: Reader, value: Any, where: str) -> ComponentBytes:
    m = r.mapping(value, where, (*COMPONENTS, OTHER, "total"), COMPONENTS)
    if "total" in m:  # derived; only its type is checked
        r.integer(m["total"], f"{where}.total")
    other = r.integer(m[OTHER], f"{where}.{OTHER}") if OTHER in m else 0  # only profiles with other categories
    five = {c: r.integer(m[c], f"{where}.{c}") for c in COMPONENTS}
    return ComponentBytes(**five, other=other)


def _read_layer_names(r: Reader, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        r.fail("layers", "must be the non-empty list of the model's layers in order",
               "restore the `layers:` table popliner wrote")
    names: list[str] = []
    first_row: dict[str, int] = {}
    for k, row in enumerate(value):
        m = r.mapping(row, f"layers[{k}]", LAYER_KEYS, ("name",))
        name = r.layer_name(m["name"], f"layers[{k}].name")
        if name in first_row:
            r.fail(f"layers[{k}].name", f"layer {name!r} is listed twice (also layers[{first_row[name]}])",
                   "keep one row per layer")
        first_row[name] = k
        names.append(name)
    return tuple(names)


def _check_assignment(r: Reader, stages: tuple[ConfigStage, ...], model_layers: tuple[str, ...]) -> None:
    """Every model layer in exactly one stage, and stages in model (data-flow) order."""
    position = {name: k for k, name in enumerate(model_layers)}
    seen: dict[str, str] = {}
    last: tuple[int, str, str] | None = None  # (model position, name, place) of the previous layer
    # A head wrapped onto IPU 0 runs after the last IPU: it is out of the IPU order by design.
    groups = [s.layers for s in stages]
    wrapped = StageLayout.of(Layout.of_stages(groups, None, model_layers), groups, False).head
    for s in stages:
        for j, name in enumerate(s.layers):
            place = f"stages[{s.index}].layers[{j}]"
            if name == wrapped:
                seen[name] = place
                continue
            if name not in position:
                r.fail(place, f"unknown layer {name!r}: it is not in the model's `layers` table",
                       "check the spelling against the `layers` table")
            if name in seen:
                r.fail(place, f"layer {name!r} is assigned twice (also at {seen[name]})",
                       "keep it in one stage only")
            seen[name] = place
            if last is not None and position[name] < last[0]:
                r.fail(place, f"layer {name!r} comes before {last[1]!r} ({last[2]}) in the model",
                       "keep layers in model order across stages: a pipeline only passes data forward, "
                       "so move one of them so that earlier layers sit in earlier (or the same) stages")
            last = (position[name], name, place)
    for k, name in enumerate(model_layers):
        if name not in seen:
            hint = _stage_of_neighbour(stages, model_layers, k)
            r.fail(f"layers[{k}]", f"layer {name!r} is in no stage", f"add it to {hint}")


def _stage_of_neighbour(stages: tuple[ConfigStage, ...], model_layers: tuple[str, ...], k: int) -> str:
    """Where a forgotten layer belongs: the stage of the layer before it (else after it)."""
    stage_of = {name: s.index for s in stages for name in s.layers}
    for j in [*range(k - 1, -1, -1), *range(k + 1, len(model_layers))]:
        if model_layers[j] in stage_of:
            return f"stages[{stage_of[model_layers[j]]}].layers (next to {model_layers[j]!r})"
    return "stages[0].layers"


def _warn_if_table_differs(source: str, cfg: PipelineConfig, rows: Sequence[Any]) -> None:
    """The table is derived; say once if the file's copy no longer matches stages[].layers."""
    expected = {p.name: (p.ipu, p.pipeline_stage, p.backward_stage) for p in cfg.placements}
    diffs: list[str] = []
    for k, row in enumerate(rows):
        name = row["name"]
        want = expected[name]
        got = (row.get("ipu", want[0]), row.get("pipelineStage", want[1]),
               row.get("backwardPipelineStage", want[2]) if cfg.training else None)
        if got != want:
            diffs.append(f"layers[{k}] ({name!r}) says IPU {got[0]} / pipelineStage {got[1]}, "
                         f"stages[] put it on IPU {want[0]} / pipelineStage {want[1]}")
    if diffs:
        more = f" (and {len(diffs) - 1} more)" if len(diffs) > 1 else ""
        logger.warning("%s: %s%s; stages[].layers is the source of truth, so the layers table and snippets "
                       "were regenerated from it", source, diffs[0], more)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())

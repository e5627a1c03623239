"""One analysed profile: loaded (or cached), operations derived, layers assigned.

:func:`load_analysis` is the entry point of the library for everything that
works per layer: breakdowns, solvers, the simulator and the CI check.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

import numpy as np

from popliner.arrays import gather_csr
from popliner.errors import UsageProblem
from popliner.memory.model import MemoryModel
from popliner.memory.types import StageMemory
from popliner.ops.layers import (
    AUTO_PRESET,
    DEFAULT_INPUTS_REGEX_LAYER_0,
    LayerAssignment,
    choose_layers,
    compile_regex,
)
from popliner.ops.operations import DEFAULT_OP_LAYERS, OperationTable, derive_operations
from popliner.profile.cache import cache_path, load_cached, store_cached
from popliner.profile.loader import parse_profile_bytes, read_profile_bytes
from popliner.profile.model import Profile
from popliner.progress import phase

__all__ = ["DEFAULT_BACKWARD_REGEX", "Analysis", "AnalysisOptions", "analyse_profile", "load_analysis"]

log = logging.getLogger(__name__)

#: Operation names that belong to the backward pass or the weight update.
DEFAULT_BACKWARD_REGEX = r"(?i)grad|backward|varupdate|sgd|adam|lamb|optimi[sz]er"
Mode = Literal["auto", "inference", "training"]
#: Files at least this big get a "reading" progress line before the long parse.
_ANNOUNCE_BYTES = 16 << 20


@dataclass(frozen=True)
class AnalysisOptions:
    """Everything that changes how a profile is read into operations and layers."""

    op_layers: tuple[str, ...] = DEFAULT_OP_LAYERS
    #: A named layer rule (popliner.ops.layers.LAYER_PRESETS) or "auto" (the one covering most operations).
    layer_preset: str = AUTO_PRESET
    #: Overrides the preset when given.
    layer_name_regex: str | None = None
    inputs_regex_layer_0: str = DEFAULT_INPUTS_REGEX_LAYER_0
    layer_order: Literal["steps", "natural"] = "steps"
    #: Count only variables of operations that have a layer (PopLiner's rule).
    layered_vars_only: bool = True
    mode: Mode = "auto"
    backward_regex: str = DEFAULT_BACKWARD_REGEX

    def cache_key(self) -> str:
        # Only what shapes the cached data (operations) goes into the key.
        return "ops:" + ",".join(self.op_layers)


@dataclass(eq=False)
class Analysis:
    """A profile with its operations and layers, and the memory model over them."""

    profile: Profile
    ops: OperationTable
    layers: LayerAssignment
    options: AnalysisOptions
    model: MemoryModel = field(init=False)
    from_cache: bool = False

    def __post_init__(self) -> None:
        counted = self.layers.layer_of_op >= 0 if self.options.layered_vars_only else np.ones(self.ops.count, bool)
        self.model = MemoryModel(self.profile, self.ops, counted)

    # -- layers and operations -----------------------------------------------

    @property
    def layer_names(self) -> tuple[str, ...]:
        return self.layers.names

    @cached_property
    def is_backward(self) -> np.ndarray:
        """Bool per operation: part of the backward pass or the weight update."""
        regex = compile_regex(self.options.backward_regex, "--backward-regex")
        return np.array([bool(regex.search(name)) for name in self.ops.names], bool)

    @cached_property
    def mode(self) -> str:
        if self.options.mode != "auto":
            return self.options.mode
        return "training" if bool(self.is_backward.any()) else "inference"

    def layer_index(self, name: str) -> int:
        try:
            return self.layer_names.index(name)
        except ValueError:
            raise UsageProblem(f"no layer named {name!r}; layers are {_preview(self.layer_names)}") from None

    def stage_ops(self, layers: Sequence[str], first_stage: bool) -> np.ndarray:
        """Operations of the given layers, plus the unlayered ones for the first stage."""
        wanted = np.array([self.layer_index(name) for name in layers], np.int64)
        mask = np.isin(self.layers.layer_of_op, wanted)
        if first_stage:
            mask |= self.layers.layer_of_op < 0
        return np.flatnonzero(mask)

    # -- figures ---------------------------------------------------------------

    def stage_memory(self, layers: Sequence[str], first_stage: bool = False) -> StageMemory:
        return self.model.stage(self.stage_ops(layers, first_stage))

    @cached_property
    def step_cycles(self) -> np.ndarray:
        """Cycles of each step: its program's maximum over tiles."""
        per_program = self.profile.programs.cycles.row_max()
        return per_program[self.profile.steps] if self.profile.num_steps else np.zeros(0, np.int64)

    @cached_property
    def op_cycles(self) -> np.ndarray:
        """Cycles per operation: the sum over the steps it runs at."""
        owner = self.ops.op_of_step
        keep = owner >= 0
        return np.bincount(owner[keep], weights=self.step_cycles[keep], minlength=self.ops.count).astype(np.int64)

    def backward_part(self, ops: np.ndarray) -> np.ndarray:
        """Bool per operation of a stage: in the stage's backward part.

        The backward part starts at the stage's first operation whose name marks
        it as backward; everything from that step on belongs to it. Names alone
        would leave out call sites and helpers of the backward pass that carry
        no gradient name.
        """
        named = self.is_backward[ops]
        if not named.any():
            return np.zeros(len(ops), bool)
        first = self.ops.first_step[ops]
        start = int(first[named & (first >= 0)].min(initial=np.iinfo(np.int64).max))
        return named | (first >= start)

    def stage_cycles_split(self, layers: Sequence[str], first_stage: bool = False) -> tuple[int, int]:
        """(forward, backward) cycles of one micro-batch through the stage."""
        ops = self.stage_ops(layers, first_stage)
        back = self.backward_part(ops)
        cyc = self.op_cycles[ops]
        return int(cyc[~back].sum()), int(cyc[back].sum())

    def stage_cycles(self, layers: Sequence[str], first_stage: bool = False) -> int:
        return sum(self.stage_cycles_split(layers, first_stage))

    @cached_property
    def var_first_step(self) -> np.ndarray:
        """First live step of each variable (its class's first interval start)."""
        p = self.profile
        starts = np.full(p.num_classes, -1, np.int64)
        nonempty = np.diff(p.class_ptr) > 0
        starts[nonempty] = p.iv_start[p.class_ptr[:-1][nonempty]]
        return starts[p.variables.klass]

    @cached_property
    def var_last_step(self) -> np.ndarray:
        """Last live step of each variable (inclusive), -1 when never live."""
        p = self.profile
        ends = np.full(p.num_classes, -1, np.int64)
        nonempty = np.diff(p.class_ptr) > 0
        ends[nonempty] = p.iv_end[p.class_ptr[1:][nonempty] - 1] - 1
        return ends[p.variables.klass]

    @cached_property
    def always_live_var(self) -> np.ndarray:
        return self.profile.always_live_classes()[self.profile.variables.klass]

    def stash_entry_per_tile(self, layers: Sequence[str], first_stage: bool = False) -> np.ndarray:
        """Bytes per tile of one activation stash entry of the stage (training).

        A stashed variable goes live during the stage's forward part and dies
        during its backward part: it must be kept for every micro-batch in
        flight between the two. Zero in inference.
        """
        tiles = self.profile.tiles
        if self.mode != "training":
            return np.zeros(tiles, np.int64)
        ops = self.stage_ops(layers, first_stage)
        back = self.backward_part(ops)
        fwd_lo, fwd_hi = self.model.window(ops[~back])
        bwd_lo, bwd_hi = self.model.window(ops[back])
        if fwd_hi < fwd_lo or bwd_hi < bwd_lo:
            return np.zeros(tiles, np.int64)
        var = self.model.counted_variables(ops)
        first, last = self.var_first_step[var], self.var_last_step[var]
        stash = (first >= fwd_lo) & (first <= fwd_hi) & (last >= bwd_lo) & (last <= bwd_hi) & ~self.always_live_var[var]
        v = self.profile.variables
        return np.bincount(v.tile[var[stash]], weights=v.bytes[var[stash]], minlength=tiles).astype(np.int64)

    def boundary_bytes(self, layers_before: Sequence[str], layers_after: Sequence[str]) -> int:
        """Bytes of non-always-live variables used on both sides of a stage boundary."""
        before = sorted(self.layer_index(n) for n in layers_before)
        after = sorted(self.layer_index(n) for n in layers_after)
        cut = len(before)
        if before == list(range(cut)) and after == list(range(cut, len(self.layer_names))):
            # The usual case, a cut through the layer order: one pass over the
            # per-variable layer span instead of two set unions per boundary.
            lo, hi = self._variable_layer_span
            shared = (lo < cut) & (hi >= cut) & ~self.always_live_var
            return int(self.profile.variables.bytes[shared].sum())
        used_before = self.model.counted_variables(self.stage_ops(layers_before, False))
        used_after = self.model.counted_variables(self.stage_ops(layers_after, False))
        both = np.intersect1d(used_before, used_after, assume_unique=True)
        both = both[~self.always_live_var[both]]
        return int(self.profile.variables.bytes[both].sum())

    @cached_property
    def _variable_layer_span(self) -> tuple[np.ndarray, np.ndarray]:
        """Per variable: the first and last layer whose counted operations use it."""
        n = self.profile.variables.count
        lo = np.full(n, np.iinfo(np.int64).max, np.int64)
        hi = np.full(n, -1, np.int64)
        ops = np.flatnonzero((self.layers.layer_of_op >= 0) & self.model.counted_vars)
        lens = self.ops.var_ptr[ops + 1] - self.ops.var_ptr[ops]
        var = gather_csr(self.ops.var_ptr, self.ops.var_idx, ops)
        layer = np.repeat(self.layers.layer_of_op[ops], lens)
        np.minimum.at(lo, var, layer)
        np.maximum.at(hi, var, layer)
        return lo, hi


def _preview(names: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def analyse_profile(profile: Profile, options: AnalysisOptions = AnalysisOptions(),
                    ops: OperationTable | None = None) -> Analysis:
    """Operations and layers of an already loaded profile."""
    for pattern, flag in ((options.layer_name_regex, "--layer-name-regex"),
                          (options.inputs_regex_layer_0, "--inputs-regex-layer-0"),
                          (options.backward_regex, "--backward-regex")):
        if pattern is not None:
            compile_regex(pattern, flag)
    if ops is None:
        with phase("deriving operations"):
            ops = derive_operations(profile, options.op_layers)
    with phase("assigning layers"):
        layers = choose_layers(ops, options.layer_preset, options.layer_name_regex, options.inputs_regex_layer_0,
                               options.layer_order)
    if ops.unattributed_programs:
        log.info("%d of %d reachable programs have no debug context and belong to no operation",
                 ops.unattributed_programs, ops.reachable_programs)
    return Analysis(profile, ops, layers, options)


def load_analysis(path: str, options: AnalysisOptions = AnalysisOptions(), *, use_cache: bool = True,
                  cache_dir: str | None = None) -> Analysis:
    """Load a profile file (through the cache in ``cache_dir`` unless ``use_cache`` is off) and analyse it."""
    t0 = time.perf_counter()
    with phase("reading"):
        raw = read_profile_bytes(path)
        sha = hashlib.sha256(raw).hexdigest()
    key = options.cache_key()
    where = cache_path(sha, key, cache_dir)
    if use_cache:
        with phase("reading the cache"):
            hit = load_cached(where, sha, key, str(path))
        if hit is not None:
            log.info("loaded %s from cache in %.2f s", path, time.perf_counter() - t0)
            analysis = analyse_profile(hit[0], options, ops=hit[1])
            analysis.from_cache = True
            return analysis
    if len(raw) > _ANNOUNCE_BYTES:
        log.info("reading %s (%.1f MB)", path, len(raw) / 1e6)
    with phase("parsing"):
        profile = parse_profile_bytes(raw, str(path), sha256=sha)
    del raw
    with phase("deriving operations"):
        ops = derive_operations(profile, options.op_layers)
    log.info("loaded %s in %.2f s: %d programs, %d steps, %d variables, %d operations", path,
             time.perf_counter() - t0, profile.programs.count, profile.num_steps, profile.variables.count, ops.count)
    if use_cache:
        with phase("writing the cache"):
            store_cached(where, sha, key, profile, ops)
    return analyse_profile(profile, options, ops=ops)


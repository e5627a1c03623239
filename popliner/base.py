"""What a profile decides, whatever the options: the one frozen value every scenario of it starts from.

:class:`ProfileBase` is made once per load (:func:`popliner.analysis.load_analysis`):
the profile, its operations, the layers the naming rule gave, the mode, the
framework with its evidence, what the profile was compiled with (recomputation
checkpoints in every layer, optimizer state in remote buffers, a head tied to the embedding),
the whole program's memory and the budget's default. Every scenario of the
profile (:func:`popliner.analysis.scenario`: this base under one set of
training options) reads these from here, so no entry point works them out
again or differently. The properties are memoised on the base itself, each a
pure function of its fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Literal

import numpy as np

from popliner.framework import FrameworkChoice, choose_framework
from popliner.memory.training import TrainingOptions
from popliner.ops.layers import AUTO_PRESET, DEFAULT_INPUTS_REGEX_LAYER_0, LayerAssignment
from popliner.ops.operations import DEFAULT_OP_LAYERS, OperationTable
from popliner.profile.model import Profile
from popliner.regexes import compile_bounded

if TYPE_CHECKING:
    from popliner.memory.ranges_shared import SharedParts
    from popliner.memory.types import StageMemory
    from popliner.ops.head import TiedWeight, UnlayeredGroups

__all__ = ["DEFAULT_BACKWARD_REGEX", "AnalysisOptions", "Mode", "ProfileBase"]

#: Operation names that belong to the backward pass or the weight update.
DEFAULT_BACKWARD_REGEX = r"(?i)grad|backward|varupdate|sgd|adam|lamb|optimi[sz]er"
Mode = Literal["auto", "inference", "training"]


@dataclass(frozen=True)
class AnalysisOptions:
    """Everything that changes how a profile is read into operations and layers, and the training options.

    A base reads all but ``training``; a scenario of it applies ``training`` (resolved by
    :func:`popliner.scenario.resolve`).
    """

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
    #: How training memory is modelled (read only by the memory facts and the pipeline rules).
    training: TrainingOptions = field(default_factory=TrainingOptions)
    #: ``--framework``: overrides the framework found in the profile (popliner.framework).
    framework: str | None = None
    #: An optimum-graphcore IPUConfig is asked for (``--ipu-config-out``): without ``framework``, plan optimum's
    #: pipeline and say so (popliner.framework.choose_framework).
    for_ipu_config: bool = False

    def cache_key(self) -> str:
        # Only what shapes the cached data (operations) goes into the key.
        return "ops:" + ",".join(self.op_layers)


@dataclass(frozen=True, eq=False)
class ProfileBase:
    """A loaded profile, its operations and named layers, and every fact of it that no training option changes.

    ``whole_per_tile``: the whole program's figure when the load already has
    it (the cache keeps it); else it is worked out when first read.
    """

    profile: Profile
    ops: OperationTable
    #: The layers the naming rule gave (before any head placement grouped the unlayered operations).
    named_layers: LayerAssignment
    #: The options the base was read with (its ``training`` part is not the base's: each scenario has its own).
    options: AnalysisOptions = field(default_factory=AnalysisOptions)
    from_cache: bool = False
    whole_per_tile: np.ndarray | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return (f"ProfileBase({self.profile.path!r}, {self.ops.count} operations, "
                f"{len(self.named_layers.names)} layers)")

    @cached_property
    def is_backward(self) -> np.ndarray:
        """Bool per operation: its name marks the backward pass or the weight update."""
        regex = compile_bounded(self.options.backward_regex, "--backward-regex", DEFAULT_BACKWARD_REGEX)
        return np.array([bool(regex.search(name)) for name in self.ops.names], bool)

    @cached_property
    def mode(self) -> str:
        if self.options.mode != "auto":
            return self.options.mode
        return "training" if bool(self.is_backward.any()) else "inference"

    @property
    def training(self) -> bool:
        return self.mode == "training"

    @cached_property
    def framework(self) -> FrameworkChoice:
        """The framework that compiled the profile (or the one asked for): popliner.framework."""
        return choose_framework(self.profile, self.options.framework, self.options.for_ipu_config)

    @cached_property
    def whole_memory(self) -> StageMemory:
        """Every operation with every one of its variables: the whole single-IPU program.

        The Totals table, the whole-model row, the coverage and the budget's default all read it.
        """
        from popliner.memory.model import whole_program_memory
        from popliner.memory.types import StageMemory

        if self.whole_per_tile is not None:
            return StageMemory(self.whole_per_tile)
        return whole_program_memory(self.profile, self.ops)

    @cached_property
    def default_headroom(self) -> float:
        """The fraction of each tile a split keeps free unless told: the model's measured shortfall against the
        compiler, for a profile that has the compiler's other categories and its totals; else 0."""
        from popliner.memory.categories import other_categories
        from popliner.memory.coverage import coverage_of, measured_headroom

        if not other_categories(self.profile.tile_memory):
            return 0.0
        cov = coverage_of(self.profile, self.whole_memory)
        return measured_headroom(cov) if cov is not None else 0.0

    def budget(self, mem_per_tile: int | None, headroom: float | None) -> int:
        """Bytes per tile a split may use: ``mem_per_tile`` (the profile's tile) less ``headroom`` (its default)."""
        kept = self.default_headroom if headroom is None else headroom
        return int((mem_per_tile or self.profile.target.bytes_per_tile) * (1.0 - kept))

    # -- what the profile was compiled with -------------------------------------

    @cached_property
    def checkpointed(self) -> bool:
        """Does every named layer carry a recomputation checkpoint (training only)?"""
        from popliner.ops.checkpoints import checkpoints_in_every_layer

        return self.training and checkpoints_in_every_layer(self.ops, self.named_layers, self.is_backward)

    @cached_property
    def state_off_chip(self) -> bool:
        """Was the optimizer state compiled into remote buffers (loaded and stored around its update)?"""
        from popliner.ops.remote import streams_optimizer_state

        return self.training and streams_optimizer_state(self.ops, self.is_backward, self.profile.contexts)

    @cached_property
    def compiled_recompute_ops(self) -> int:
        """How many recompute operations the profile was compiled with (0: it recomputes nothing itself)."""
        from popliner.ops.roles import called_operations, recompute_operations, through_calls

        if not self.training:
            return 0
        backward = through_calls(self.is_backward, called_operations(self.profile, self.ops))
        return int(recompute_operations(self.profile, self.ops, backward).sum())

    @cached_property
    def has_unlayered(self) -> bool:
        """Are there operations for a head placement to group (left without a layer, or put in layer 0 by inputs)?"""
        layers = self.named_layers
        return bool((layers.layer_of_op < 0).any()) or "inputs-layer-0" in layers.note

    def tied_weight(self, options: TrainingOptions) -> TiedWeight | None:
        """The weight the head shares with the embedding (a tied LM or MLM head), in training and inference;
        None when the head has its own (``options``' update regex tells the weight updates apart).

        Memoised by the update regex, the one option it reads.
        """
        from popliner.ops.head import tied_weight

        key = options.update_regex
        if key not in self._tied:
            self._tied[key] = tied_weight(self.profile, self.ops, self._unlayered(key))
        return self._tied[key]

    def tied_head(self, options: TrainingOptions) -> bool:
        """Does the head share its weight with the embedding? (:meth:`tied_weight`)"""
        return self.tied_weight(options) is not None

    @cached_property
    def _tied(self) -> dict[str, TiedWeight | None]:
        return {}

    def _unlayered(self, update_regex: str) -> UnlayeredGroups:
        """:func:`popliner.ops.head.unlayered_groups` of the named layers, memoised by the update regex (the one
        option it reads): the tie and both grouping head placements read the same."""
        from popliner.ops.head import unlayered_groups

        if update_regex not in self._groups:
            self._groups[update_regex] = unlayered_groups(self.profile, self.ops, self.named_layers, self.is_backward,
                                                          update_regex, self.shared.view_memo)
        return self._groups[update_regex]

    @cached_property
    def _groups(self) -> dict[str, UnlayeredGroups]:
        return {}

    def layer_core(self, update_regex: str) -> np.ndarray:
        """Each operation's named layer, -1 for the operations a head placement groups (:meth:`layers_for`): the
        layer every placement keeps it in, numbered one higher by ``last``/``wrap`` (the core their layer spans
        share, :func:`popliner.memory.boundaries.counted_layer_span`). Memoised by the update regex, which the
        grouping reads."""
        found = self._cores.get(update_regex)
        if found is None:
            groups = self._unlayered(update_regex)
            core = np.asarray(self.named_layers.layer_of_op, np.int64)
            if groups is not None:
                core = np.where(groups[0] >= 0, -1, core)
            core.flags.writeable = False
            found = self._cores[update_regex] = core
        return found

    @cached_property
    def _cores(self) -> dict[str, np.ndarray]:
        return {}

    # -- what every scenario of the base shares -------------------------------------

    @cached_property
    def shared(self) -> SharedParts:
        """Each layer's option-free parts, for the scenarios that several option sets make (plans)."""
        from popliner.memory.ranges_shared import SharedParts

        return SharedParts(self.profile, self.ops)

    @cached_property
    def _placed(self) -> dict[tuple[str, str], LayerAssignment]:
        return {}

    def layers_for(self, options: TrainingOptions) -> LayerAssignment:
        """The layers under ``options``' head placement (``last``/``wrap`` group the unlayered operations).

        Memoised by what the grouping reads (the placement and the update regex).
        """
        from popliner.ops.head import place_unlayered

        if options.head_placement == "first":
            return self.named_layers
        key = (options.head_placement, options.update_regex)
        found = self._placed.get(key)
        if found is None:
            found = self._placed[key] = place_unlayered(self.named_layers, self._unlayered(options.update_regex),
                                                        options.head_placement)
        return found

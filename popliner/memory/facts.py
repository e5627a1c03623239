"""What the range machinery reads of a scenario's memory figures: one interface, below everything that reads it.

The range tables' parts (:mod:`popliner.memory.range_state`,
:mod:`popliner.memory.running`, :mod:`popliner.memory.ranges_shared`,
:mod:`popliner.memory.layer_vars`, :mod:`popliner.memory.rerun`,
:mod:`popliner.memory.stash_row`) take the scenario's memory figures as
:class:`MemoryFacts`: the what-if profile, its operations and layers, the
training view and the stash rule. :class:`popliner.memory.engine.MemoryEngine`
provides them; naming them here, rather than the engine, keeps those modules
below it (the engine builds the range state from them, never the other way).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from popliner.memory.boundaries import Boundaries
    from popliner.memory.model import MemoryModel
    from popliner.memory.stash_rule import StashWindows
    from popliner.memory.training import TrainingView
    from popliner.ops.operations import OperationTable
    from popliner.profile.model import Profile

__all__ = ["MemoryFacts"]


class MemoryFacts(Protocol):
    """A scenario's memory figures as the range tables read them (see the module's docstring)."""

    #: The what-if profile of the scenario's training options; ``base_profile`` the profile as loaded.
    profile: Profile
    base_profile: Profile
    ops: OperationTable
    layer_of_op: np.ndarray
    training: bool
    model: MemoryModel
    view: TrainingView

    @property
    def tiles(self) -> int: ...

    @property
    def num_layers(self) -> int: ...

    @property
    def class_steps(self) -> tuple[np.ndarray, np.ndarray]: ...

    @property
    def stash_candidate(self) -> np.ndarray: ...

    @property
    def boundaries(self) -> Boundaries: ...

    @property
    def multi_layer_index(self) -> np.ndarray: ...

    @property
    def multi_layer_var(self) -> np.ndarray: ...

    def range_ops(self, i: int, j: int) -> np.ndarray: ...

    def steps_of(self, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def stash_windows(self, ops: np.ndarray) -> StashWindows | None: ...

    def stash_select(self, first: np.ndarray, last: np.ndarray, windows: StashWindows) -> np.ndarray: ...

    def stash_positions(self, first: np.ndarray, last: np.ndarray,
                        rows: Sequence[StashWindows | None]) -> np.ndarray | None: ...

    def forward_cut_profile(self, head_kept: bool = False) -> Profile: ...

    def pipeline_rerun_window(self, ops: np.ndarray) -> tuple[int, bool] | None: ...

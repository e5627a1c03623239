"""A check against a saved one: how much each IPU grew, what grew most, and whether the growth is allowed.

:func:`compare_checks` is pure: two :class:`~popliner.checkrecord.CheckRecord`
values and the limits in, a :class:`Comparison` out. Writers render it
(the text table, Markdown, JUnit, CI annotations).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from popliner.checkrecord import CheckedIpu, CheckRecord
from popliner.errors import BaselineError

__all__ = ["NEAR_LIMIT", "TOP_CHANGES", "Comparison", "GrowthLimits", "IpuDelta", "NameDelta", "Verdict",
           "compare_checks"]

#: A growth above this share of what the limit allows is "near the limit" (a warning under GitHub Actions).
NEAR_LIMIT = 0.8
#: How many layers and variables per IPU a comparison names (those whose bytes changed most).
TOP_CHANGES = 5

Verdict = Literal["over budget", "grew beyond the limit", "grew near the limit", "grew", "unchanged", "shrank"]


@dataclass(frozen=True)
class GrowthLimits:
    """How much an IPU's worst tile may grow: a fraction of the baseline's worst tile, and/or bytes.

    With both, the tighter one holds for each IPU. With neither, growth is reported and never fails.
    """

    fraction: float | None = None
    bytes: int | None = None

    def allowed(self, baseline_bytes: int) -> int | None:
        """Bytes the IPU may grow by (None: no limit). A fraction's bytes are rounded down: the limit holds."""
        limits = [int(self.fraction * baseline_bytes)] if self.fraction is not None else []
        limits += [self.bytes] if self.bytes is not None else []
        return min(limits) if limits else None

    def describe(self) -> str:
        """The options as given, for messages: ``--max-growth 0.01``, ``--max-growth-bytes 4096``."""
        parts = [f"--max-growth {self.fraction:g}"] if self.fraction is not None else []
        parts += [f"--max-growth-bytes {self.bytes}"] if self.bytes is not None else []
        return " and ".join(parts)


@dataclass(frozen=True)
class NameDelta:
    """A layer or variable in both checks or one: its bytes then and now (None where it is not)."""

    name: str
    baseline_bytes: int | None
    bytes: int | None

    @property
    def change(self) -> int:
        return (self.bytes or 0) - (self.baseline_bytes or 0)


@dataclass(frozen=True)
class IpuDelta:
    """One IPU now against the same IPU in the baseline."""

    ipu: int
    layers: tuple[str, ...]
    baseline_worst_tile_bytes: int
    worst_tile_bytes: int
    baseline_headroom: int
    headroom: int
    fits: bool
    #: Bytes the IPU may grow by under the limits (None: no limit given).
    allowed_growth: int | None
    #: Layers on this IPU now and not in the baseline's, and the other way round (the split moved them).
    layers_added: tuple[str, ...]
    layers_removed: tuple[str, ...]
    #: The layers of this IPU (``Total (bytes)``) and the largest variables on its worst tile, changed most first.
    layer_changes: tuple[NameDelta, ...]
    variable_changes: tuple[NameDelta, ...]

    @property
    def change(self) -> int:
        """Growth of the worst tile in bytes (negative: it shrank)."""
        return self.worst_tile_bytes - self.baseline_worst_tile_bytes

    @property
    def change_share(self) -> float:
        """:attr:`change` as a fraction of the baseline's worst tile."""
        return self.change / self.baseline_worst_tile_bytes if self.baseline_worst_tile_bytes else 0.0

    @property
    def headroom_change(self) -> int:
        return self.headroom - self.baseline_headroom

    @property
    def beyond_limit(self) -> bool:
        return self.allowed_growth is not None and self.change > self.allowed_growth

    @property
    def near_limit(self) -> bool:
        """Within the limit but above :data:`NEAR_LIMIT` of it."""
        return (self.allowed_growth is not None and not self.beyond_limit and self.change > 0
                and self.change > NEAR_LIMIT * self.allowed_growth)

    @property
    def verdict(self) -> Verdict:
        if not self.fits:
            return "over budget"
        if self.beyond_limit:
            return "grew beyond the limit"
        if self.near_limit:
            return "grew near the limit"
        return "grew" if self.change > 0 else "shrank" if self.change < 0 else "unchanged"

    @property
    def failed(self) -> bool:
        return not self.fits or self.beyond_limit


@dataclass(frozen=True)
class Comparison:
    """A check against its baseline, IPU by IPU (the same number of IPUs; the split may differ)."""

    baseline_path: str
    baseline_profile_path: str
    baseline_profile_sha256: str
    limits: GrowthLimits
    ipus: tuple[IpuDelta, ...]
    #: Budgets per tile then and now (a changed budget shows in the headroom, not in the growth).
    baseline_budget: int
    budget: int

    @property
    def split_changed(self) -> bool:
        return any(d.layers_added or d.layers_removed for d in self.ipus)

    @property
    def grown_beyond(self) -> tuple[IpuDelta, ...]:
        return tuple(d for d in self.ipus if d.beyond_limit)

    @property
    def failed(self) -> bool:
        return any(d.failed for d in self.ipus)


def compare_checks(baseline: CheckRecord, current: CheckRecord, limits: GrowthLimits, *,
                   baseline_path: str) -> Comparison:
    """``current`` against ``baseline``, IPU by IPU; a baseline of another model, mode or IPU count is refused."""
    _check_comparable(baseline, current, baseline_path)
    then_layers = {row.layer: row.total_bytes for ipu in baseline.ipus for row in ipu.layer_bytes}
    deltas = tuple(_ipu_delta(before, now, then_layers, limits) for before, now in zip(baseline.ipus, current.ipus))
    return Comparison(baseline_path, baseline.profile_path, baseline.profile_sha256, limits, deltas,
                      baseline.budget, current.budget)


def _check_comparable(baseline: CheckRecord, current: CheckRecord, path: str) -> None:
    if len(baseline.ipus) != len(current.ipus):
        raise BaselineError(f"{path}: the baseline checks {len(baseline.ipus)} IPUs, this check "
                            f"{len(current.ipus)}; compare with a result of the same number of IPUs "
                            "(check the base branch's config, or drop --baseline once to start a new one)")
    if baseline.mode != current.mode:
        raise BaselineError(f"{path}: the baseline checks {baseline.mode}, this check {current.mode}; "
                            "compare with a result of the same mode")
    if not set(baseline.layers) & set(current.layers):
        raise BaselineError(f"{path}: the baseline has none of this model's layers (its first: "
                            f"{', '.join(baseline.layers[:3])}); it is the result of another model, or of other "
                            "layer options: give the result of this model's base branch")


def _ipu_delta(before: CheckedIpu, now: CheckedIpu, then_layers: dict[str, int], limits: GrowthLimits) -> IpuDelta:
    layers = [NameDelta(row.layer, then_layers.get(row.layer), row.total_bytes) for row in now.layer_bytes]
    then_vars = {v.name: v.bytes for v in before.largest_live}
    now_vars = {v.name: v.bytes for v in now.largest_live}
    variables = [NameDelta(name, then_vars.get(name), now_vars.get(name)) for name in {**then_vars, **now_vars}]
    return IpuDelta(
        ipu=now.ipu, layers=now.layers, baseline_worst_tile_bytes=before.worst_tile_bytes,
        worst_tile_bytes=now.worst_tile_bytes, baseline_headroom=before.headroom, headroom=now.headroom,
        fits=now.fits, allowed_growth=limits.allowed(before.worst_tile_bytes),
        layers_added=tuple(x for x in now.layers if x not in before.layers),
        layers_removed=tuple(x for x in before.layers if x not in now.layers),
        layer_changes=_most_changed(layers), variable_changes=_most_changed(variables))


def _most_changed(deltas: Iterable[NameDelta]) -> tuple[NameDelta, ...]:
    """The changed ones, largest change first (then by name: the same inputs give the same order)."""
    changed = [d for d in deltas if d.change != 0 or d.baseline_bytes is None or d.bytes is None]
    # Those in both first: a name on one side only has no change to rank it by, only its bytes.
    changed.sort(key=lambda d: (d.baseline_bytes is None or d.bytes is None, -abs(d.change), d.name))
    return tuple(changed[:TOP_CHANGES])

"""A check as a record to keep: the result file of ``popliner check -o result.json``, and reading one back.

The record holds plain values only (no per-tile arrays), so a record read
from a file and one made by the check are the same kind of value and
:func:`popliner.baseline.compare_checks` takes either. The file's layout is
documented by ``popliner/profile/check-result-v1.schema.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from popliner.analysis import Analysis
from popliner.check import CheckResult
from popliner.config.model import PipelineConfig
from popliner.memory.overflow import LiveVariable, overflow_detail

__all__ = ["CHECK_FORMAT", "CHECK_VERSION", "LARGEST_VARIABLES", "CheckRecord", "CheckedIpu", "LayerBytes",
           "check_record"]

#: The ``format`` and ``version`` a result file carries.
CHECK_FORMAT = "popliner-check"
CHECK_VERSION = 1
#: How many of the largest variables live on an IPU's worst tile the record keeps.
LARGEST_VARIABLES = 10


@dataclass(frozen=True)
class LayerBytes:
    """A layer alone, as the layer table gives it: ``Total (bytes)`` (summed over tiles) and ``Worst-tile bytes``."""

    layer: str
    total_bytes: int
    worst_tile_bytes: int


@dataclass(frozen=True)
class CheckedIpu:
    """One IPU of a check: its worst tile against the budget, what is on it, its layers and largest variables."""

    ipu: int
    layers: tuple[str, ...]
    worst_tile: int
    worst_tile_bytes: int
    budget: int
    #: Bytes on the worst tile by component (the model's five or six, then ``stash`` and ``copy_buffers``).
    components: tuple[tuple[str, int], ...]
    stash_entries: int
    copy_buffer: int
    layer_bytes: tuple[LayerBytes, ...]
    #: The step where the IPU's variables peak on its worst tile (-1: none there), and the largest live then.
    peak_step: int
    largest_live: tuple[LiveVariable, ...]

    @property
    def headroom(self) -> int:
        """Bytes left to the budget on the worst tile (negative when over): the rule of ``StageResult.headroom``."""
        return self.budget - self.worst_tile_bytes

    @property
    def fits(self) -> bool:
        return self.headroom >= 0


@dataclass(frozen=True)
class CheckRecord:
    """A whole check: where its figures came from, the options they assume, and each IPU."""

    popliner_version: str
    profile_path: str
    profile_sha256: str
    config_path: str
    mode: str
    #: The options the figures assume, JSON-ready (mode, framework, training, layer options, budget fraction).
    options: Mapping[str, Any]
    budget: int
    ipus: tuple[CheckedIpu, ...]

    @property
    def fits(self) -> bool:
        return all(i.fits for i in self.ipus)

    @property
    def layers(self) -> tuple[str, ...]:
        return tuple(layer for ipu in self.ipus for layer in ipu.layers)


def check_record(analysis: Analysis, result: CheckResult, config: PipelineConfig, *,
                 budget_fraction: float | None) -> CheckRecord:
    """The record of ``result``, the check of ``config`` from ``analysis``."""
    from popliner import __version__
    from popliner.breakdown import layer_rows
    from popliner.config.layering import layer_record

    rows = {row.layer: row for row in layer_rows(analysis)}
    ipus = []
    for k, (ipu, layers) in enumerate(zip(result.ipus, config.layer_groups)):
        detail = overflow_detail(analysis.model, analysis.stage_ops(layers, k == 0), ipu.worst_tile, LARGEST_VARIABLES)
        ipus.append(CheckedIpu(
            ipu=ipu.ipu, layers=ipu.layers, worst_tile=ipu.worst_tile, worst_tile_bytes=ipu.worst_tile_bytes,
            budget=ipu.budget, components=tuple(ipu.worst_components.items()), stash_entries=ipu.stash_entries,
            copy_buffer=ipu.copy_buffer,
            layer_bytes=tuple(LayerBytes(name, rows[name].memory.total, rows[name].worst_tile_bytes)
                              for name in ipu.layers if name in rows),
            peak_step=detail.step, largest_live=detail.largest_live))
    # The training options as the config records them: what the figures assume (``compiled`` for a profile
    # compiled with recomputation), the same whether `check` or `--solve` made the record.
    training = config.options.as_document() if config.options is not None else None
    options: dict[str, Any] = {
        "mode": config.mode,
        "framework": analysis.framework.name,
        "training": training,
        "layer_options": {name: value for name, value in layer_record(analysis.options)},
        "budget_fraction": budget_fraction,
    }
    return CheckRecord(__version__, result.profile_path, analysis.profile.sha256, result.config_path, config.mode,
                       options, result.budget, tuple(ipus))

"""The one door of a CI check: a config's IPUs recomputed from a profile, kept as a record, and compared.

``popliner check`` and ``popliner PROFILE --solve --config-out ... --baseline``
both call :func:`check_report`, so a split checks the same whichever
command checks it.
"""

from __future__ import annotations

from dataclasses import dataclass

from popliner.analysis import Analysis
from popliner.baseline import Comparison, GrowthLimits, compare_checks
from popliner.check import CheckResult, check_config
from popliner.checkrecord import CheckRecord, check_record
from popliner.config.model import PipelineConfig

__all__ = ["Baseline", "CheckReport", "check_report"]


@dataclass(frozen=True)
class Baseline:
    """A saved check to compare with (read before any work: :func:`popliner.checkfile.read_record`)."""

    path: str
    record: CheckRecord
    limits: GrowthLimits = GrowthLimits()


@dataclass(frozen=True)
class CheckReport:
    """A check (``result``, with per-tile figures), its record (plain values, what ``-o FILE.json`` keeps), and
    its comparison with a baseline when one was given."""

    result: CheckResult
    record: CheckRecord
    comparison: Comparison | None = None

    @property
    def fits(self) -> bool:
        return self.result.fits

    @property
    def failed(self) -> bool:
        """An IPU over budget, or grown beyond the limits: exit 1."""
        return not self.fits or (self.comparison is not None and self.comparison.failed)


def check_report(analysis: Analysis, config: PipelineConfig, config_path: str, *, budget: int,
                 budget_fraction: float | None = None, baseline: Baseline | None = None) -> CheckReport:
    """Each IPU of ``config`` against ``budget`` (:func:`popliner.check.check_config`), recorded and compared."""
    result = check_config(analysis, config, config_path, budget=budget)
    record = check_record(analysis, result, config, budget_fraction=budget_fraction)
    comparison = None
    if baseline is not None:
        comparison = compare_checks(baseline.record, record, baseline.limits, baseline_path=baseline.path)
    return CheckReport(result, record, comparison)

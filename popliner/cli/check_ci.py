"""What ``check`` and ``popliner PROFILE --solve --config-out`` share as CI gates: the baseline options, the
result's outputs, GitHub's annotations and job summary, and exit 1.

The command reads its options here into a :class:`Gate` (the baseline read
and the outputs checked before any work), and hands the
:class:`~popliner.checkreport.CheckReport` the library returns to
:func:`finish`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

from popliner.cli.options import FiniteFloat, stacked
from popliner.errors import DoesNotFitError, UsageProblem

if TYPE_CHECKING:  # the command's module is imported for --help: the library only when it runs
    from popliner.checkreport import Baseline, CheckReport
    from popliner.writers.writer import Writer

__all__ = ["CiContext", "Gate", "baseline_options", "finish", "gate"]

log = logging.getLogger("popliner")

F = TypeVar("F", bound=Callable[..., Any])


def baseline_options(func: F) -> F:
    """``--baseline``, ``--max-growth`` and ``--max-growth-bytes``."""
    return stacked(
        click.option("--baseline", type=click.Path(dir_okay=False, path_type=str), metavar="OLD.json",
                     help="Compare with a saved result (`popliner check -o OLD.json` on the base branch): per IPU "
                          "the growth of the worst tile, and the layers and variables that changed most."),
        click.option("--max-growth", type=FiniteFloat(0.0, 1e6), default=None, metavar="F",
                     help="With --baseline: fail (exit 1) when an IPU's worst tile grew by more than F of the "
                          "baseline's (0.01: 1%)."),
        click.option("--max-growth-bytes", type=click.IntRange(0, 2**40), default=None, metavar="N",
                     help="With --baseline: fail (exit 1) when an IPU's worst tile grew by more than N bytes."),
    )(func)


@dataclass(frozen=True)
class CiContext:
    """What the environment says about the CI: GitHub Actions (annotations), and its job-summary file."""

    github_actions: bool = False
    step_summary: str | None = None

    @classmethod
    def of(cls, environ: Mapping[str, str]) -> CiContext:
        return cls(environ.get("GITHUB_ACTIONS") == "true", environ.get("GITHUB_STEP_SUMMARY") or None)


@dataclass(frozen=True)
class Gate:
    """The baseline to compare with, and where the CI's outputs go."""

    baseline: Baseline | None
    ci: CiContext


def gate(baseline: str | None, max_growth: float | None, max_growth_bytes: int | None,
         environ: Mapping[str, str]) -> Gate:
    """Before any work: the limits make sense, the baseline reads, the job summary can be appended to."""
    from popliner.baseline import GrowthLimits
    from popliner.checkfile import read_record
    from popliner.checkreport import Baseline
    from popliner.fileio import check_appendable

    if baseline is None and (max_growth is not None or max_growth_bytes is not None):
        raise UsageProblem(f"{'--max-growth' if max_growth is not None else '--max-growth-bytes'} needs "
                           "--baseline OLD.json: the growth is measured against a saved result")
    ci = CiContext.of(environ)
    if ci.step_summary:
        check_appendable(ci.step_summary)
    saved = None
    if baseline is not None:
        saved = Baseline(baseline, read_record(baseline), GrowthLimits(max_growth, max_growth_bytes))
    return Gate(saved, ci)


def finish(report: CheckReport, ci: CiContext, outputs: Mapping[str, tuple[str | None, Writer]], force: bool,
           *, stderr_outputs: frozenset[str] = frozenset()) -> None:
    """Write ``report`` to each output (name -> (path, writer)); then the CI's annotations and job summary;
    exit 1 (:class:`DoesNotFitError`) when an IPU is over budget or grew beyond the limits."""
    from popliner.fileio import is_stdout
    from popliner.writers.writer import write_output

    for name, (path, writer) in outputs.items():
        write_output(report, "/dev/stderr" if name in stderr_outputs else path, force, writer)
        if path and not is_stdout(path) and name not in stderr_outputs:
            log.info("wrote %s", path)
    if ci.github_actions:
        from popliner.writers.github import workflow_commands

        for line in workflow_commands(report):
            click.echo(line, err=True)
    if ci.step_summary:
        from popliner.fileio import append_whole
        from popliner.writers.check_md import markdown_summary

        append_whole(ci.step_summary, markdown_summary(report) + "\n")
    if report.failed:
        raise DoesNotFitError(_failure(report))


def _failure(report: CheckReport) -> str:
    from popliner.writers.check_delta import failure_line

    over = sum(not i.fits for i in report.result.ipus)
    parts = [f"{over} of {len(report.result.ipus)} IPUs do not fit"] if over else []
    if report.comparison is not None and report.comparison.grown_beyond:
        parts.append(failure_line(report.comparison))
    return "; ".join(parts)


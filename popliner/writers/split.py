"""The outputs of a planned split: the split JSON, the people's view on stderr, the configs, the report, plots.

Each function takes a :class:`popliner.plan.SplitPlan` (and where to write);
none of them solves anything: what they show was decided by the planner.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from popliner.plan import SplitPlan
from popliner.progress import phase
from popliner.textsafe import shown
from popliner.writers.formats import writer_for
from popliner.writers.writer import write_output

__all__ = ["suffixed", "write_ipu_config", "write_plots", "write_report", "write_split", "write_summary"]

log = logging.getLogger("popliner")


def suffixed(path: str, tag: str) -> str:
    """``NAME-tag.EXT`` beside ``NAME.EXT`` (the split and tiles images next to ``--plot``)."""
    p = Path(path)
    return str(p.with_name(f"{p.stem}-{tag}{p.suffix}"))


def write_split(plan: SplitPlan, config_out: str | None, force: bool, config: Callable[[], Any], *,
                split_out: str | None = None) -> None:
    """The picture and table on stderr, the split JSON on stdout (or in ``split_out``: ``-o FILE.json``), and the
    pipeline config (``--config-out``; ``config`` makes it, once it is wanted)."""
    from popliner.writers.split_report import split_picture, split_table

    analysis, split = plan.analysis, plan.split
    if log.isEnabledFor(logging.WARNING):  # -q keeps stderr to errors only
        click.echo(split_picture(split, bool((analysis.layers.layer_of_op < 0).any())), err=True)
        if not split.fits:
            click.echo(f"popliner: no split fits: {split.note}"
                       + ("; the best effort below is over budget" if split.stages else ""), err=True)
        if split.stages:
            click.echo(split_table(split), err=True)
    write_output(plan, split_out, force, writer_for(None, "SplitPlan", "json"))
    if split_out:
        log.info("wrote %s", split_out)
    if config_out and split.stages:
        # The summary says "wrote".
        write_output(config(), config_out, force, writer_for(None, "PipelineConfig", "yaml"))


def write_ipu_config(cfg: Any, path: str, force: bool) -> None:
    """optimum-graphcore's ``ipu_config.json`` for the split: the config's own record (the YAML's optimum snippet)."""
    from popliner.config.snippets import optimum_say

    optimum_say(cfg)
    write_output(cfg, path, force, writer_for(None, "PipelineConfig", "ipu_config"))  # the summary says "wrote"


def write_report(plan: SplitPlan, cfg: Any, path: str, force: bool) -> None:
    """The HTML review report of the split (``cfg``: its pipeline config)."""
    from popliner.report import build_report
    from popliner.writers.html import write_report as write_page

    with phase("writing the report"):
        page = build_report(plan.analysis, cfg, budget=plan.split.budget_bytes,
                            source=f"popliner --solve ({plan.split.solver})",
                            link_bandwidth=plan.request.link_bandwidth)
        write_page(page, path, force=force)
    log.info("wrote %s", path)


def write_plots(plan: SplitPlan | None, analysis: Any, plot: str, force: bool, budget: int) -> None:
    """``--plot``: memory per layer; with a split, also NAME-split and NAME-tiles beside it."""
    from popliner.breakdown import build_breakdown
    from popliner.writers.plots import plot_layers, plot_split, plot_tiles

    with phase("plotting"):
        breakdown = build_breakdown(analysis, with_operations=False, with_totals=False)
        plot_layers(breakdown, plot, budget_bytes=budget, force=force)
        log.info("wrote %s", plot)
        if plan is None or not plan.split.stages:
            return
        split = plan.split
        # The plots name the training options their figures assume (the applied recomputation).
        assumes = breakdown.training.summary() if breakdown.training is not None else None
        plot_split(split, suffixed(plot, "split"), force=force, assumes=assumes)
        plot_tiles(split.stages, suffixed(plot, "tiles"), force=force,
                   title=f"Memory per tile of each IPU ({analysis.mode}, stash and copy buffers included)"
                   + (f"\ntraining options: {assumes}" if assumes else ""))
        log.info("wrote %s and %s", suffixed(plot, "split"), suffixed(plot, "tiles"))


def write_summary(plan: SplitPlan, argv: list[str], config_out: str | None, ipu_config_out: str | None) -> None:
    """The human summary on stderr: IPUs used, whether fewer would do, what to run next; the hint before exit 3."""
    from popliner.writers.split_report import NextSteps, solve_command, split_summary

    if not log.isEnabledFor(logging.WARNING):
        return
    split, analysis = plan.split, plan.analysis
    config = config_out or "pipeline.yaml"
    steps = NextSteps(solve_command(argv, config), config, bool(config_out and split.stages), analysis.profile.path)
    from popliner.breakdown import profile_coverage

    coverage = profile_coverage(analysis) if analysis.model.has_other else None
    click.echo(split_summary(split, plan.facts, steps, plan.request.ipus == "fewest", coverage=coverage), err=True)
    for near in plan.near:
        click.echo(f"popliner: {near.line()}", err=True)
    if config_out and split.stages and not split.fits:  # when it fits, the summary's "next:" line says it
        click.echo(f"popliner: wrote {shown(config_out)} (the best-effort split above, over budget)", err=True)
    if ipu_config_out and split.stages:
        click.echo(f"popliner: wrote {ipu_config_out} (optimum-graphcore IPUConfig)", err=True)
    if plan.suggestion is not None:
        _say_suggestion(plan)


def _say_suggestion(plan: SplitPlan) -> None:
    from popliner.training_choice import training_flags

    found, limit = plan.suggestion, plan.request.time_limit
    assert found is not None
    if found.options is not None and found.fewest is not None:
        flags = training_flags(found.options, plan.analysis.options.training)
        click.echo(f"popliner: fits on {found.fewest} IPU{'' if found.fewest == 1 else 's'} with {flags}", err=True)
    if found.out_of_time:
        click.echo(f"popliner: the {limit:g} s time limit ran out after trying {found.tried} of "
                   f"{found.candidates} other training options (recomputation, off-chip optimizer state)"
                   f"{'; another may need fewer IPUs' if found.options is not None else ''}; "
                   "a larger --time-limit tries them all", err=True)

"""``popliner PROFILE [options]``: breakdowns, spreadsheets, plots and the split solver.

The command only turns its options into requests (:class:`AnalysisOptions`
to load the profile, :class:`popliner.plan.SplitRequest` to split it), calls
the library, and hands what comes back to the writers.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from pathlib import Path
from typing import Any

import click

from popliner.analysis import AnalysisOptions, load_analysis
from popliner.cli.analyse_options import HiddenArgument, analyse_options
from popliner.cli.analyse_outputs import Outputs, check_outputs, route_output, tables_writer
from popliner.cli.analyse_outputs import outputs as chosen_outputs
from popliner.cli.check_ci import Gate, finish, gate
from popliner.cli.options import headroom_given
from popliner.config.layering import analysis_fields
from popliner.errors import InfeasibleSplitError, UsageProblem
from popliner.fileio import one_stdout
from popliner.layout import HeadPlacement
from popliner.memory.training import Recompute, TrainingOptions
from popliner.memory.work import check_workbook_rows
from popliner.plan import SplitPlan, SplitRequest, plan_split, usable_ipus
from popliner.progress import Tracker, phase, progress_wanted, tracking
from popliner.scenario import TrainingRequest, tables_scenario
from popliner.writers import split as split_writers
from popliner.writers.formats import check_output, writer_for
from popliner.writers.tables import Tables
from popliner.writers.writer import Writer, write_output

__all__ = ["command"]

log = logging.getLogger("popliner")


@click.command(name="analyse", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("profile", type=click.Path(dir_okay=False, path_type=str))
@click.argument("debug_info", cls=HiddenArgument, required=False, type=click.Path(dir_okay=False, path_type=str))
@analyse_options
def command(**params: Any) -> None:
    """Analyse PROFILE (format-v1 .json or .json.gz): memory per operation and layer, and splits.

    \b
    popliner model.json                       layer breakdown (CSV) on stdout
    popliner model.json --operation-breakdown --format tsv -o ops.tsv
    popliner model.json -o review.xlsx --solve --num-ipus 4
    popliner model.json --solve --num-ipus 4 --config-out pipeline.yaml
    popliner model.json --solve --min-ipus --ipu-config-out ipu_config.json
    """
    stream = sys.stderr
    quiet = not log.isEnabledFor(logging.WARNING)
    with tracking(stream if progress_wanted(stream, quiet) else None) as tracker:
        try:
            _run(params)
        finally:  # also when no split fits (exit 3)
            _say_timings(tracker)


def _say_timings(tracker: Tracker) -> None:
    """-v: how long each step took (the steps that ran)."""
    if log.isEnabledFor(logging.DEBUG) and tracker.timings:
        click.echo("popliner: time per step:\n" + tracker.breakdown(), err=True)


def _run(p: dict[str, Any]) -> None:
    _refuse_poplar_report(p["profile"], p["debug_info"])
    route_output(p)
    outputs = chosen_outputs(p)
    check_outputs(p, outputs)
    gate = _check_gate(p)
    writer = _tables_writer(p["fmt"], p["output"])
    options = _analysis_options(p)
    # Resolved as a split over --num-ipus would be (the framework's defaults, the compiled facts, the options).
    request = TrainingRequest(p["recompute"], p["head_placement"], p["optimizer_state"], options.training)
    analysis = tables_scenario(load_analysis(p["profile"], options, use_cache=not p["no_cache"],
                                             cache_dir=p["cache_dir"]), request, p["num_ipus"])
    log.info("framework: %s", analysis.framework.describe())
    if analysis.framework.origin == "ipu-config-out":
        log.warning("--ipu-config-out: planned as optimum-graphcore builds the pipeline (its head placement and "
                    "recomputation), not as %s; the split can differ from one without --ipu-config-out "
                    "(--framework chooses another)", analysis.framework.evidence)
    if p["output"] and p["output"].lower().endswith(".xlsx"):
        check_workbook_rows(analysis.profile.path, analysis.ops.count)  # before a solve, which it would follow
    plan = plan_split(analysis, _split_request(p)) if p["solve"] else None
    if plan is not None:
        analysis = plan.analysis
    budget = plan.split.budget_bytes if plan is not None else _split_request(p).budget(analysis)
    # The planner's count (one IPU per layer at most, as the solve's), also for a workbook without --solve.
    if plan is not None:
        ipus = plan.problem.num_ipus
    else:
        ipus = usable_ipus(analysis, p["num_ipus"]) if analysis.layer_names else 1
    with phase("writing tables"):
        _write_tables(analysis, outputs, writer, p, plan, budget, ipus)
    if p["plot"]:
        split_writers.write_plots(plan, analysis, p["plot"], p["force"], budget)
    if plan is not None:
        _write_split(plan, p, gate)


def _analysis_options(p: dict[str, Any]) -> AnalysisOptions:
    layer_fields = analysis_fields(p)  # the layer options, read as a config's are
    # `auto` is a request for the planner: the profile is read with no recomputation, which auto tries first.
    # Unset or `auto`: the planner decides (the framework's defaults); the profile is read without them.
    recompute: Recompute = p["recompute"] if p["recompute"] not in (None, "auto") else "none"
    placement: HeadPlacement = p["head_placement"] if p["head_placement"] not in (None, "auto") else "first"
    # Unset: as the profile was compiled; the planner resolves it (popliner.scenario.resolve), the tables read on chip.
    training = TrainingOptions(
        recompute=recompute, optimizer_state=p["optimizer_state"] or "on-chip",
        replication_factor=p["replication_factor"],
        sharded_optimizer_state=p["sharded_optimizer_state"], head_placement=placement,
        update_regex=p["update_regex"], optimizer_state_regex=p["optimizer_state_regex"])
    return AnalysisOptions(**layer_fields, mode=p["mode"], training=training,  # type: ignore[arg-type]
                           framework=p["framework"], for_ipu_config=bool(p["ipu_config_out"]))


def _split_request(p: dict[str, Any]) -> SplitRequest:
    pairs = []
    for item in p["same_ipu"]:
        parts = [s.strip() for s in item.split(",")]
        if len(parts) != 2:
            raise UsageProblem(f"--same-ipu {item!r}: expected two layer names separated by a comma")
        pairs.append((parts[0], parts[1]))
    quiet = not log.isEnabledFor(logging.WARNING)
    return SplitRequest(
        num_ipus=p["num_ipus"], ipus="fewest" if p["min_ipus"] else "exactly" if p["exact_ipus"] else "at-most",
        recompute=p["recompute"], head_placement=p["head_placement"], optimizer_state=p["optimizer_state"],
        mem_per_tile=p["mem_per_tile"], headroom=headroom_given(p["budget"], p["headroom"]),
        split_after=tuple(p["split_after"]), same_ipu=tuple(pairs),
        min_layers=p["min_layers_per_stage"], keep_shared_together=p["keep_shared_vars_together"],
        solver=p["solver"], time_limit=p["time_limit"], seed=p["seed"], link_bandwidth=p["link_bandwidth"],
        fit_facts=not quiet, suggest=not quiet, spelling="options")


def _refuse_poplar_report(profile: str, debug_info: str | None) -> None:
    from popliner.export import export_hint, is_poplar_report

    if is_poplar_report(profile):
        raise UsageProblem(export_hint(profile))
    if debug_info:
        raise UsageProblem(f"unexpected extra argument {debug_info!r}: give one profile file "
                           "(a Poplar profile.pop and debug.cbor pair goes to `popliner export` first)")


def _tables_writer(fmt: str | None, output: str | None) -> Writer:
    """The tables' format: --format, else -o's name (the map; CSV for any other). A mismatch is said."""
    suffix = Path(output).suffix.lower().lstrip(".") if output else ""
    if fmt and output and suffix == "xlsx":
        log.warning("--format %s is ignored: %s is written as an XLSX workbook", fmt, output)
    elif fmt and suffix in ("csv", "tsv") and suffix != fmt:
        log.warning("writing %s tables to %s as you asked (--format %s), although its name ends .%s",
                    fmt.upper(), output, fmt, suffix)
    if fmt and suffix != "xlsx":
        return writer_for(None, "Tables", fmt)
    return tables_writer(output)


def _write_tables(analysis: Any, outputs: Outputs, writer: Writer, p: dict[str, Any], plan: SplitPlan | None,
                  budget: int, num_ipus: int) -> None:
    from popliner.breakdown import affinity_matrix, build_breakdown, interlayer_matrix

    xlsx = writer.name == "xlsx"
    if not outputs.any_table and not xlsx:
        return
    split = plan.split if plan is not None else None
    breakdown = build_breakdown(analysis, with_operations=outputs.operation_breakdown or xlsx,
                                with_totals=outputs.memory_totals or xlsx,
                                planner_ipus=max(num_ipus, split.num_ipus_used if split else 0) if xlsx else None,
                                requested_recompute=plan.recompute_requested if plan is not None else p["recompute"])
    matrices = tuple(m(analysis) for wanted, m in ((outputs.memory_affinity, affinity_matrix),
                                                   (outputs.interlayer, interlayer_matrix)) if wanted)
    tables = Tables(breakdown, outputs.operation_breakdown, outputs.layer_breakdown, outputs.memory_totals, matrices,
                    split, budget, num_ipus)
    write_output(tables, p["output"], p["force"], writer)
    if p["output"]:
        log.info("wrote %s", p["output"])


def _check_gate(p: dict[str, Any]) -> Gate | None:
    """--check-out and --baseline: checked before any work (names, the baseline file, the job summary)."""
    if not (p["check_out"] or p["baseline"] or p["max_growth"] is not None or p["max_growth_bytes"] is not None):
        return None
    if not (p["solve"] and p["config_out"]):
        raise UsageProblem(f"{'--check-out' if p['check_out'] else '--baseline'} needs --solve and --config-out: "
                           "the config written is checked as `popliner check` checks it")
    from popliner.fileio import distinct_files

    distinct_files({"PROFILE": p["profile"], "--baseline": p["baseline"]},
                   {"--check-out": p["check_out"], "--config-out": p["config_out"], "-o": p["output"] or p["split_out"],
                    "--ipu-config-out": p["ipu_config_out"], "--report": p["report"], "--plot": p["plot"]})
    check_output(p["check_out"], p["force"], "CheckReport", "text", option="--check-out", what="a check")
    one_stdout({"--check-out -": p["check_out"], "the split JSON (--solve)": not p["split_out"]})
    return gate(p["baseline"], p["max_growth"], p["max_growth_bytes"], os.environ)


def _gate_split(plan: SplitPlan, cfg: Any, p: dict[str, Any], checks: Gate) -> None:
    """The config just written, checked as `popliner check CONFIG --profile PROFILE` checks it (the same library
    door), kept in --check-out and compared with --baseline; exit 1 when it fails."""
    from popliner.checkreport import check_report
    from popliner.writers.check_delta import comparison_lines

    report = check_report(plan.analysis, cfg, p["config_out"], budget=plan.split.budget_bytes,
                          budget_fraction=headroom_given(p["budget"], p["headroom"]), baseline=checks.baseline)
    if report.comparison is not None and log.isEnabledFor(logging.WARNING):
        click.echo("popliner: " + "\n          ".join(comparison_lines(report.comparison)), err=True)
    writer = writer_for(p["check_out"], "CheckReport", "text")
    finish(report, checks.ci, {"--check-out": (p["check_out"], writer)} if p["check_out"] else {}, p["force"])


def _write_split(plan: SplitPlan, p: dict[str, Any], checks: Gate | None = None) -> None:
    """The split's outputs, the summary, the check of the config (--check-out, --baseline), and exit 3 when
    nothing fits."""
    from popliner.config.model import analysis_config
    from popliner.config.snippets import optimum_check

    # Made when first wanted: a --gradient-accumulation it refuses stops the command where it always did.
    # The training options recorded are those the split's figures were computed with.
    config = functools.cache(lambda: analysis_config(plan.analysis, plan.split, p["gradient_accumulation"],
                                                     plan.training, p["matmul_proportion"]))
    if p["ipu_config_out"] and plan.split.stages:  # refused before anything is written or printed
        optimum_check(config(), "--ipu-config-out")
    split_writers.write_split(plan, p["config_out"], p["force"], config, split_out=p["split_out"])
    if p["ipu_config_out"] and plan.split.stages:
        split_writers.write_ipu_config(config(), p["ipu_config_out"], p["force"])
    if p["report"] and plan.split.stages:
        split_writers.write_report(plan, config(), p["report"], p["force"])
    argv = click.get_current_context().find_root().meta.get("popliner.argv", [])
    split_writers.write_summary(plan, argv, p["config_out"], p["ipu_config_out"])
    if not plan.fits:
        raise InfeasibleSplitError("")  # the summary above says why and what would fit
    if checks is not None:
        _gate_split(plan, config(), p, checks)

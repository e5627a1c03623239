"""``popliner PROFILE [options]``: breakdowns, spreadsheets, plots and the split solver."""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click

from popliner.analysis import DEFAULT_BACKWARD_REGEX, Analysis, AnalysisOptions, load_analysis
from popliner.cli.options import (
    BYTES_PER_TILE,
    LAYERS_PER_STAGE,
    LINK_BANDWIDTH,
    MICRO_BATCHES,
    NUM_IPUS,
    REPLICAS,
    SECONDS,
    SEED,
    ipus_for_layers,
    output_stream,
)
from popliner.errors import EXIT_NO_SPLIT, UsageProblem
from popliner.fileio import atomic_write, check_writable, distinct_files, is_stdout, one_stdout
from popliner.framework import FRAMEWORKS
from popliner.memory.training import (
    DEFAULT_UPDATE_REGEX,
    HEAD_PLACEMENTS,
    OPTIMIZER_STATES,
    RECOMPUTE_MODES,
    TrainingOptions,
    training_record,
)
from popliner.ops.layers import AUTO_PRESET, DEFAULT_INPUTS_REGEX_LAYER_0, preset_names
from popliner.ops.operations import DEFAULT_OP_LAYERS
from popliner.progress import Tracker, phase, progress_wanted, tracking

__all__ = ["command"]

log = logging.getLogger("popliner")


@dataclass(frozen=True)
class Outputs:
    """Which tables/files the user asked for."""

    operation_breakdown: bool
    layer_breakdown: bool
    memory_totals: bool
    memory_affinity: bool
    interlayer: bool

    @property
    def any_table(self) -> bool:
        return any((self.operation_breakdown, self.layer_breakdown, self.memory_totals, self.memory_affinity,
                    self.interlayer))


def _fraction(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not 0.0 <= value < 1.0:
        raise click.BadParameter(f"{value} is not a fraction in [0, 1)")
    return value


def _matmul_proportion(ctx: click.Context, param: click.Parameter, value: tuple[float, ...]) -> tuple[float, ...]:
    for v in value:
        if not 0.0 < v <= 1.0:
            raise click.BadParameter(f"{v} is not a fraction in (0, 1]")
    return value


class HiddenArgument(click.Argument):
    """An argument that is accepted only to be refused with a helpful message: not in the usage line."""

    def get_usage_pieces(self, ctx: click.Context) -> list[str]:
        return []


@click.command(name="analyse", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("profile", type=click.Path(dir_okay=False, path_type=str))
@click.argument("debug_info", cls=HiddenArgument, required=False, type=click.Path(dir_okay=False, path_type=str))
@click.option("--operation-breakdown", is_flag=True, help="One row per operation: layer, note, name, components.")
@click.option("--layer-breakdown", is_flag=True, help="One row per layer (the default table).")
@click.option("--memory-totals", is_flag=True, help="Totals by category beside the profile's own figures.")
@click.option("--memory-affinity", is_flag=True, help="Layer x layer bytes of variables both layers use.")
@click.option("--interlayer-communication", "interlayer", is_flag=True,
              help="Layer x layer bytes going live in one layer and dying in the other.")
@click.option("--format", "fmt", type=click.Choice(["csv", "tsv"]), default=None,
              help="csv: values; tsv: live formulas. Default from the -o suffix, else csv.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str),
              help="Write tables here instead of stdout; a .xlsx name writes the review workbook.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=str),
              help="PNG/SVG of per-layer memory; with --solve also NAME-split and NAME-tiles images.")
@click.option("-f", "--force", is_flag=True, help="Overwrite existing output files.")
@click.option("--layer-preset", type=click.Choice([AUTO_PRESET, *preset_names()]), default=AUTO_PRESET,
              show_default=True, help="Layer naming rule: PopART scopes or the module paths of PyTorch models; "
              "auto picks the one that gives the most operations a layer.")
@click.option("--layer-name-regex", default=None,
              help="Regex on operation names, group 1 is the layer; overrides --layer-preset.")
@click.option("--inputs-regex-layer-0", default=DEFAULT_INPUTS_REGEX_LAYER_0, show_default=True,
              help="Operations whose inputs match go to the first layer.")
@click.option("--layer-order", type=click.Choice(["steps", "natural"]), default="steps", show_default=True,
              help="steps: order of first appearance; natural: natural sort of layer names.")
@click.option("--op-layers", default=",".join(DEFAULT_OP_LAYERS), show_default=True,
              help="Debug-context layers that name an operation (comma separated).")
@click.option("--all-vars", is_flag=True,
              help="Count variables of operations without a layer too (PopLiner counted only layered ones).")
@click.option("--mode", type=click.Choice(["auto", "inference", "training"]), default="auto", show_default=True,
              help="Training keeps stashes; auto looks for gradient operations.")
@click.option("--backward-regex", default=DEFAULT_BACKWARD_REGEX, show_default=True,
              help="Operation names of the backward pass and weight update.")
@click.option("--recompute", type=click.Choice(list(RECOMPUTE_MODES)), default="none", show_default=True,
              help="Training: recomputation to model (docs/solvers.md); auto = the least that fits.")
@click.option("--optimizer-state", type=click.Choice(list(OPTIMIZER_STATES)), default="on-chip", show_default=True,
              help="Training: off-chip keeps optimizer state in streaming memory, loaded for its update only.")
@click.option("--replication-factor", type=REPLICAS, default=1, show_default=True,
              help="Training: replicas of the pipeline (total IPUs = IPUs x replicas).")
@click.option("--sharded-optimizer-state", is_flag=True,
              help="Training: divide optimizer state over the replicas (replicated tensor sharding).")
@click.option("--head-placement", type=click.Choice(list(HEAD_PLACEMENTS)), default="first", show_default=True,
              help="Operations without a layer: all on the first IPU; or the embedding there and the head on "
                   "the last IPU (last).")
@click.option("--framework", type=click.Choice(list(FRAMEWORKS)), default=None,
              help="The framework that builds the pipeline (default: found in the profile; docs/frameworks.md).")
@click.option("--update-regex", default=DEFAULT_UPDATE_REGEX, show_default=True,
              help="Names of weight-update operations (finds the optimizer state).")
@click.option("--optimizer-state-regex", default=None,
              help="Variable names that are optimizer state (replaces the rule).")
@click.option("--solve", is_flag=True, help="Split the layers over --num-ipus IPUs; JSON on stdout.")
@click.option("--num-ipus", type=NUM_IPUS, default=4, show_default=True, help="IPUs to split over.")
@click.option("--exact-ipus", is_flag=True, help="Use exactly --num-ipus IPUs (ILP), not at most.")
@click.option("--min-ipus", is_flag=True,
              help="Use the fewest IPUs that fit (at most --num-ipus) instead of spreading for throughput.")
@click.option("--mem-per-tile", type=BYTES_PER_TILE, default=None,
              help="Bytes per tile. Default: the profile's bytesPerTile (638976 on Mk2).")
@click.option("--headroom", type=float, default=None, callback=_fraction,
              help="Fraction of each tile kept free. Default: the model's measured shortfall against the "
                   "profile's own tileMemory when it has the compiler's other categories, else 0 "
                   "(README: what fits means).")
@click.option("--solver", type=click.Choice(["ilp", "greedy"]), default="ilp", show_default=True)
@click.option("--time-limit", type=SECONDS, default=60.0, show_default=True,
              help="Seconds for the whole solve: set-up, search, best effort, overflow details, the hint.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Random seed of the ILP solver.")
@click.option("--split-after", multiple=True, metavar="LAYER", help="Force a stage to end after LAYER.")
@click.option("--same-ipu", multiple=True, metavar="A,B", help="Keep layers A and B on one IPU.")
@click.option("--min-layers-per-stage", type=LAYERS_PER_STAGE, default=1, show_default=True)
@click.option("--keep-shared-vars-together", is_flag=True,
              help="Never split between layers that share an always-live variable (tied weights).")
@click.option("--link-bandwidth", type=LINK_BANDWIDTH, default=64e9, show_default=True,
              help="IPU-link bytes per second, for transfer cycles.")
@click.option("--config-out", type=click.Path(dir_okay=False, path_type=str),
              help="With --solve: write the pipeline config (YAML) here.")
@click.option("--gradient-accumulation", type=MICRO_BATCHES, default=None,
              help="Micro-batches per step for the config (default: max(16, 2 x stages)).")
@click.option("--ipu-config-out", type=click.Path(dir_okay=False, path_type=str),
              help="With --solve: write an optimum-graphcore ipu_config.json for the split here.")
@click.option("--matmul-proportion", type=float, multiple=True, callback=_matmul_proportion, metavar="F",
              help="ipu_config.json matmul_proportion: once for every IPU, or once per IPU (default 0.6).")
@click.option("--report", "report", type=click.Path(dir_okay=False, path_type=str), metavar="FILE.html",
              help="With --solve: write the HTML review report of the split here (one self-contained file).")
@click.option("--no-cache", is_flag=True, help="Do not read or write the derived-data cache.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=str), default=None,
              help="Cache folder (default $POPLINER_CACHE_DIR, else ~/.cache/popliner).")
def command(profile: str, debug_info: str | None, operation_breakdown: bool, layer_breakdown: bool,
            memory_totals: bool, memory_affinity: bool, interlayer: bool, fmt: str | None, output: str | None,
            plot: str | None, force: bool, layer_preset: str, layer_name_regex: str | None,
            inputs_regex_layer_0: str, layer_order: str,
            op_layers: str, all_vars: bool, mode: str, backward_regex: str, recompute: str, optimizer_state: str,
            replication_factor: int, sharded_optimizer_state: bool, head_placement: str, framework: str | None,
            update_regex: str, optimizer_state_regex: str | None, solve: bool, num_ipus: int,
            exact_ipus: bool, min_ipus: bool, mem_per_tile: int | None, headroom: float | None, solver: str,
            time_limit: float, seed: int,
            split_after: tuple[str, ...], same_ipu: tuple[str, ...], min_layers_per_stage: int,
            keep_shared_vars_together: bool, link_bandwidth: float, config_out: str | None,
            gradient_accumulation: int | None, ipu_config_out: str | None, matmul_proportion: tuple[float, ...],
            report: str | None, no_cache: bool, cache_dir: str | None) -> None:
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
            _run(**click.get_current_context().params)
        finally:  # also when no split fits (exit 3)
            _say_timings(tracker)


def _say_timings(tracker: Tracker) -> None:
    """-v: how long each step took (the steps that ran)."""
    if log.isEnabledFor(logging.DEBUG) and tracker.timings:
        click.echo("popliner: time per step:\n" + tracker.breakdown(), err=True)


def _run(profile: str, debug_info: str | None, operation_breakdown: bool, layer_breakdown: bool,
         memory_totals: bool, memory_affinity: bool, interlayer: bool, fmt: str | None, output: str | None,
         plot: str | None, force: bool, layer_preset: str, layer_name_regex: str | None, inputs_regex_layer_0: str,
         layer_order: str, op_layers: str, all_vars: bool, mode: str, backward_regex: str, recompute: str,
         optimizer_state: str, replication_factor: int, sharded_optimizer_state: bool, head_placement: str,
         framework: str | None, update_regex: str, optimizer_state_regex: str | None, solve: bool,
         num_ipus: int, exact_ipus: bool, min_ipus: bool, mem_per_tile: int | None, headroom: float | None,
         solver: str,
         time_limit: float, seed: int, split_after: tuple[str, ...], same_ipu: tuple[str, ...],
         min_layers_per_stage: int, keep_shared_vars_together: bool, link_bandwidth: float, config_out: str | None,
         gradient_accumulation: int | None, ipu_config_out: str | None, matmul_proportion: tuple[float, ...],
         report: str | None, no_cache: bool, cache_dir: str | None) -> None:
    _refuse_poplar_report(profile, debug_info)
    outputs = Outputs(operation_breakdown, layer_breakdown, memory_totals, memory_affinity, interlayer)
    plot_to_stdout = bool(plot and is_stdout(plot))  # then it is the only thing on stdout
    # The layer table by default; with --solve (its JSON on stdout) only when -o names a file for it.
    if not outputs.any_table and not (solve and not output) and not (output and output.lower().endswith(".xlsx")) \
            and not (plot_to_stdout and not output):
        outputs = Outputs(False, True, False, False, False)
    if solve and outputs.any_table and not output:
        raise UsageProblem("with --solve, stdout carries the split JSON; write the tables with -o FILE")
    for flag, value in (("--config-out", config_out), ("--ipu-config-out", ipu_config_out),
                        ("--min-ipus", min_ipus), ("--report", report)):
        if value and not solve:
            raise UsageProblem(f"{flag} needs --solve")
    if min_ipus and exact_ipus:
        raise UsageProblem("--min-ipus and --exact-ipus contradict each other; give one")
    fmt = _table_format(fmt, output)
    images = {"--plot": plot, **({"--plot (its -split image)": _suffixed(plot, "split"),
                                  "--plot (its -tiles image)": _suffixed(plot, "tiles")} if plot and solve else {})}
    distinct_files({"PROFILE": profile}, {"-o": output, **images, "--config-out": config_out,
                                          "--ipu-config-out": ipu_config_out, "--report": report})
    # Every output is checked (name, suffix, folder, overwrite) before any output is written.
    if output:
        check_writable(output, force)
    if config_out:
        check_writable(config_out, force, suffixes=(".yaml", ".yml"), what="pipeline config")
    if ipu_config_out:
        check_writable(ipu_config_out, force, suffixes=(".json",), what="IPU config")
    if report:
        check_writable(report, force, suffixes=(".html", ".htm"), what="report")
    one_stdout({"the tables" if not output else "-o -": outputs.any_table and (not output or is_stdout(output)),
                "the split JSON (--solve)": solve, "--config-out -": config_out, "--plot -": plot,
                "--ipu-config-out -": ipu_config_out, "--report -": report})
    if ipu_config_out and head_placement == "first" and num_ipus > 1:
        from popliner.config.snippets import FIRST_PROBLEM

        raise UsageProblem(f"--ipu-config-out: optimum-graphcore cannot build this split: {FIRST_PROBLEM}")
    if plot and solve and is_stdout(plot):
        raise UsageProblem("--plot with --solve writes three images; give a file name, not stdout")
    if plot:
        for image in (plot, *((_suffixed(plot, "split"), _suffixed(plot, "tiles")) if solve else ())):
            check_writable(image, force, suffixes=(".png", ".svg"), what="plot")

    options = AnalysisOptions(
        op_layers=tuple(s.strip() for s in op_layers.split(",") if s.strip()),
        layer_preset=layer_preset, layer_name_regex=layer_name_regex, inputs_regex_layer_0=inputs_regex_layer_0,
        layer_order=layer_order,  # type: ignore[arg-type]
        layered_vars_only=not all_vars, mode=mode, backward_regex=backward_regex,  # type: ignore[arg-type]
        training=TrainingOptions(
            recompute="none" if recompute == "auto" else recompute,  # type: ignore[arg-type]
            optimizer_state=optimizer_state,  # type: ignore[arg-type]
            replication_factor=replication_factor, sharded_optimizer_state=sharded_optimizer_state,
            head_placement=head_placement,  # type: ignore[arg-type]
            update_regex=update_regex, optimizer_state_regex=optimizer_state_regex),
        framework=framework,
    )
    if not options.op_layers:
        raise UsageProblem("--op-layers: give at least one debug-context layer name")
    analysis = load_analysis(profile, options, use_cache=not no_cache, cache_dir=cache_dir)
    log.info("framework: %s", analysis.framework.describe())
    asked_ipus, num_ipus = num_ipus, ipus_for_layers(num_ipus, exact_ipus, len(analysis.layer_names))
    budget_full = mem_per_tile or analysis.profile.target.bytes_per_tile
    if headroom is None:
        from popliner.breakdown import default_headroom

        headroom = default_headroom(analysis)
    budget = int(budget_full * (1.0 - headroom))

    split = None
    if solve:
        problem = _problem(analysis, num_ipus, exact_ipus, budget, split_after, same_ipu, min_layers_per_stage,
                           keep_shared_vars_together)
        # --time-limit bounds the whole solve from here: set-up, search, best effort, overflow details,
        # --recompute auto's further solves and the hint before exit 3.
        started = time.monotonic()
        analysis.engine  # noqa: B018 - built here to time it: the hint's options each build one too
        if analysis.mode == "training":
            from popliner.training_choice import budget_table

            # And the liveness grid (shared with the solve's tables): with the engine, what the hint cannot stop.
            budget_table(analysis, problem, link_bandwidth)
        setup = time.monotonic() - started
        split = _solve(analysis, problem, min_ipus, solver, time_limit, seed, link_bandwidth, started)
        if recompute == "auto":
            analysis, split = _auto_recompute(analysis, problem, split, min_ipus, solver, time_limit, seed,
                                              link_bandwidth, started)
        split = replace(split, num_ipus_requested=asked_ipus)  # what was asked, though one IPU per layer at most
    with phase("writing tables"):
        _write_tables(analysis, outputs, fmt, output, force, split, budget, num_ipus, recompute)
    if plot:
        with phase("plotting"):
            _write_plots(analysis, plot, force, split, budget)
    if split is not None:
        _report_split(analysis, split, config_out, force, gradient_accumulation, recompute, matmul_proportion)
        if ipu_config_out and split.stages:
            _write_ipu_config(analysis, split, ipu_config_out, force, gradient_accumulation, matmul_proportion)
        if report and split.stages:
            with phase("writing the report"):
                _write_report(analysis, split, report, force, gradient_accumulation, link_bandwidth, recompute)
        _summarise(analysis, split, problem, link_bandwidth, min_ipus, config_out, ipu_config_out)
        if not split.fits:
            _suggest_training_options(analysis, problem, link_bandwidth, started + time_limit, time_limit, setup)
            sys.exit(EXIT_NO_SPLIT)


def _refuse_poplar_report(profile: str, debug_info: str | None) -> None:
    from popliner.export import export_hint, is_poplar_report

    if is_poplar_report(profile):
        raise UsageProblem(export_hint(profile))
    if debug_info:
        raise UsageProblem(f"unexpected extra argument {debug_info!r}: give one profile file "
                           "(a Poplar profile.pop and debug.cbor pair goes to `popliner export` first)")


def _table_format(fmt: str | None, output: str | None) -> str:
    """The table format: --format, else the -o suffix, else CSV. A mismatch is said, never silent."""
    suffix = Path(output).suffix.lower().lstrip(".") if output else ""
    if fmt and output and suffix == "xlsx":
        log.warning("--format %s is ignored: %s is written as an XLSX workbook", fmt, output)
    elif fmt and suffix in ("csv", "tsv") and suffix != fmt:
        log.warning("writing %s tables to %s as you asked (--format %s), although its name ends .%s",
                    fmt.upper(), output, fmt, suffix)
    if fmt:
        return fmt
    return "tsv" if suffix == "tsv" else "csv"


def _suffixed(path: str, tag: str) -> str:
    p = Path(path)
    return str(p.with_name(f"{p.stem}-{tag}{p.suffix}"))


def _layer_indices(analysis: Analysis, names: tuple[str, ...], option: str) -> list[int]:
    out = []
    for name in names:
        if name not in analysis.layer_names:
            raise UsageProblem(f"{option} {name!r}: no such layer; layers are {', '.join(analysis.layer_names)}")
        out.append(analysis.layer_names.index(name))
    return out


def _problem(analysis: Analysis, num_ipus: int, exact_ipus: bool, budget: int, split_after: tuple[str, ...],
             same_ipu: tuple[str, ...], min_layers: int, keep_shared: bool) -> Any:
    from popliner.solvers.problem import SplitProblem

    if not analysis.layer_names:
        raise UsageProblem(f"{analysis.profile.path}: no operation got a layer, so there is nothing to split; "
                           "check --layer-name-regex")
    pairs = []
    for item in same_ipu:
        parts = [s.strip() for s in item.split(",")]
        if len(parts) != 2:
            raise UsageProblem(f"--same-ipu {item!r}: expected two layer names separated by a comma")
        a, b = _layer_indices(analysis, tuple(parts), "--same-ipu")
        pairs.append((a, b))
    return SplitProblem(
        num_ipus=num_ipus, budget=budget, exact_ipus=exact_ipus, min_layers=min_layers,
        split_after=tuple(_layer_indices(analysis, split_after, "--split-after")), same_ipu=tuple(pairs),
        keep_shared_together=keep_shared, training=analysis.mode == "training",
    )


def _solve(analysis: Analysis, problem: Any, min_ipus: bool, solver: str, time_limit: float, seed: int,
           link_bandwidth: float, started: float) -> Any:
    import dataclasses

    from popliner.analysis import solve_split
    from popliner.deadline import OutOfTime

    asked = problem
    if min_ipus:
        from popliner.training_choice import fewest_ipus

        with phase("finding the fewest IPUs"):
            try:
                fewest = fewest_ipus(analysis, problem, link_bandwidth, started + time_limit)
            except OutOfTime:
                fewest = None
                log.warning("--min-ipus: the %g s time limit ran out before the fewest IPUs that fit were found; "
                            "solving over at most %d", time_limit, problem.num_ipus)
        if fewest is not None and fewest <= problem.num_ipus:
            problem = dataclasses.replace(problem, num_ipus=fewest, exact_ipus=True)
    log.info("solving: %d layers over %s %d IPUs, %s bytes per tile, %s, solver %s", len(analysis.layer_names),
             "exactly" if problem.exact_ipus else "at most", problem.num_ipus, f"{problem.budget:,}", analysis.mode,
             solver)
    split = solve_split(analysis, problem, solver=solver, time_limit=time_limit, seed=seed,  # type: ignore[arg-type]
                        link_bytes_per_second=link_bandwidth, started=started)
    log.info("solved in %.2f s: %s", split.wall_seconds, split.status)
    if split.num_ipus_requested != asked.num_ipus:
        split = dataclasses.replace(split, num_ipus_requested=asked.num_ipus)
    return split


def _auto_recompute(analysis: Analysis, problem: Any, split: Any, min_ipus: bool, solver: str, time_limit: float,
                    seed: int, link_bandwidth: float, started: float) -> tuple[Analysis, Any]:
    """``--recompute auto``: the first of none, pipeline, every-layer whose split fits (the last tried otherwise)."""
    from popliner.training_choice import AUTO_ORDER, reanalyse

    for mode in AUTO_ORDER[1:]:
        if split.fits or analysis.mode != "training" or analysis.engine.view.recompute == "compiled":
            break
        analysis = reanalyse(analysis, recompute=mode)
        problem = _problem_again(analysis, problem)
        split = _solve(analysis, problem, min_ipus, solver, time_limit, seed, link_bandwidth, started)
    log.warning("--recompute auto chose %s", analysis.engine.view.recompute)
    return analysis, split


def _suggest_training_options(analysis: Analysis, problem: Any, link_bandwidth: float, deadline: float,
                              time_limit: float, setup: float) -> None:
    """Before exit 3 in training: name the usual option that would make the model fit, if one does.

    Within what is left of --time-limit; when it runs out first, say how far the search got.
    """
    from popliner.training_choice import suggest_options, training_flags

    if analysis.mode != "training" or not log.isEnabledFor(logging.WARNING):
        return
    # The solve's engine and its range tables are done with (exit 3 follows): let them go before each
    # option builds an engine of its own, so that a large profile's two engines are not held at once.
    analysis.__dict__.pop("engine", None)
    with phase("trying recomputation and off-chip optimizer state"):
        found = suggest_options(analysis, problem, link_bandwidth, deadline, setup_seconds=setup)
    if found.options is not None and found.fewest is not None:
        flags = training_flags(found.options, analysis.options.training)
        click.echo(f"popliner: fits on {found.fewest} IPU{'' if found.fewest == 1 else 's'} with {flags}", err=True)
    if found.out_of_time:
        click.echo(f"popliner: the {time_limit:g} s time limit ran out after trying {found.tried} of "
                   f"{found.candidates} other training options (recomputation, off-chip optimizer state)"
                   f"{'; another may need fewer IPUs' if found.options is not None else ''}; "
                   "a larger --time-limit tries them all", err=True)


def _problem_again(analysis: Analysis, problem: Any) -> Any:
    import dataclasses

    return dataclasses.replace(problem, training=analysis.mode == "training")


def _write_tables(analysis: Analysis, outputs: Outputs, fmt: str, output: str | None, force: bool, split: Any,
                  budget: int, num_ipus: int, requested_recompute: str = "none") -> None:
    from popliner.breakdown import affinity_matrix, build_breakdown, interlayer_matrix

    xlsx = bool(output and output.lower().endswith(".xlsx"))
    if not outputs.any_table and not xlsx:
        return
    breakdown = build_breakdown(analysis, with_operations=outputs.operation_breakdown or xlsx,
                                with_totals=outputs.memory_totals or xlsx,
                                planner_ipus=max(num_ipus, split.num_ipus_used if split else 0) if xlsx else None,
                                requested_recompute=requested_recompute)
    matrices = []
    if outputs.memory_affinity:
        matrices.append(affinity_matrix(analysis))
    if outputs.interlayer:
        matrices.append(interlayer_matrix(analysis))
    if xlsx:
        from popliner.outputs.xlsx import write_workbook

        write_workbook(breakdown, output, force=force, split=split, matrices=matrices, budget_bytes=budget,  # type: ignore[arg-type]
                       num_ipus=num_ipus)
        log.info("wrote %s", output)
        return
    from popliner.outputs import tables
    from popliner.outputs.tables import TableFormat

    table_fmt: TableFormat = "tsv" if fmt == "tsv" else "csv"
    grids = []
    if outputs.operation_breakdown:
        grids.append(tables.operations_grid(breakdown))
    if outputs.layer_breakdown:
        grids.append(tables.layers_grid(breakdown))
    if outputs.memory_totals:
        grids.append(tables.totals_grid(breakdown.totals))
    grids.extend(tables.matrix_grid(matrix) for matrix in matrices)
    with output_stream(output, force, newline="") as stream:  # the csv module wants newline=""
        # One stream, several tables: each table's TSV formulas point at its own rows.
        tables.write_grids(grids, stream, table_fmt)
    if output:
        log.info("wrote %s", output)


def _write_plots(analysis: Analysis, plot: str, force: bool, split: Any, budget: int) -> None:
    from popliner.breakdown import build_breakdown
    from popliner.outputs.plots import plot_layers, plot_split, plot_tiles
    from popliner.report.data import ipu_memories

    breakdown = build_breakdown(analysis, with_operations=False, with_totals=False)
    plot_layers(breakdown, plot, budget_bytes=budget, force=force)
    log.info("wrote %s", plot)
    if split is not None and split.stages:
        # The plots name the training options their figures assume (the applied recomputation).
        assumes = breakdown.training.summary() if breakdown.training is not None else None
        plot_split(split, _suffixed(plot, "split"), force=force, assumes=assumes)
        ipus = ipu_memories(analysis, [s.layers for s in split.stages], budget=budget)
        plot_tiles(ipus, _suffixed(plot, "tiles"), force=force,
                   title=f"Memory per tile of each IPU ({analysis.mode}, stash and copy buffers included)"
                   + (f"\ntraining options: {assumes}" if assumes else ""))
        log.info("wrote %s and %s", _suffixed(plot, "split"), _suffixed(plot, "tiles"))


def _split_config(analysis: Analysis, split: Any, gradient_accumulation: int | None,
                  requested_recompute: str = "none", matmul_proportion: tuple[float, ...] = ()) -> Any:
    """The pipeline config of a solved split, with the training options its figures were computed with."""
    from popliner.config.layering import layer_record
    from popliner.config.model import config_from_split
    from popliner.config.options import training_of

    t = analysis.profile.target
    training = training_of(analysis, requested_recompute)
    return config_from_split(split, profile_path=analysis.profile.path, profile_sha256=analysis.profile.sha256,
                             tiles=t.tiles_per_ipu, bytes_per_tile=t.bytes_per_tile, clock_hz=t.clock_hz,
                             gradient_accumulation=gradient_accumulation, training=training,
                             layer_options=layer_record(analysis.options),
                             framework=analysis.framework.name, matmul_proportion=matmul_proportion)


def _report_split(analysis: Analysis, split: Any, config_out: str | None, force: bool,
                  gradient_accumulation: int | None, requested_recompute: str = "none",
                  matmul_proportion: tuple[float, ...] = ()) -> None:
    from popliner.outputs.split_report import split_document, split_picture, split_table, write_split_json

    has_unlayered = bool((analysis.layers.layer_of_op < 0).any())
    if log.isEnabledFor(logging.WARNING):  # -q keeps stderr to errors only
        click.echo(split_picture(split, has_unlayered), err=True)
        if not split.fits:
            click.echo(f"popliner: no split fits: {split.note}"
                       + ("; the best effort below is over budget" if split.stages else ""), err=True)
        if split.stages:
            click.echo(split_table(split), err=True)
    doc = split_document(split, profile_path=analysis.profile.path, profile_sha256=analysis.profile.sha256)
    doc["framework"] = analysis.framework.as_document()
    record = training_record(analysis)
    if record is not None:
        doc["training"] = record
    if analysis.options.training.head_placement != "first" and "unlayered_operations" in doc:
        placement = analysis.options.training.head_placement
        where = ("the head is a pipeline stage of its own on IPU 0" if placement == "wrap"
                 else "the head on the last IPU")
        doc["unlayered_operations"] = (f"embedding and head are layers of their own, {where} "
                                       f"(--head-placement {placement})")
    with atomic_write("-", force=False) as out:
        write_split_json(doc, out)
    if config_out and split.stages:
        from popliner.config.yaml_io import write_config

        cfg = _split_config(analysis, split, gradient_accumulation, requested_recompute, matmul_proportion)
        with atomic_write(config_out, force=force) as stream:
            write_config(cfg, stream)  # the summary says "wrote" (with the next commands)


def _write_report(analysis: Analysis, split: Any, path: str, force: bool, gradient_accumulation: int | None,
                  link_bandwidth: float, requested_recompute: str = "none") -> None:
    from popliner.report import build_report, write_report

    cfg = _split_config(analysis, split, gradient_accumulation, requested_recompute)
    page = build_report(analysis, cfg, budget=split.budget_bytes, source=f"popliner --solve ({split.solver})",
                        link_bandwidth=link_bandwidth)
    write_report(page, path, force=force)
    log.info("wrote %s", path)


def _write_ipu_config(analysis: Analysis, split: Any, path: str, force: bool, gradient_accumulation: int | None,
                      matmul_proportion: tuple[float, ...]) -> None:
    from popliner.config.snippets import ipu_config, optimum_note, optimum_warnings, write_ipu_config

    # The config's own record (the recomputation applied, after --recompute auto): the YAML's optimum snippet
    # is the same document.
    cfg = _split_config(analysis, split, gradient_accumulation, matmul_proportion=matmul_proportion)
    document = ipu_config(cfg)
    note = optimum_note(cfg)
    if note:
        log.info("%s", note)
    for line in optimum_warnings(cfg):
        log.warning("%s", line)
    with atomic_write(path, force=force) as stream:
        write_ipu_config(document, stream)  # the summary says "wrote"


def _summarise(analysis: Analysis, split: Any, problem: Any, link_bandwidth: float, min_ipus: bool,
               config_out: str | None, ipu_config_out: str | None) -> None:
    """The human summary on stderr: IPUs used, whether fewer would do, what to run next."""
    from popliner.outputs.split_report import NextSteps, fit_facts, solve_command, split_summary

    if not log.isEnabledFor(logging.WARNING):
        return
    facts = None
    if split.fits:
        with phase("checking fewer IPUs"):
            facts = fit_facts(analysis, problem, link_bandwidth)
    argv = click.get_current_context().find_root().meta.get("popliner.argv", [])
    config = config_out or "pipeline.yaml"
    steps = NextSteps(solve_command(argv, config), config, bool(config_out and split.stages), analysis.profile.path)
    from popliner.breakdown import profile_coverage

    cov = profile_coverage(analysis) if analysis.model.has_other else None
    click.echo(split_summary(split, facts, steps, min_ipus, coverage=cov), err=True)
    if ipu_config_out and split.stages:
        click.echo(f"popliner: wrote {ipu_config_out} (optimum-graphcore IPUConfig)", err=True)

"""``popliner simulate PIPELINE.yaml``: run a pipeline config on the bundled simulator."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from popliner.cli.configured import analysis_for_config
from popliner.cli.options import (
    CONFIG_TRAINING_PARAMS,
    config_source_options,
    force_option,
    gradient_accumulation_option,
    link_bandwidth_option,
    output_option,
    schedule_options,
)
from popliner.config.model import PipelineConfig
from popliner.config.options import check_cli_options
from popliner.config.yaml_io import read_config
from popliner.errors import UsageProblem
from popliner.fileio import check_writable, distinct_files, is_stdout, one_stdout
from popliner.simulator.engine import simulate
from popliner.simulator.inputs import (
    SimInputs,
    inputs_from_analysis,
    inputs_from_config,
)
from popliner.simulator.schedule import check_fragments
from popliner.writers.formats import check_output, writer_for
from popliner.writers.simulation import Simulation
from popliner.writers.writer import Writer, write_output

__all__ = ["command"]

logger = logging.getLogger(__name__)


@click.command("simulate", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("config_path", metavar="PIPELINE.yaml", type=click.Path(dir_okay=False))
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False), default=None,
              help="Recompute stage memory and cycles from this profile (default: the config's predictions).")
@gradient_accumulation_option("the config's; at least the pipeline stages")
@schedule_options
@link_bandwidth_option
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), default=None,
              help="Also write a Chrome/Perfetto trace (JSON) of one step, whatever FILE's name.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Also write a Gantt chart of one step (.png or .svg).")
@output_option("Write to FILE instead of stdout, in the format of its name: .json the summary as JSON, "
               ".trace.json a Perfetto trace, .png/.svg a Gantt chart, anything else the text report.")
@force_option("Overwrite existing -o/--trace/--plot files.")
@click.option("--json", "as_json", is_flag=True, help="The summary as JSON, whatever -o's name (-o FILE.json).")
@click.option("--all-cycles", is_flag=True, help="Print every pipeline cycle in the schedule views.")
@config_source_options
def command(config_path: str, profile_path: str | None, gradient_accumulation: int | None, micro_batch_size: int,
            sync_cycles: int, link_bandwidth: float, trace_path: str | None, plot_path: str | None,
            output: str | None, force: bool, as_json: bool, all_cycles: bool, no_cache: bool, cache_dir: str | None,
            **training: object) -> None:
    """Simulate one step of the pipeline in PIPELINE.yaml and report time, bubbles and memory.

    \b
    popliner simulate pipeline.yaml
    popliner simulate pipeline.yaml --profile model.json -G 32 --trace step.json --plot step.png
    """
    distinct_files({"PIPELINE.yaml": config_path, "--profile": profile_path},
                   {"-o": output, "--trace": trace_path, "--plot": plot_path})
    # What -o (or stdout) gets: by -o's suffix; --json makes it the JSON summary whatever the name.
    writer = check_output(output, force, "Simulation", "text", what="a simulation")
    if as_json:
        writer = writer_for(None, "Simulation", "json")
    files = _check_outputs(trace_path, plot_path, force)
    one_stdout({"-o -": output, "--trace -": trace_path, "--plot -": plot_path})
    cfg = read_config(config_path)
    g = gradient_accumulation if gradient_accumulation is not None else cfg.gradient_accumulation
    check_fragments(cfg.num_pipeline_stages, g, cfg.execution == "sharded")  # before the profile is read
    check_cli_options(cfg.options, config_path, {k: training[k] for k in CONFIG_TRAINING_PARAMS})
    inputs = _inputs(cfg, config_path, profile_path, training, use_cache=not no_cache, cache_dir=cache_dir)
    result = simulate(
        inputs.stages,
        g,
        clock_hz=inputs.clock_hz,
        link_bandwidth=link_bandwidth,
        sync_cycles=sync_cycles,
        budget_bytes=cfg.effective_budget,
        micro_batch_size=micro_batch_size,
        tiles_per_ipu=inputs.tiles_per_ipu,
        sharded=cfg.execution == "sharded",
    )
    sim = Simulation(result, config_path, inputs.source, cfg.options,
                     None if all_cycles else max(24, 2 * result.num_stages + 4))
    # A trace or chart written to stdout takes it; the summary then goes to stderr.
    to_stderr = output is None and any(p is not None and is_stdout(p) for p in (trace_path, plot_path))
    write_output(sim, "/dev/stderr" if to_stderr else output, force, writer)
    if output and not is_stdout(output):
        logger.info("wrote %s", output)
    for path, file_writer in files:
        write_output(sim, path, force, file_writer)
        logger.info("wrote %s", path)


def _check_outputs(trace_path: str | None, plot_path: str | None, force: bool) -> list[tuple[str, Writer]]:
    """--trace and --plot, checked before any work: the files to write and their writers."""
    if trace_path and plot_path and Path(trace_path).resolve() == Path(plot_path).resolve():
        raise UsageProblem("--trace and --plot name the same file; give two file names")
    files = []
    if trace_path:
        check_writable(trace_path, force)
        files.append((trace_path, writer_for(None, "Simulation", "trace")))  # the trace whatever the name
    if plot_path:
        check_writable(plot_path, force, suffixes=(".png", ".svg"), what="Gantt chart")
        files.append((plot_path, writer_for(plot_path, "Simulation", "png")))
    return files


def _inputs(cfg: PipelineConfig, config_path: str, profile_path: str | None,
            given: dict[str, object], *, use_cache: bool, cache_dir: str | None) -> SimInputs:
    if profile_path is None:
        logger.info("no --profile: simulating with the config's predicted memory and cycles "
                       "(per-tile detail approximated; pass --profile for exact figures)")
        for s in cfg.stages:
            if s.predicted_stale:
                logger.warning("stages[%d] was edited after popliner predicted its figures; they are stale: "
                               "pass --profile to recompute them", s.index)
        return inputs_from_config(cfg)
    # The command line's training options were checked against the config already (also without --profile);
    # its layer options say how the config's layers were named.
    layers = {k: v for k, v in given.items() if k not in CONFIG_TRAINING_PARAMS}
    analysis = analysis_for_config(config_path, profile_path, cfg.mode, cfg.options, layers,
                                   layer_groups=cfg.layer_groups, recorded_sha256=cfg.profile_sha256,
                                   recorded_layers=cfg.layer_options, use_cache=use_cache, cache_dir=cache_dir)
    target = analysis.profile.target
    return inputs_from_analysis(cfg, analysis, tiles_per_ipu=int(target.tiles_per_ipu),
                                clock_hz=float(target.clock_hz))

"""``popliner report PIPELINE.yaml --profile PROFILE``: the HTML review report of a split."""

from __future__ import annotations

import logging

import click

from popliner.cli.configured import analysis_for_config, budget_for_config
from popliner.cli.options import (
    LINK_BANDWIDTH,
    MICRO_BATCH_SIZE,
    MICRO_BATCHES,
    SYNC_CYCLES,
    budget_fraction,
    config_training_options,
    force_option,
    layer_options,
    output_option,
)
from popliner.fileio import check_writable, distinct_files
from popliner.simulator.engine import DEFAULT_LINK_BANDWIDTH, DEFAULT_SYNC_CYCLES

__all__ = ["command"]

log = logging.getLogger("popliner")


@click.command(name="report", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("config", metavar="PIPELINE.yaml", type=click.Path(dir_okay=False, path_type=str))
@click.option("--profile", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="The profile the figures are computed from.")
@output_option("The HTML file to write (default: report.html).")
@force_option("Overwrite an existing report file.")
@click.option("--budget", type=float, default=None, callback=budget_fraction,
              help="Fraction of each tile's bytes an IPU may use (default: the config's budget, else 1.0).")
@click.option("--gradient-accumulation", "-G", type=MICRO_BATCHES, default=None,
              help="Micro-batches per step for the schedule (default: the config's).")
@click.option("--micro-batch-size", type=MICRO_BATCH_SIZE, default=1, show_default=True,
              help="Samples per micro-batch, for the throughput.")
@click.option("--link-bandwidth", type=LINK_BANDWIDTH, default=DEFAULT_LINK_BANDWIDTH,
              show_default=True, help="Bytes/s of an inter-IPU copy.")
@click.option("--sync-cycles", type=SYNC_CYCLES, default=DEFAULT_SYNC_CYCLES, show_default=True,
              help="Clock cycles of the sync before each copy phase.")
@click.option("--no-cache", is_flag=True, help="Do not read or write the derived-data cache.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=str), default=None,
              help="Cache folder (default $POPLINER_CACHE_DIR, else ~/.cache/popliner).")
@config_training_options
@layer_options
def command(config: str, profile: str, output: str | None, force: bool, budget: float | None,
            gradient_accumulation: int | None, micro_batch_size: int, link_bandwidth: float, sync_cycles: int,
            no_cache: bool, cache_dir: str | None, **training: object) -> None:
    """Write one self-contained HTML page reviewing the split in PIPELINE.yaml.

    It opens offline in any browser: the split, memory per IPU and per tile,
    the layers (sortable), variables live over the program of the fullest
    IPU, the simulated schedule, and the options in force. Figures are
    recomputed from PROFILE, as `popliner check` does.

    \b
    popliner report pipeline.yaml --profile model.json.gz -o report.html
    """
    from popliner.config.yaml_io import read_config
    from popliner.report import build_report, write_report

    path = output or "report.html"
    distinct_files({"PIPELINE.yaml": config, "--profile": profile}, {"-o": path})
    check_writable(path, force, suffixes=(".html", ".htm"), what="report")
    cfg = read_config(config)
    analysis = analysis_for_config(config, profile, cfg.mode, cfg.options, training, layer_groups=cfg.layer_groups,
                                   recorded_sha256=cfg.profile_sha256, use_cache=not no_cache, cache_dir=cache_dir,
                                   recorded_layers=cfg.layer_options)
    limit = budget_for_config(analysis, cfg, budget)
    page = build_report(analysis, cfg, budget=limit, source=config, link_bandwidth=link_bandwidth,
                        sync_cycles=sync_cycles, micro_batch_size=micro_batch_size,
                        gradient_accumulation=gradient_accumulation)
    write_report(page, path, force=force)
    log.info("wrote %s", path)

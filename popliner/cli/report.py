"""``popliner report PIPELINE.yaml --profile PROFILE``: the HTML review report of a split."""

from __future__ import annotations

import logging

import click

from popliner.cli.configured import analysis_for_config, budget_for_config
from popliner.cli.options import (
    budget_given,
    budget_options,
    config_source_options,
    force_option,
    gradient_accumulation_option,
    link_bandwidth_option,
    output_option,
    schedule_options,
)
from popliner.fileio import check_writable, distinct_files

__all__ = ["command"]

log = logging.getLogger("popliner")


@click.command(name="report", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("config", metavar="PIPELINE.yaml", type=click.Path(dir_okay=False, path_type=str))
@click.option("--profile", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="The profile the figures are computed from.")
@output_option("The HTML file to write (default: report.html).")
@force_option("Overwrite an existing report file.")
@budget_options("the config's budget, else 1.0")
@gradient_accumulation_option("the config's")
@schedule_options
@link_bandwidth_option
@config_source_options
def command(config: str, profile: str, output: str | None, force: bool, budget: float | None,
            headroom: float | None, gradient_accumulation: int | None, micro_batch_size: int,
            link_bandwidth: float, sync_cycles: int, no_cache: bool, cache_dir: str | None, **training: object) -> None:
    """Write one self-contained HTML page reviewing the split in PIPELINE.yaml.

    It opens offline in any browser: the split, memory per IPU and per tile,
    the layers (sortable), variables live over the program of the fullest
    IPU, the simulated schedule, and the options in force. Figures are
    recomputed from PROFILE, as `popliner check` does.

    \b
    popliner report pipeline.yaml --profile model.json.gz -o report.html
    """
    from popliner.config.yaml_io import read_config
    from popliner.report import build_report
    from popliner.simulator.schedule import check_fragments
    from popliner.writers.formats import suffixes_for
    from popliner.writers.html import write_report

    fraction = budget_given(budget, headroom)
    path = output or "report.html"
    distinct_files({"PIPELINE.yaml": config, "--profile": profile}, {"-o": path})
    check_writable(path, force, suffixes=suffixes_for("Report"), what="report")
    cfg = read_config(config)
    # The simulated schedule's size is known from the config: refused before the profile is read.
    check_fragments(cfg.num_pipeline_stages, gradient_accumulation or cfg.gradient_accumulation,
                    cfg.execution == "sharded")
    analysis = analysis_for_config(config, profile, cfg.mode, cfg.options, training, layer_groups=cfg.layer_groups,
                                   recorded_sha256=cfg.profile_sha256, use_cache=not no_cache, cache_dir=cache_dir,
                                   recorded_layers=cfg.layer_options)
    limit = budget_for_config(analysis, cfg, fraction)
    page = build_report(analysis, cfg, budget=limit, source=config, link_bandwidth=link_bandwidth,
                        sync_cycles=sync_cycles, micro_batch_size=micro_batch_size,
                        gradient_accumulation=gradient_accumulation)
    write_report(page, path, force=force)
    log.info("wrote %s", path)

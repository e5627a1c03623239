"""``popliner check PIPELINE.yaml --profile PROFILE``: the CI memory-budget gate."""

from __future__ import annotations

import os
from dataclasses import replace

import click

from popliner.cli.check_ci import baseline_options, finish, gate
from popliner.cli.configured import analysis_for_config, budget_for_config
from popliner.cli.options import (
    budget_given,
    budget_options,
    config_source_options,
    force_option,
    output_option,
)
from popliner.fileio import check_writable, distinct_files, is_stdout, one_stdout

__all__ = ["command"]


@click.command(name="check", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("config", type=click.Path(dir_okay=False, path_type=str), metavar="CONFIG|REVIEW.xlsx")
@click.option("--profile", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="The profile to recompute memory from.")
@budget_options("the config's budget, else 1.0")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=str),
              help="Also write JUnit XML to FILE, whatever its name (-o FILE.xml writes it instead of the table).")
@output_option("Write to FILE instead of stdout, in the format of its name: .json the result file (a later "
               "--baseline), .md a Markdown summary, .xml JUnit XML, anything else the per-IPU table.")
@force_option("Overwrite existing -o/--junit files.")
@baseline_options
@config_source_options
def command(config: str, profile: str, budget: float | None, headroom: float | None, junit: str | None,
            output: str | None, force: bool, baseline: str | None, max_growth: float | None,
            max_growth_bytes: int | None, no_cache: bool, cache_dir: str | None, **training: object) -> None:
    """Check that every IPU of CONFIG fits: exit 0 if all fit, 1 if any does not (or grew beyond --max-growth
    against --baseline), 2 on bad input.

    CONFIG is a pipeline YAML, or a review workbook (.xlsx) whose Split
    planner sheet holds the split typed into its IPU column.

    Memory is recomputed from PROFILE's operations for the config's split,
    with the training options the config records (its `training` block),
    not copied from the config's predictions.
    """
    from popliner.checkreport import check_report
    from popliner.config.planner import config_from_planner, is_workbook, read_planner
    from popliner.config.yaml_io import read_config
    from popliner.writers.formats import check_output

    fraction = budget_given(budget, headroom)
    one_stdout({"-o -": output, "--junit -": junit})
    distinct_files({"CONFIG": config, "--profile": profile, "--baseline": baseline}, {"-o": output, "--junit": junit})
    junit_writer = check_output(None, force, "CheckReport", "junit")  # --junit: JUnit whatever the name
    if junit:
        check_writable(junit, force)
    writer = check_output(output, force, "CheckReport", "text", what="a check")
    ci = gate(baseline, max_growth, max_growth_bytes, os.environ)
    if is_workbook(config):
        # The split typed into the review workbook's planner, checked exactly as a config.
        choice = read_planner(config)
        analysis = analysis_for_config(config, profile, choice.mode, choice.training, training,
                                       recorded_sha256=choice.profile_sha256, use_cache=not no_cache,
                                       cache_dir=cache_dir)
        cfg = config_from_planner(choice, analysis)
        if choice.profile_sha256:
            cfg = replace(cfg, profile_sha256=choice.profile_sha256)
    else:
        cfg = read_config(config)
        analysis = analysis_for_config(config, profile, cfg.mode, cfg.options, training,
                                       layer_groups=cfg.layer_groups, recorded_sha256=cfg.profile_sha256,
                                       use_cache=not no_cache, cache_dir=cache_dir, recorded_layers=cfg.layer_options)
    limit = budget_for_config(analysis, cfg, fraction)
    report = check_report(analysis, cfg, config, budget=limit, budget_fraction=fraction, baseline=ci.baseline)
    # JUnit to stdout takes it; the table then goes to stderr.
    to_stderr = output is None and bool(junit and is_stdout(junit))
    outputs = {"-o": (output, writer), **({"--junit": (junit, junit_writer)} if junit else {})}
    finish(report, ci.ci, outputs, force, stderr_outputs=frozenset({"-o"} if to_stderr else ()))

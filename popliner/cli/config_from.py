"""``popliner config-from REVIEW.xlsx -o pipeline.yaml``: the planner's split as a pipeline config."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from popliner.analysis import load_analysis
from popliner.cli.options import (
    force_option,
    gradient_accumulation_option,
    layer_options,
    output_option,
)
from popliner.errors import ConfigError
from popliner.fileio import distinct_files
from popliner.writers.formats import check_output
from popliner.writers.writer import write_output

__all__ = ["command"]

log = logging.getLogger("popliner")


@click.command(name="config-from", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("workbook", type=click.Path(dir_okay=False, path_type=str), metavar="REVIEW.xlsx")
@click.option("--profile", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="The profile to compute the figures from (default: the one the workbook names).")
@gradient_accumulation_option("max(16, 2 x stages)")
@output_option("Write the pipeline YAML to FILE instead of stdout; a .json FILE gets optimum-graphcore's "
               "ipu_config.json of the split instead.")
@force_option("Overwrite an existing -o file.")
@click.option("--no-cache", is_flag=True, help="Do not read or write the derived-data cache.")
@layer_options
def command(workbook: str, profile: str | None, gradient_accumulation: int | None, output: str | None, force: bool,
            no_cache: bool, **layers: object) -> None:
    """Turn the split typed into REVIEW.xlsx's Split planner sheet into a pipeline config (YAML).

    \b
    popliner model.json -o review.xlsx --solve --num-ipus 4   write the workbook
    (edit the IPU column of the Split planner sheet, save)
    popliner config-from review.xlsx -o pipeline.yaml
    popliner check review.xlsx --profile model.json           or check it directly
    """
    from popliner.config.layering import analysis_fields
    from popliner.config.options import analysis_options
    from popliner.config.planner import config_from_planner, read_planner
    from popliner.config.snippets import optimum_check, optimum_say
    from popliner.scenario import resolve_recorded

    distinct_files({"REVIEW.xlsx": workbook, "--profile": profile}, {"-o": output})
    # -o by its name: .json writes optimum-graphcore's ipu_config.json; .yaml, .yml, any other name and stdout YAML.
    writer = check_output(output, force, "PipelineConfig", "yaml", what="a pipeline config")
    choice = read_planner(workbook)
    source = profile or _recorded_profile(workbook, choice.profile_path)
    # The figures are computed with the training options the workbook records, as it showed them.
    analysis = load_analysis(source, analysis_options(choice.mode, choice.training, layering=analysis_fields(layers)),
                             use_cache=not no_cache)
    resolve_recorded(analysis, workbook)
    if choice.profile_sha256 and choice.profile_sha256 != analysis.profile.sha256:
        log.warning("%s was made from a profile with another content hash than %s", workbook, source)
    cfg = config_from_planner(choice, analysis, gradient_accumulation=gradient_accumulation)
    if writer.name == "ipu_config":
        optimum_check(cfg, f"-o {output}")
        optimum_say(cfg)
    write_output(cfg, output, force, writer)
    if output:
        log.info("wrote %s: %d IPUs", output, cfg.num_ipus)


def _recorded_profile(workbook: str, recorded: str) -> str:
    """The profile the workbook was made from, as written or next to the workbook."""
    if not recorded:
        raise ConfigError(f"{workbook}: the planner names no profile; give --profile")
    for candidate in (Path(recorded), Path(workbook).parent / Path(recorded).name):
        if candidate.is_file():
            return str(candidate)
    raise ConfigError(f"{workbook}: the profile it was made from, {recorded}, is not there; give --profile")

"""What ``check``, ``report`` and ``simulate --profile`` share: a profile analysed as a pipeline config says.

A config records the mode and the training options it was solved with, the
content hash of its profile and a budget; these commands recompute its
figures from a profile, so they read that profile the same way.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from popliner.cli.options import CONFIG_TRAINING_PARAMS
from popliner.regexes import RegexRunaway

if TYPE_CHECKING:
    from popliner.analysis import Analysis
    from popliner.config.model import ConfigTraining, PipelineConfig

__all__ = ["analysis_for_config", "budget_for_config"]

log = logging.getLogger("popliner")


def analysis_for_config(source: str, profile: str, mode: str, recorded: ConfigTraining | None,
                        given: Mapping[str, object], *, layer_groups: Sequence[tuple[str, ...]] = (),
                        recorded_sha256: str = "", use_cache: bool = True, cache_dir: str | None = None,
                        recorded_layers: tuple[tuple[str, object], ...] = ()) -> Analysis:
    """PROFILE analysed in the config's ``mode`` with the training options it records.

    ``layer_groups`` (each IPU's layers) tell an inference config's head
    placement (:func:`popliner.config.options.analysis_options`).

    Training options given on the command line (``given``, the command's
    keyword arguments) must agree with the record; so must its layer options
    (``--layer-name-regex`` ...) with the config's ``layer_options``
    (``recorded_layers``), and those the config does not record apply; the options the analysis
    applied must be the recorded ones; a profile whose content differs from
    the one the config was made from (``recorded_sha256``) gets a warning.
    """
    from popliner.analysis import load_analysis
    from popliner.config.options import analysis_options, check_applied, check_cli_options
    from popliner.scenario import resolve_recorded

    check_cli_options(recorded, source, {k: given.get(k) for k in CONFIG_TRAINING_PARAMS})
    from popliner.config.layering import analysis_fields, merged_layer_options

    layer_options = merged_layer_options(recorded_layers, given, source)
    options = analysis_options(mode, recorded, layer_groups, analysis_fields(layer_options))
    with regexes_of_config(source, recorded, recorded_layers):
        analysis = load_analysis(profile, options, use_cache=use_cache, cache_dir=cache_dir)
        resolve_recorded(analysis, source, max(1, len(layer_groups)))
        check_applied(recorded, analysis, source)
    sha = analysis.profile.sha256
    if recorded_sha256 and recorded_sha256.lower() != sha.lower():
        log.warning("%s differs from the profile the config was written for: sha256 %s.. vs %s..; "
                    "the figures are recomputed from %s", profile, sha[:12], recorded_sha256[:12], profile)
    return analysis


@contextlib.contextmanager
def regexes_of_config(source: str, recorded: ConfigTraining | None,
                      recorded_layers: tuple[tuple[str, object], ...]) -> Iterator[None]:
    """A regex of the config that runs away is refused naming the config's key and file, not an option the
    user did not give (the message said ``--update-regex or training.update_regex``, with no file)."""
    keys = {f"layer_options.{key}": value for key, value in recorded_layers}
    if recorded is not None:
        keys |= {"training.update_regex": recorded.update_regex,
                 "training.optimizer_state_regex": recorded.optimizer_state_regex}
    try:
        yield
    except RegexRunaway as exc:
        # An option given too must agree with the config (checked before): the config's key is named either way.
        for key, value in keys.items():
            if value == exc.pattern:
                raise exc.from_source(f"{key} in {source}") from None
        raise


def budget_for_config(analysis: Analysis, cfg: PipelineConfig, fraction: float | None) -> int:
    """Bytes per tile an IPU may use: ``fraction`` of the profile's tile (``--budget``), else the config's."""
    if fraction is None:
        return cfg.effective_budget
    return int(analysis.profile.target.bytes_per_tile * fraction)

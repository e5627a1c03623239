"""The training options a config records, applied by ``check``, ``simulate`` and ``report``.

The config is the source of truth; why, and what a conflicting option on the
command line does: docs/pipeline-config.md ('Training options', 'Who reads them').
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from popliner.config.model import ConfigTraining
from popliner.errors import UsageProblem

if TYPE_CHECKING:
    from popliner.analysis import Analysis, AnalysisOptions

__all__ = ["FLAGS", "analysis_options", "check_applied", "check_cli_options"]

log = logging.getLogger(__name__)

#: Command-line flag of each recorded option (``ConfigTraining`` attribute -> flag).
FLAGS: dict[str, str] = {name: "--" + name.replace("_", "-") for name in (
    "recompute", "optimizer_state", "replication_factor", "sharded_optimizer_state", "head_placement")}


def analysis_options(mode: str, training: ConfigTraining | None,
                     layers: Sequence[tuple[str, ...]] = (),
                     layering: Mapping[str, Any] | None = None) -> AnalysisOptions:
    """How to analyse a profile for a config: its mode, and its training options in training.

    ``layering``: further ``AnalysisOptions`` fields, the layer options the config was made with
    (:func:`popliner.config.layering.analysis_fields`).

    An inference config records no options; its head placement is then read
    from ``layers`` (each IPU's layers): popliner's ``embedding`` group first
    on IPU 0 with ``head`` there too is ``wrap``, with ``head`` last on the
    last IPU ``last``.
    """
    from popliner.analysis import AnalysisOptions
    from popliner.layout import Layout
    from popliner.memory.training import TrainingOptions

    if training is None or mode != "training":
        placement = Layout.of_stages(layers, None).placement
        return AnalysisOptions(mode=mode, training=TrainingOptions(head_placement=placement),  # type: ignore
                               **(layering or {}))
    return AnalysisOptions(mode=mode, training=training.options(), **(layering or {}))  # type: ignore[arg-type]


def _agrees(t: ConfigTraining, name: str, value: object) -> bool:
    if name == "recompute":
        # A profile compiled with recomputation ignores --recompute; `auto` matches what it chose.
        return t.recompute == "compiled" or value in (t.recompute, t.requested)
    return bool(getattr(t, name) == value)


def _show(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def check_cli_options(t: ConfigTraining | None, source: str, given: Mapping[str, object | None]) -> None:
    """Refuse training options given on the command line that the config (``t``) does not record.

    ``given`` maps ``ConfigTraining`` names to the values given (None: not
    given); ``t`` is None for an inference config.
    """
    given = {name: value for name, value in given.items() if value is not None}
    if not given:
        return
    if t is None:
        name = next(iter(given))
        raise UsageProblem(f"{FLAGS[name]}: {source} is an inference config and training options do not apply; "
                           f"drop {FLAGS[name]}")
    for name, value in given.items():
        if not _agrees(t, name, value):
            flag = FLAGS[name]
            shown = flag if isinstance(value, bool) and value else f"{flag} {_show(value)}"
            if isinstance(value, bool) and not value:
                shown = f"--no-{flag[2:]}"
            raise UsageProblem(
                f"{shown} conflicts with {source}, whose figures were computed with training.{name}: "
                f"{_show(getattr(t, name))}; drop the option, or solve again with it "
                f"(or edit the `training:` block) to check that setting")


def check_applied(t: ConfigTraining | None, analysis: Analysis, source: str) -> None:
    """Say on stderr which options apply, and when the profile does not recompute as recorded (compiled or not)."""
    if t is None or analysis.mode != "training":
        return
    log.info("training options from %s: %s", source, t.summary())
    applied = analysis.facts.view.recompute
    if (t.recompute == "compiled") != (applied == "compiled"):
        log.warning("%s records recompute %s but the profile %s; its figures follow the profile",
                    source, t.recompute, "was compiled with recomputation" if applied == "compiled"
                    else "has no recompute operations")

"""Choosing training options: ``--recompute auto``, and what would make a split fit.

Both re-analyse the same loaded profile with other :class:`TrainingOptions`
(operations and layers are reused; only the memory engine is rebuilt) and
ask the solver's range table for the fewest IPUs that fit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from popliner.analysis import Analysis, analyse_profile
from popliner.memory.training import TrainingOptions
from popliner.solvers.problem import SplitProblem

__all__ = ["AUTO_ORDER", "reanalyse", "suggest_options", "training_flags", "with_training"]

#: ``--recompute auto`` tries these in order: least recomputation first.
AUTO_ORDER: tuple[str, ...] = ("none", "pipeline", "every-layer")


def with_training(analysis: Analysis, training: TrainingOptions) -> Analysis:
    """The same profile, operations and raw layers analysed with other training options."""
    options = dataclasses.replace(analysis.options, training=training)
    return analyse_profile(analysis.profile, options, ops=analysis.ops)


def reanalyse(analysis: Analysis, **changes: object) -> Analysis:
    return with_training(analysis, dataclasses.replace(analysis.options.training, **changes))  # type: ignore[arg-type]


def fewest_ipus(analysis: Analysis, problem: SplitProblem, link_bytes_per_second: float = 64e9) -> int | None:
    """The smallest number of IPUs (up to the problem's) on which the analysed model fits."""
    from popliner.outputs.split_report import fit_facts

    return fit_facts(analysis, problem, link_bytes_per_second).fewest_ipus


def training_flags(training: TrainingOptions, relative_to: TrainingOptions | None = None) -> str:
    """The command-line flags that give these options (those equal to ``relative_to``, or the defaults, left out)."""
    default = relative_to if relative_to is not None else TrainingOptions()
    parts = []
    if training.recompute != default.recompute:
        parts.append(f"--recompute {training.recompute}")
    if training.optimizer_state != default.optimizer_state:
        parts.append(f"--optimizer-state {training.optimizer_state}")
    if training.replication_factor != default.replication_factor:
        parts.append(f"--replication-factor {training.replication_factor}")
    if training.sharded_optimizer_state and not default.sharded_optimizer_state:
        parts.append("--sharded-optimizer-state")
    if training.head_placement != default.head_placement:
        parts.append(f"--head-placement {training.head_placement}")
    return " ".join(parts)


def _candidates(current: TrainingOptions) -> Iterator[TrainingOptions]:
    """Options engineers add when a training split does not fit, cheapest first."""
    seen = {current}
    recomputes = [current.recompute] if current.recompute != "none" else list(AUTO_ORDER)
    states = [current.optimizer_state] if current.optimizer_state == "off-chip" else ["on-chip", "off-chip"]
    for state in states:
        for recompute in recomputes:
            option = dataclasses.replace(current, recompute=recompute, optimizer_state=state)  # type: ignore[arg-type]
            if option not in seen:
                seen.add(option)
                yield option


def suggest_options(analysis: Analysis, problem: SplitProblem,
                    link_bytes_per_second: float = 64e9) -> tuple[TrainingOptions, int] | None:
    """The first of the usual training options with which the model fits on at most ``problem.num_ipus`` IPUs.

    Returns the options and the fewest IPUs they need, or None when none of
    them fits (or the profile is not a training one).
    """
    if analysis.mode != "training":
        return None
    current = analysis.options.training
    found: list[tuple[TrainingOptions, int]] = []
    for option in _candidates(current):
        other = with_training(analysis, option)
        if option.recompute != "none" and other.engine.view.recompute == "compiled":
            continue  # recomputation is compiled in: asking for it changes nothing
        fewest = fewest_ipus(other, problem, link_bytes_per_second)
        if fewest is not None and fewest <= problem.num_ipus:
            return option, fewest
        if fewest is not None:
            found.append((option, fewest))
    return min(found, key=lambda pair: pair[1]) if found else None

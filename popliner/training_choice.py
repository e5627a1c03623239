"""Choosing training options: ``--recompute auto``, and what would make a split fit.

Both make scenarios of the same profile base under other
:class:`TrainingOptions` (:func:`popliner.analysis.scenario`: operations and
layers are the base's; only the memory facts are new) and ask the solver's
range table for the fewest IPUs that fit.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from popliner.analysis import Analysis, scenario
from popliner.deadline import OutOfTime, check_deadline
from popliner.hardware import DEFAULT_LINK_BANDWIDTH
from popliner.memory.training import TrainingOptions
from popliner.solvers.problem import SplitProblem

if TYPE_CHECKING:
    from popliner.memory.ranges import ProfileRanges

__all__ = ["AUTO_ORDER", "Suggestion", "budget_table", "fewest_ipus", "suggest_options", "training_flags"]

#: ``--recompute auto`` tries these in order: least recomputation first.
AUTO_ORDER: tuple[str, ...] = ("none", "pipeline", "every-layer")


def budget_table(analysis: Analysis, problem: SplitProblem, link_bytes_per_second: float = DEFAULT_LINK_BANDWIDTH,
                 deadline: float | None = None) -> ProfileRanges:
    """A lazy range table at the budget: the search reads only the rows a fitting split could start at.

    Making it builds the scenario's liveness grid (shared with every other
    table of the scenario), which, like the memory facts, is not interrupted.
    """
    return analysis.range_table(problem.budget, link_bytes_per_second, deadline=deadline, lazy=True)


def fewest_ipus(analysis: Analysis, problem: SplitProblem, link_bytes_per_second: float = DEFAULT_LINK_BANDWIDTH,
                deadline: float | None = None) -> int | None:
    """The smallest number of IPUs on which the analysed model fits (:class:`OutOfTime` past ``deadline``), over
    a new :func:`budget_table` (:func:`popliner.solvers.solve.minimum_ipus`)."""
    from popliner.solvers.solve import minimum_ipus

    return minimum_ipus(budget_table(analysis, problem, link_bytes_per_second, deadline), problem, deadline)


def training_flags(training: TrainingOptions, relative_to: TrainingOptions) -> str:
    """The command-line flags that give these options (those equal to ``relative_to`` left out)."""
    parts = []
    for name in ("recompute", "optimizer_state", "replication_factor", "sharded_optimizer_state", "head_placement"):
        value = getattr(training, name)
        if value != getattr(relative_to, name) and value is not False:  # a switch is said only when it is on
            flag = "--" + name.replace("_", "-")
            parts.append(flag if value is True else f"{flag} {value}")
    return " ".join(parts)


def _candidates(current: TrainingOptions, state_streamed: bool = False) -> Iterator[TrainingOptions]:
    """Options engineers add when a training split does not fit, cheapest first.

    ``state_streamed``: the profile already keeps its optimizer state off chip, so moving it is no option.
    """
    seen = {current}
    recomputes = [current.recompute] if current.recompute != "none" else list(AUTO_ORDER)
    fixed = current.optimizer_state == "off-chip" or state_streamed
    states = [current.optimizer_state] if fixed else ["on-chip", "off-chip"]
    for state in states:
        for recompute in recomputes:
            option = dataclasses.replace(current, recompute=recompute, optimizer_state=state)  # type: ignore[arg-type]
            if option not in seen:
                seen.add(option)
                yield option


@dataclass(frozen=True)
class Suggestion:
    """What :func:`suggest_options` found: the options and the fewest IPUs they need (or None), and how far it got.

    ``tried`` of ``candidates`` options were looked at; ``out_of_time``: the
    deadline passed before the rest were (the answer may then not be the
    one a full search gives).
    """

    options: TrainingOptions | None
    fewest: int | None
    tried: int
    candidates: int
    out_of_time: bool = False


def suggest_options(analysis: Analysis, problem: SplitProblem, link_bytes_per_second: float = DEFAULT_LINK_BANDWIDTH,
                    deadline: float | None = None, setup_seconds: float = 0.0) -> Suggestion:
    """The first of the usual training options with which the model fits on at most ``problem.num_ipus`` IPUs.

    Else the option that fits on the fewest IPUs, or none (no option fits,
    or the profile is not a training one). Past ``deadline`` (a
    ``time.monotonic()`` value) it stops, between two options or inside a
    search, and says so. Each option rebuilds the memory facts and the
    liveness grid of its table, which are not interrupted: an option is not
    started when that set-up, expected to take as long as the longest seen
    (at least ``setup_seconds``, the caller's own facts and table), would
    end past the deadline.
    """
    from popliner.solvers.solve import minimum_ipus

    if analysis.mode != "training":
        return Suggestion(None, None, 0, 0)
    current = analysis.options.training
    options = list(_candidates(current, analysis.base.state_off_chip))
    found: list[tuple[TrainingOptions, int]] = []
    tried = 0
    analysis.base.shared.share_between_option_sets()
    try:
        for option in options:
            check_deadline(None if deadline is None else deadline - setup_seconds)
            began = time.monotonic()
            other = scenario(analysis.base, option)
            if option.recompute != "none" and other.facts.view.recompute == "compiled":
                tried += 1
                continue  # recomputation is compiled in: asking for it changes nothing
            # The facts and the table's liveness grid are the part that cannot stop: time them together.
            table = budget_table(other, problem, link_bytes_per_second, deadline)
            setup_seconds = max(setup_seconds, time.monotonic() - began)
            fewest = minimum_ipus(table, problem, deadline)
            tried += 1
            if fewest is not None and fewest <= problem.num_ipus:
                return Suggestion(option, fewest, tried, len(options))
            if fewest is not None:
                found.append((option, fewest))
    except OutOfTime:
        best = min(found, key=lambda pair: pair[1], default=(None, None))
        return Suggestion(best[0], best[1], tried, len(options), out_of_time=True)
    best = min(found, key=lambda pair: pair[1], default=(None, None))
    return Suggestion(best[0], best[1], tried, len(options))

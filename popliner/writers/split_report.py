"""A solved split for people (stderr): a one-line picture, a per-IPU table, whether fewer IPUs would do,
and what to run next. Its JSON is :mod:`popliner.writers.jsondoc`'s."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from popliner.memory.coverage import Coverage, coverage_line
from popliner.solvers.result import TIMEOUT, SplitResult
from popliner.textsafe import shell_word, shown
from popliner.writers.ipu_table import IpuLine, ipu_table
from popliner.writers.shares import percent

if TYPE_CHECKING:
    from popliner.plan import FitFacts

__all__ = ["UNLAYERED", "NextSteps", "split_picture", "split_summary", "split_table"]

#: How the operations without a layer are shown in the picture (they go with the first stage).
UNLAYERED = "(unlayered)"


def split_picture(split: SplitResult, has_unlayered: bool) -> str:
    """``[ (unlayered) 0 1 2 | 3 4 5 6 ]``: layers per IPU; the operations without a layer go first."""
    if not split.stages:
        return "[ no split ]"
    parts = []
    for s in split.stages:
        names = [shown(name) for name in s.layers]
        if s.index == 0 and has_unlayered:
            names.insert(0, UNLAYERED)
        parts.append(" ".join(names))
    return "[ " + " | ".join(parts) + " ]"


def split_table(split: SplitResult) -> str:
    """Per-IPU lines: layers, the worst tile and what is on it, cycles and headroom against the budget."""
    rows = []
    for s in split.stages:
        span = s.first_layer if s.first_layer == s.last_layer else f"{s.first_layer}..{s.last_layer}"
        span = shown(span) if span else span
        model = s.worst_tile_bytes - s.worst_tile_stash - s.copy_buffer
        rows.append(IpuLine(s.ipu, span or "-", s.worst_tile, s.worst_tile_bytes, model, s.worst_tile_stash,
                            s.copy_buffer, (f"{s.cycles:>12,}", f"{s.headroom_share:>8.1%}"), s.fits))
    lines = ipu_table((f"{'cycles':>12}", f"{'headroom':>9}"), rows)
    for s in split.stages:
        if s.overflow is not None:
            lines.append(f"IPU {s.ipu} is over budget by {-s.headroom:,} bytes on tile "
                         f"{s.overflow.tile}" + (f"; variables peak at step {s.overflow.step}:" if s.overflow.step >= 0
                                                 else ""))
            lines.extend(f"    {v.bytes:>10,}  {shown(v.name)}" for v in s.overflow.largest_live)
    return "\n".join(lines)


@dataclass(frozen=True)
class NextSteps:
    """Exact commands for the hints: the solve command with a config output, and the config's name."""

    solve_command: str  # the user's command line, with --config-out when it had none
    config: str
    config_written: bool
    profile: str


def split_summary(split: SplitResult, facts: FitFacts | None, steps: NextSteps | None,
                  min_ipus_used: bool, coverage: Coverage | None = None) -> str:
    """The human summary printed after ``--solve`` (the picture and table come before it).

    ``coverage``: for a profile with the compiler's other categories, how much of the compiler's figure
    the model accounts for (one more line).
    """
    lines = [_usage_line(split)]
    if coverage is not None:
        lines.append(f"popliner: on one IPU, {coverage_line(coverage)}.")
    if facts is not None and split.fits:
        lines += _fewer_ipus_lines(split, facts, min_ipus_used)
    if steps is not None and split.fits:
        lines += _next_step_lines(steps)
    return "\n".join(lines)


def _usage_line(split: SplitResult) -> str:
    if split.status == TIMEOUT:  # nothing was proved: neither "fits" nor "does not fit"
        effort = (f"the {split.num_ipus_used} IPU(s) below are a best effort" if split.stages
                  else "there is no split to show")
        return (f"popliner: the search ran out of time before it found a split ({split.solver} {split.status}): "
                f"whether the model fits in {split.budget_bytes:,} bytes per tile over {split.num_ipus_requested} "
                f"IPU(s) is not known, and {effort}; raise --time-limit")
    layers = sum(len(s.layers) for s in split.stages)
    fit = "fits" if split.fits else "does NOT fit"
    return (f"popliner: the split uses {split.num_ipus_used} of the {split.num_ipus_requested} IPUs asked for: "
            f"{layers} layers, {split.mode}, {fit} in {split.budget_bytes:,} bytes per tile "
            f"({split.solver} {split.status}).")


def _fewer_ipus_lines(split: SplitResult, facts: FitFacts, min_ipus_used: bool) -> list[str]:
    used, budget = split.num_ipus_used, split.budget_bytes
    share = facts.one_ipu_worst_bytes / budget if budget else 0.0
    if facts.fewest_ipus == 1:
        out = [f"popliner: the whole model fits on ONE IPU (worst tile {facts.one_ipu_worst_bytes:,} bytes, "
               f"{percent(share)} of the budget): more IPUs only buy throughput, not memory."]
        if used > 1:
            out.append("          --min-ipus (or --num-ipus 1) keeps it on one IPU; --num-ipus N pipelines it over N.")
        return out
    one = (f"not on one: its worst tile would need {facts.one_ipu_worst_bytes:,} bytes, "
           f"{percent(share)} of the budget")
    if facts.fewest_ipus is None or facts.fewest_ipus >= used:
        why = "--min-ipus" if min_ipus_used else f"no split fits on {used - 1}"
        return [f"popliner: {used} IPUs is the fewest that fit ({why});", f"          {one}."]
    return [f"popliner: it would also fit on {facts.fewest_ipus} IPUs, {one}.",
            f"          --min-ipus uses {facts.fewest_ipus}; --num-ipus {used} spreads the layers for throughput."]


def _next_step_lines(steps: NextSteps) -> list[str]:
    rows: list[tuple[str, str]] = []
    if not steps.config_written:
        rows.append((steps.solve_command, "write the pipeline config"))
    profile = shell_word(steps.profile)  # a name that is not printable goes in as $'...' with escapes
    config = shell_word(steps.config)
    rows += [
        (f"popliner simulate {config} --profile {profile}", "fill/main/flush, bubbles, memory over time"),
        (f"popliner check {config} --profile {profile}", "CI gate: exit 1 if an IPU is over budget"),
    ]
    width = max(len(cmd) for cmd, _ in rows)
    head = f"popliner: wrote {shown(steps.config)}; next:" if steps.config_written else "popliner: next:"
    return [head, *(f"  {cmd:<{width}}  # {why}" for cmd, why in rows)]


#: Options of the main command that name an output file (their files exist once the command ran) or that
#: only shape such a file; the hint's command leaves them out, so that it does not stop with "file exists".
_OUTPUT_OPTIONS = ("-o", "--output", "--plot", "--report", "--ipu-config-out", "--format")


def solve_command(argv: Sequence[str], config: str) -> str:
    """The user's command line with ``--config-out CONFIG`` added (verbosity flags and outputs dropped)."""
    kept: list[str] = []
    words = iter(a for a in argv if a not in ("-v", "-vv", "-vvv", "--verbose", "-q", "--quiet"))
    for word in words:
        if word in _OUTPUT_OPTIONS:
            next(words, None)  # and its value
        elif not word.startswith(tuple(f"{o}=" for o in _OUTPUT_OPTIONS)) and not (
                word.startswith("-o") and not word.startswith("--")):
            kept.append(word)
    if kept and kept[0] == "analyse":
        kept = kept[1:]
    return " ".join(shell_word(word) for word in ["popliner", *kept, "--config-out", config])

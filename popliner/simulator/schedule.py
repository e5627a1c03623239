"""The pipeline schedule as PopART lowers it (docs/simulator.md, "The schedule"), as pure data, and its two text
views."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from popliner.errors import UsageProblem
from popliner.profile.limits import limit

__all__ = [
    "Fragment",
    "Schedule",
    "num_cycles",
    "phase_of_cycle",
    "render_ipu_view",
    "check_fragments",
    "render_stage_view",
    "schedule",
    "schedule_fragments",
    "sharded_schedule",
]


class Fragment(NamedTuple):
    """One program fragment: pipeline ``stage``, ``kind`` (D/M/H/C), ``microbatch``.

    ``microbatch`` is None only for a copy fragment of a stage that did not
    run in that cycle (the copy program still runs; it moves nothing useful).
    """

    stage: int
    kind: str
    microbatch: int | None


Schedule = tuple[tuple[Fragment, ...], ...]


def num_cycles(num_stages: int, micro_batches: int) -> int:
    """N = 2(P-1) + (G-(P-1)) pipeline cycles (that is G+P-1)."""
    return 2 * (num_stages - 1) + (micro_batches - (num_stages - 1))


def phase_of_cycle(cycle: int, num_stages: int, micro_batches: int) -> str:
    """``fill`` for the first P-1 cycles, ``flush`` for the last P-1, else ``main``."""
    if cycle < num_stages - 1:
        return "fill"
    if cycle >= micro_batches:
        return "flush"
    return "main"


def schedule_fragments(num_stages: int, micro_batches: int, sharded: bool = False) -> int:
    """Fragments a step's schedule holds, counted before it is built (the simulation's work grows with it).

    Pipelined: a copy of every stage in each of the G+P-1 cycles, a main fragment per stage and micro-batch,
    a host stream each way per micro-batch. Sharded: a main and a copy fragment per stage and micro-batch,
    and the host streams.
    """
    p, g = max(num_stages, 0), max(micro_batches, 0)
    if sharded:
        return 2 * p * g + 2 * g
    return p * (g + p - 1) + p * g + 2 * g


def check_fragments(num_stages: int, micro_batches: int, sharded: bool = False) -> None:
    """Refuse a step of more fragments than ``POPLINER_MAX_SIM_FRAGMENTS``, before any is built."""
    count = schedule_fragments(num_stages, micro_batches, sharded)
    env = "POPLINER_MAX_SIM_FRAGMENTS"
    if count > limit(env):
        raise UsageProblem(
            f"{num_stages:,} pipeline stages x {micro_batches:,} micro-batches make {count:,} fragments in one "
            f"simulated step, above the limit of {limit(env):,} (each is timed, traced and drawn); simulate fewer "
            f"micro-batches (-G), which scale the step's time in proportion once the pipeline is full, or set "
            f"{env} to a larger count")


def check_pipeline(num_stages: int, micro_batches: int) -> None:
    """The conditions PopART checks before it builds a pipeline."""
    if num_stages < 1:
        raise UsageProblem(f"a pipeline needs at least one stage, got {num_stages}")
    if micro_batches < num_stages:
        raise UsageProblem(
            f"{micro_batches} micro-batches (gradient accumulation / batches per step) is fewer than the "
            f"{num_stages} pipeline stages; use --gradient-accumulation {num_stages} or more"
        )


def schedule(
    num_stages: int,
    micro_batches: int,
    *,
    to_device_stage: int = 0,
    to_host_stage: int | None = None,
) -> Schedule:
    """Every pipeline cycle as a tuple of fragments in program order.

    ``to_host_stage`` defaults to the last stage (inference); in training it
    is the stage with the loss, K-1 of 2K-1.
    """
    check_pipeline(num_stages, micro_batches)
    host = num_stages - 1 if to_host_stage is None else to_host_stage
    if not (0 <= to_device_stage < num_stages and 0 <= host < num_stages):
        raise UsageProblem(f"host stream stages {to_device_stage}/{host} are outside 0..{num_stages - 1}")
    cycles = range(num_cycles(num_stages, micro_batches))
    return tuple(_cycle(c, num_stages, micro_batches, to_device_stage, host) for c in cycles)


def sharded_schedule(num_stages: int, micro_batches: int, *, to_device_stage: int = 0,
                     to_host_stage: int | None = None) -> Schedule:
    """Sharded execution (optimum-graphcore's inference): one stage at a time, each micro-batch through all.

    Cycle ``c`` runs stage ``c mod P`` on micro-batch ``c div P`` and then
    its copy to the next IPU; nothing overlaps, so a step has ``P x G``
    cycles and no fill or flush.
    """
    if num_stages < 1 or micro_batches < 1:
        raise UsageProblem(f"sharded execution needs a stage and a micro-batch, got {num_stages} and {micro_batches}")
    host = num_stages - 1 if to_host_stage is None else to_host_stage
    out = []
    for c in range(num_stages * micro_batches):
        s, m = c % num_stages, c // num_stages
        frags = [Fragment(s, "D", m)] if s == to_device_stage else []
        frags.append(Fragment(s, "M", m))
        frags += [Fragment(s, "H", m)] if s == host else []
        out.append(tuple([*frags, Fragment(s, "C", m)]))
    return tuple(out)


def _cycle(c: int, p: int, g: int, d_stage: int, h_stage: int) -> tuple[Fragment, ...]:
    active = [s for s in range(p) if 0 <= c - s < g]
    frags = [Fragment(s, "D", c - s) for s in active if s == d_stage]
    frags += [Fragment(s, "M", c - s) for s in active]
    frags += [Fragment(s, "H", c - s) for s in active if s == h_stage]
    frags += [Fragment(s, "C", c - s if 0 <= c - s < g else None) for s in range(p)]
    return tuple(frags)


# ------------------------------------------------------------------ text views


def render_stage_view(cycles: Schedule, num_stages: int, *, copies: bool = True,
                      max_columns: int | None = None) -> str:
    """One row per pipeline stage, one column per cycle; cells like ``D0.M0.C`` / ``M1.H1.C``.

    Each cell lists the stage's fragments in program order, joined by dots;
    ``copies=False`` drops the ``C`` that every stage runs in every cycle.
    ``max_columns`` elides main-phase cycles from the middle of long runs.
    """
    rows = [f"PS{s}" for s in range(num_stages)]
    cells = [[_stage_cell(frags, s, copies) for frags in cycles] for s in range(num_stages)]
    return _table(rows, cells, len(cycles), num_stages, max_columns)


def render_ipu_view(cycles: Schedule, ipu_of_stage: Sequence[int], *, max_columns: int | None = None) -> str:
    """One row per IPU; cells like ``PS0(4).PS4(0)`` (stage(micro-batch) in run order)."""
    num_stages = len(ipu_of_stage)
    ipus = sorted(set(ipu_of_stage))
    cells = [
        [".".join(f"PS{f.stage}({f.microbatch})" for f in frags if f.kind == "M" and ipu_of_stage[f.stage] == u)
         for frags in cycles]
        for u in ipus
    ]
    return _table([f"IPU{u}" for u in ipus], cells, len(cycles), num_stages, max_columns)


def _stage_cell(frags: tuple[Fragment, ...], stage: int, copies: bool) -> str:
    parts = [f"{f.kind}{f.microbatch}" for f in frags if f.stage == stage and f.kind != "C"]
    if copies:
        parts.append("C")
    return ".".join(parts)


def _visible(n: int, num_stages: int, max_columns: int | None) -> list[int | None]:
    """Cycle indices to print; None marks the elided stretch of main cycles."""
    if max_columns is None or n <= max_columns:
        return list(range(n))
    head = max(num_stages, (max_columns - 1) // 2)
    tail = max(num_stages - 1, max_columns - 1 - head)
    if head + tail >= n:
        return list(range(n))
    return [*range(head), None, *range(n - tail, n)]


def _table(rows: list[str], cells: list[list[str]], n: int, num_stages: int, max_columns: int | None) -> str:
    micro_batches = n - num_stages + 1
    cols = _visible(n, num_stages, max_columns)
    header = ["cycle"] + [str(c) if c is not None else "..." for c in cols]
    phase = ["phase"] + [phase_of_cycle(c, num_stages, micro_batches) if c is not None else "..." for c in cols]
    body = [[name] + [cells[r][c] if c is not None else "..." for c in cols] for r, name in enumerate(rows)]
    table = [header, phase, *body]
    widths = [max(len(line[k]) for line in table) for k in range(len(header))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in table) + "\n"

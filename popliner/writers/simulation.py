"""A simulation as ``popliner simulate`` writes it, and its text report for people.

Only formatting happens here; the numbers come from :func:`popliner.simulator.simulate`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from popliner.simulator.engine import SimResult
from popliner.simulator.schedule import render_ipu_view, render_stage_view
from popliner.textsafe import shown
from popliner.writers.ipu_table import text_table

if TYPE_CHECKING:
    from popliner.training_record import ConfigTraining

__all__ = ["Simulation", "mode_of", "plural", "render_text", "seconds_text", "write_text"]


@dataclass(frozen=True)
class Simulation:
    """One simulated step as ``popliner simulate`` writes it: the result, and what it was simulated from."""

    result: SimResult
    config: str  # the pipeline config's path
    source: str  # where the stages' figures come from (the config's predictions, or a profile)
    training: ConfigTraining | None = None  # the config's training options (None: inference)
    max_columns: int | None = None  # of the schedule views in the text (None: every cycle)

    @property
    def note(self) -> str | None:
        """The charts' second title line: the training options the figures assume."""
        return f"training options: {self.training.summary()}" if self.training is not None else None


def write_text(sim: Simulation, stream: IO[str]) -> None:
    """The text report, led by the training options the config records."""
    if sim.training is not None:
        stream.write(f"Training options (from the config): {sim.training.summary()}\n")
    stream.write(render_text(sim.result, max_columns=sim.max_columns))


# ----------------------------------------------------------------------- text


def render_text(result: SimResult, *, max_columns: int | None = None) -> str:
    """The human report: both schedule views, a stage table, a per-IPU table, totals."""
    p, g = result.num_stages, result.micro_batches
    fill = p - 1
    parts = [
        (f"Pipeline: {plural(len(result.ipus), 'IPU')}, {mode_of(result)}, {plural(p, 'pipeline stage')}, "
         f"{plural(g, 'micro-batch', 'micro-batches')} of {result.micro_batch_size} per step"),
        (f"Pipeline cycles: {result.num_cycles} = fill {fill} + main {g - fill} + flush {fill}"
         if result.execution != "sharded" else
         f"Sharded cycles: {result.num_cycles} = {p} stages x {g} micro-batches, one stage at a time "
         "(optimum-graphcore runs inference sharded; fill/flush below is an IPU waiting for the other shards)"),
        "",
        "Stage view (D host->IPU, M main, H IPU->host, C inter-IPU copies; number = micro-batch)",
        render_stage_view(result.schedule, p, max_columns=max_columns),
        "IPU view (PSs(m) = pipeline stage s on micro-batch m, in run order)",
        render_ipu_view(result.schedule, result.ipu_of_stage, max_columns=max_columns),
        "Pipeline stages",
        _stage_table(result),
        "",
        "Per IPU (time in % of the step; memory in bytes on the worst tile at the peak)",
        _ipu_table(result),
        "",
        *_totals(result),
    ]
    return "\n".join(parts) + "\n"


def plural(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"


def mode_of(result: SimResult) -> str:
    return "inference" if all(s.kind == "forward" for s in result.stages) else "training"


def _stage_table(result: SimResult) -> str:
    rows = [[str(s.index), str(s.ipu), s.kind, _int(s.cycles), _int(s.recompute_cycles), _int(s.send_bytes),
             shown(s.label)] for s in result.stages]
    return text_table(["PS", "IPU", "kind", "cycles/mb", "of which recompute", "sends B/mb", "layers"], rows,
                  left=(2, 6))


def _ipu_table(result: SimResult) -> str:
    t = result.step_cycles
    rows = []
    for u in result.ipus:
        rows.append([
            str(u.ipu), ",".join(map(str, u.stages)), _pct(u.busy_cycles, t), _pct(u.fill_flush_cycles, t),
            _pct(u.imbalance_cycles, t), _pct(u.communication_cycles, t), str(u.max_stash_entries),
            _opt(u.worst_tile), _opt(u.base_bytes), _opt(u.stash_bytes), _opt(u.copy_buffer_bytes),
            _opt(u.peak_bytes), _opt(result.budget_bytes), _fits(u.fits),
        ])
    head = ["IPU", "stages", "busy", "fill/flush", "imbalance", "copy+sync", "stash entries", "worst tile",
            "resident", "stash in flight", "copy buf", "peak", "budget", "fits"]
    return text_table(head, rows, left=(1, 13))


def _totals(result: SimResult) -> list[str]:
    tp = result.throughput
    lines = [
        f"Step time: {seconds_text(result.step_seconds)} ({_int(round(result.step_cycles))} cycles at "
        f"{result.clock_hz / 1e9:.3f} GHz); throughput: "
        + (f"{tp:,.1f} samples/s" if tp is not None else "n/a (no cycle figures)"),
        (f"Time split: compute {result.compute_share:.1%}, bubble {result.bubble_share:.1%} "
         f"(fill/flush {result.fill_flush_share:.1%}, imbalance {result.imbalance_share:.1%}), "
         f"copies+sync {result.communication_share:.1%}"),
    ]
    over = [u for u in result.ipus if u.fits is False]
    if result.fits is None:
        lines.append("Memory: not checked (no per-tile memory or no budget)")
    elif over:
        worst = ", ".join(f"IPU{u.ipu} by {_int((u.peak_bytes or 0) - (result.budget_bytes or 0))} B" for u in over)
        lines.append(f"Memory: DOES NOT FIT the budget of {_int(result.budget_bytes or 0)} B/tile: {worst}")
    else:
        lines.append(f"Memory: fits the budget of {_int(result.budget_bytes or 0)} B/tile on every IPU")
    return lines


def _int(v: float) -> str:
    return f"{int(v):,}"


def _opt(v: int | None) -> str:
    return "n/a" if v is None else _int(v)


def _pct(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole > 0 else "n/a"


def _fits(v: bool | None) -> str:
    return "n/a" if v is None else ("yes" if v else "NO")


def seconds_text(s: float) -> str:
    """A duration with three decimals in s, ms or us, as the simulator's text and the HTML report show it."""
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.3f} us"

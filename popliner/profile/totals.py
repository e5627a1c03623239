"""Checked arithmetic: refuse a profile whose figures cannot be summed in 64-bit integers.

Each number of a profile is bounded (``MAX_VALUE``, 2**40), but popliner
multiplies some of them (a vertex type's state size times its instance count
per tile, a run's value times its width in tiles) and sums the products over
programs and tiles. Two values at the bound already give 2**80, which wraps
round in int64 to nonsense (a negative whole-model total). The totals are
formed here once in floating point, which cannot wrap, before any integer sum.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from popliner.profile.model import Programs, Variables, VertexTypes
from popliner.profile.rules import TOTAL_LIMIT
from popliner.profile.tilevector import RunTable

if TYPE_CHECKING:
    from popliner.profile.rules import Checker

__all__ = ["check_totals"]


def _per_row(table: RunTable, weights: np.ndarray | None = None) -> np.ndarray:
    """Each row's sum over tiles, in float64 (exact below 2**53, and never wrapping)."""
    per_run = table.value.astype(np.float64) * (table.stop - table.first).astype(np.float64)
    if weights is not None:
        per_run *= weights
    return np.bincount(table.run_rows(), weights=per_run, minlength=table.rows)


def check_totals(chk: Checker, variables: Variables, vtypes: VertexTypes, programs: Programs) -> None:
    """One line naming the largest contributor when a whole-model total reaches :data:`TOTAL_LIMIT`."""
    parts: list[tuple[str, np.ndarray, str]] = []  # what, per row, where row k is
    keys = programs.vertices.key
    sizes = vtypes.size.astype(np.float64)
    state_weights = sizes[keys] if keys is not None and len(keys) else None
    parts.append(("vertex state (instances per tile x vertexTypes size)",
                  _per_row(programs.vertices, state_weights), "programs[{}].vertices"))
    parts.append(("vertex code", _per_row(vtypes.code), "vertexTypes[{}].codeBytes"))
    parts.append(("control code", _per_row(programs.control), "programs[{}].controlCode"))
    parts.append(("exchange code", _per_row(programs.exchange), "programs[{}].exchangeCode"))
    parts.append(("variables", _exact_or_float(variables.bytes), "variables.bytes[{}]"))
    memory = sum(float(rows.sum()) for _, rows, _ in parts)
    cycles = _per_row(programs.cycles)
    if float(cycles.sum()) >= TOTAL_LIMIT:
        _refuse(chk, "cycles", cycles, "programs[{}].cycles")
    if memory >= TOTAL_LIMIT:
        what, rows, where = max(parts, key=lambda part: float(part[1].sum()))
        _refuse(chk, what, rows, where)


def _exact_or_float(values: np.ndarray) -> np.ndarray:
    """Non-negative ``values`` themselves when their sum stays below 2**53, else as float64.

    Below 2**53 every partial sum is an integer float64 holds exactly, so the
    integers give the same sum, maximum and message as their float copy,
    without a float column as long as the variables at the load's peak.
    """
    if not len(values) or len(values) * int(values.max()) < 2**53:
        return values
    return values.astype(np.float64)


def _refuse(chk: Checker, what: str, rows: np.ndarray, where: str) -> None:
    k = int(np.argmax(rows))
    chk.fail(where.format(k), f"{what} sums to {float(rows.sum()):.3g} over the model, beyond what 64-bit "
                              f"integers can add up (limit {TOTAL_LIMIT:.3g}); the counts or sizes are corrupt: "
                              "re-export the profile")

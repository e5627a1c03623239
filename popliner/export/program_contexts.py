"""Which debug context each exported program gets: its own, or one libpva's operation analysis gives.

A program's context names its operation and, through the context's
ancestors, its layer. libpva gives it three ways, in this order of trust:
an operation's ``replacedDebugContext`` (the original operation, when a
PopART transform replaced it), the program's own ``debugContext``, and,
for SDKs whose programs carry none, the context of the operation
``pva.OperationAnalysis`` lists the program under.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from popliner.export.pvaread import attr, ident

__all__ = ["ProgramContexts"]

log = logging.getLogger("popliner.export")

_ABSENT = object()


class ProgramContexts:
    """The debug context of each program of one report (the operation analysis is read once, if needed)."""

    def __init__(self, pva: Any, report: Any, profile: Path) -> None:
        self.pva = pva
        self.report = report
        self.profile = profile
        self._op_contexts: dict[int, Any] | None = None
        self._ops: list[tuple[Any, list[Any]]] | None = None
        self._replaced: dict[int, Any] | None = None

    def of(self, p: Any, pid: int) -> Any:
        """The context of program ``p`` (id ``pid``) as libpva gives it, or None."""
        ctx = self._replaced_contexts().get(pid, _ABSENT)
        if ctx is _ABSENT:
            ctx = getattr(p, "debugContext", _ABSENT)
        if ctx is _ABSENT:
            ctx = self._operation_contexts().get(pid)
        if isinstance(ctx, (list, tuple)):
            ctx = ctx[0] if ctx else None
        return ctx

    def _operation_contexts(self) -> dict[int, Any]:
        """Program id -> debug context from ``pva.OperationAnalysis`` (computed once).

        Used only when programs have no ``debugContext`` attribute.
        """
        if self._op_contexts is None:
            self._op_contexts = {}
            analysis = getattr(self.pva, "OperationAnalysis", None)
            if analysis is None:
                log.warning("%s: programs carry no debug context and pva has no OperationAnalysis; "
                            "operations cannot be named", self.profile)
                return self._op_contexts
            log.info("export: programs carry no debugContext; taking contexts from pva.OperationAnalysis")
            for op, programs in self._operations():
                # PopTorch's own tests prefer replacedDebugContext when it is set.
                ctx = attr(op, "replacedDebugContext")
                if ctx is None:
                    ctx = attr(op, "debugContext")
                if ctx is not None:
                    for prog in programs:
                        self._op_contexts.setdefault(ident(prog), ctx)
        return self._op_contexts

    def _operations(self) -> list[tuple[Any, list[Any]]]:
        """(operation, its programs) from ``pva.OperationAnalysis``, computed once; empty without it."""
        if self._ops is None:
            self._ops = []
            analysis = getattr(self.pva, "OperationAnalysis", None)
            if analysis is not None:
                for op in attr(analysis(self.report), "operations", default=()) or ():
                    programs = getattr(op, "programs", None)
                    programs = programs() if callable(programs) else programs
                    self._ops.append((op, list(programs or ())))
        return self._ops

    def _replaced_contexts(self) -> dict[int, Any]:
        """Program id -> an operation's ``replacedDebugContext``, where libpva sets one.

        It wins over the program's own ``debugContext``: when an operation
        replaced another (PopART transforms), it names the original one.
        """
        if self._replaced is None:
            self._replaced = {}
            for op, programs in self._operations():
                ctx = attr(op, "replacedDebugContext")
                if ctx is not None:
                    for prog in programs:
                        self._replaced.setdefault(ident(prog), ctx)
            if self._replaced:
                log.info("export: %d programs take an operation's replacedDebugContext", len(self._replaced))
        return self._replaced

"""Which debug context each exported program gets: its own, or one libpva's operation analysis gives.

A program's context names its operation and, through the context's
ancestors, its layer. The three ways libpva gives it, in the order they are
trusted, and why ``pva.OperationAnalysis`` is read on every export, are
docs/libpva-mapping.md's "Which context a program gets".
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from popliner.export.pvaread import attr, context_list, ident

__all__ = ["ProgramContexts"]

log = logging.getLogger("popliner.export")

_ABSENT = object()


class ProgramContexts:
    """The debug context of each program of one report (the operation analysis is read once)."""

    def __init__(self, pva: Any, report: Any, profile: Path) -> None:
        self.pva = pva
        self.report = report
        self.profile = profile
        self._ops: list[tuple[Any, list[Any]]] | None = None
        self._op_contexts: dict[int, Any] | None = None
        self._replaced: dict[int, Any] | None = None
        self._op_vars: dict[int, list[Any]] | None = None
        #: Operations whose replaced list has several entries (outlined calls), kept on their own context.
        self.outlined_calls = 0
        #: Whether libpva offers ``OperationAnalysis`` (real libpva always does).
        self.has_analysis = getattr(pva, "OperationAnalysis", None) is not None

    def of(self, p: Any, pid: int) -> Any:
        """The context of program ``p`` (id ``pid``) as libpva gives it, or None."""
        ctx = self._replaced_contexts().get(pid)
        if ctx is not None:
            return ctx
        own = getattr(p, "debugContext", _ABSENT)
        if own is _ABSENT:
            return self._operation_contexts().get(pid)
        found = context_list(own, f"program {pid}'s debugContext")
        if len(found) > 1:
            raise ValueError(f"program {pid}'s debugContext lists {len(found)} contexts; a program has one")
        return found[0] if found else None

    def operation_vars(self, pid: int) -> list[Any]:
        """The lowered variables of the operation whose first program is ``pid`` (for programs without ``vars``).

        The original PopLiner reads variables from ``OperationAnalysis``'s
        operations (``op.vars``); no public code reads ``Program.vars``. When
        programs lack it, each operation's variables go on its first program:
        popliner groups programs by operation, so the operation's set is the same.
        """
        if self._op_vars is None:
            self._op_vars = {}
            for op, programs in self._operations():
                if programs:
                    self._op_vars.setdefault(ident(programs[0]), []).extend(attr(op, "vars", default=()) or ())
        return self._op_vars.get(pid, [])

    def _operation_contexts(self) -> dict[int, Any]:
        """Program id -> its operation's ``debugContext`` (for programs that carry none themselves)."""
        if self._op_contexts is None:
            self._op_contexts = {}
            if not self.has_analysis:
                log.warning("%s: programs carry no debug context and pva has no OperationAnalysis; "
                            "operations cannot be named", self.profile)
                return self._op_contexts
            log.info("export: programs carry no debugContext; taking contexts from pva.OperationAnalysis")
            for op, programs in self._operations():
                found = context_list(attr(op, "debugContext"), f"operation {attr(op, 'name')!r}'s debugContext")
                if found:
                    for prog in programs:
                        self._op_contexts.setdefault(ident(prog), found[0])
        return self._op_contexts

    def _operations(self) -> list[tuple[Any, list[Any]]]:
        """(operation, its programs) from ``pva.OperationAnalysis``, computed once; empty without it."""
        if self._ops is None:
            self._ops = []
            if self.has_analysis:
                for op in attr(self.pva.OperationAnalysis(self.report), "operations", default=()) or ():
                    programs = getattr(op, "programs", None)
                    programs = programs() if callable(programs) else programs
                    self._ops.append((op, list(programs or ())))
        return self._ops

    def _replaced_contexts(self) -> dict[int, Any]:
        """Program id -> the one operation an operation's ``replacedDebugContext`` names."""
        if self._replaced is None:
            self._replaced = {}
            for op, programs in self._operations():
                found = context_list(attr(op, "replacedDebugContext"),
                                     f"operation {attr(op, 'name')!r}'s replacedDebugContext")
                if len(found) > 1:
                    self.outlined_calls += 1
                if len(found) != 1:
                    continue
                for prog in programs:
                    self._replaced.setdefault(ident(prog), found[0])
            if self._replaced:
                log.info("export: %d programs take an operation's replacedDebugContext", len(self._replaced))
            if self.outlined_calls:
                log.info("export: %d operations replaced several others (outlined calls); their programs keep "
                         "the call's own context", self.outlined_calls)
        return self._replaced

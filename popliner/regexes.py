"""Regular expressions from users and files, run with a time bound.

A pattern such as ``(a|aa)+$`` backtracks exponentially: Python's ``re``
takes seconds on a 34-character name and doubles with every few more, and
it cannot be interrupted. Patterns given in options, configs and workbooks
are therefore compiled with the ``regex`` package (the same syntax as
``re``, its version 0 behaviour) and each search gets a timeout. The bounds
(:data:`SEARCH_SECONDS`, :data:`TOTAL_SECONDS`, :data:`PER_NAME_SECONDS`,
``POPLINER_REGEX_SECONDS``), their price and the message: docs/bad-inputs.md
('Regexes from options and files'). The total grows per name so that millions
of quick names always fit, while many names that each backtrack do not.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any, Protocol

import regex

from popliner.errors import UsageProblem

__all__ = ["PER_NAME_SECONDS", "SEARCH_SECONDS", "TOTAL_SECONDS", "BoundedRegex", "RegexRunaway", "Searcher",
           "compile_bounded", "regex_error"]

#: Seconds one search may take (a profile's names are at most a few hundred characters).
SEARCH_SECONDS = 1.0
#: Seconds all searches with one pattern may take together, beyond PER_NAME_SECONDS per name searched.
TOTAL_SECONDS = 20.0
#: A search of a name takes 1-5 microseconds: twenty times that per name is allowed on top of TOTAL_SECONDS.
PER_NAME_SECONDS = 1e-4
_ENV = "POPLINER_REGEX_SECONDS"

#: What ``regex`` raises for a pattern it cannot compile.
regex_error = regex.error


def _scale() -> float:
    text = os.environ.get(_ENV)
    if not text:
        return 1.0
    try:
        value = float(text)
    except ValueError:
        raise UsageProblem(f"{_ENV}={text!r}: expected a number of seconds") from None
    if not 0 < value < 1e6:
        raise UsageProblem(f"{_ENV}={text!r}: expected a positive number of seconds below 1e6")
    return value / SEARCH_SECONDS


class BoundedRegex:
    """A compiled pattern whose searches share a time budget; ``search`` and ``groups`` as ``re.Pattern``'s."""

    def __init__(self, pattern: str, source: str) -> None:
        self.pattern = pattern
        self.source = source
        self._compiled = regex.compile(pattern, regex.VERSION0)
        self.groups: int = self._compiled.groups
        scale = _scale()
        self._each = SEARCH_SECONDS * scale
        self._left = TOTAL_SECONDS * scale
        self._per_name = PER_NAME_SECONDS * scale
        self._searches = 0

    def search(self, text: str) -> Any:
        """The first match in ``text`` or None; :class:`UsageProblem` past the time bound."""
        start = time.monotonic()
        try:
            found = self._compiled.search(text, timeout=max(min(self._each, self._left), 1e-3))
        except TimeoutError:
            if self._left < self._each:  # cut short by what is left of the total: the total ran out
                self._runaway(self._total_spent(self._searches + 1))
            self._runaway(f"over {self._each:.3g} s on {text if len(text) <= 60 else text[:57] + '...'!r}")
        self._searches += 1
        self._left += self._per_name - (time.monotonic() - start)
        if self._left <= 0:
            self._runaway(self._total_spent(self._searches))
        return found

    def _total_spent(self, searches: int) -> str:
        allowed = (TOTAL_SECONDS + PER_NAME_SECONDS * searches) * self._each / SEARCH_SECONDS
        return f"{allowed:.3g} s over {searches} names"

    def _runaway(self, how: str) -> None:
        raise RegexRunaway(self.pattern, self.source, how, self._each) from None


class RegexRunaway(UsageProblem):
    """A pattern stopped past its time bound; :meth:`from_source` names another source (the config file)."""

    def __init__(self, pattern: str, source: str, how: str, seconds: float) -> None:
        self.pattern, self.source, self.how, self.seconds = pattern, source, how, seconds
        super().__init__(f"regex {pattern!r} ({source}) runs too long ({how}): it backtracks, as nested repeats "
                         f"like (a|aa)+ do; simplify it, or set {_ENV} to allow more seconds per name "
                         f"(now {seconds:g})")

    def from_source(self, source: str) -> RegexRunaway:
        return RegexRunaway(self.pattern, source, self.how, self.seconds)


class Searcher(Protocol):
    """What the callers use of a compiled pattern: ``search`` and ``groups``, as ``re.Pattern`` has them."""

    @property
    def groups(self) -> int: ...

    def search(self, text: str) -> Any: ...


def compile_bounded(pattern: str, source: str, builtin: str | None = None) -> Searcher:
    """``pattern`` compiled with a time bound; :class:`UsageProblem` naming ``source`` when it is no regex.

    ``builtin``: the caller's own default pattern. When ``pattern`` is it, it
    needs no bound (it is the project's, and does not backtrack) and Python's
    ``re`` runs it, several times faster per name than a bounded search
    (tests/test_regexes.py holds both engines to the same matches on every
    built-in pattern).
    """
    if builtin is not None and pattern == builtin:
        return re.compile(pattern)
    try:
        return BoundedRegex(pattern, source)
    except regex.error as exc:
        raise UsageProblem(f"{source} {pattern!r}: not a valid regular expression ({exc})") from None

"""Typed access to a parsed config document, with one-line errors that name the file and the place."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from popliner.errors import ConfigError
from popliner.profile.tilevector import MAX_VALUE
from popliner.regexes import BoundedRegex, regex_error

__all__ = ["Reader", "describe", "join_place"]


class Reader:
    """Typed access to the parsed document with one-line errors that name the place."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, problem: str, fix: str) -> NoReturn:
        place = f" {where}:" if where else ""
        raise ConfigError(f"{self.source}:{place} {problem}; {fix}")

    def mapping(self, value: Any, where: str, allowed: Sequence[str], required: Sequence[str],
                what: str | None = None) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            self.fail(where, f"{what or 'this'} must be a mapping (`key: value` lines), got {describe(value)}",
                      "see docs/pipeline-config.md for the layout")
        for key in value:
            if key not in allowed:
                self.fail(join_place(where, str(key)), "unknown key", f"allowed here: {', '.join(allowed)}")
        for key in required:
            if key not in value:
                self.fail(join_place(where, key), "missing", f"add the `{key}:` entry")
        return value

    def integer(self, value: Any, where: str, minimum: int = 0, maximum: int = MAX_VALUE) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(where, f"expected a whole number, got {describe(value)}", "write it without quotes or a dot")
        if value < minimum:
            self.fail(where, f"{value} is below {minimum}", f"use a value of {minimum} or more")
        if value > maximum:
            # Refuse absurd sizes here rather than run out of memory or time later.
            self.fail(where, f"{value} is above the limit {maximum:,}", f"use a value of at most {maximum:,}")
        return int(value)

    def number(self, value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e300:
            shown = repr(value) if len(repr(value)) <= 30 else f"a number of {len(str(value))} digits"
            self.fail(where, f"expected a positive finite number, got {shown}", "write e.g. 1330000000.0")
        return float(value)

    def text(self, value: Any, where: str, allow_empty: bool = False) -> str:
        if not isinstance(value, str) or (not value and not allow_empty):
            self.fail(where, f"expected text, got {describe(value)}", "quote the value")
        return value

    def choice(self, value: Any, where: str, allowed: Sequence[str]) -> str:
        if not isinstance(value, str) or value not in allowed:
            self.fail(where, f"{describe(value)} is not one of {', '.join(allowed)}",
                      f"write one of {', '.join(allowed)}")
        return value

    def boolean(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            self.fail(where, f"expected true or false, got {describe(value)}", "write true or false, without quotes")
        return value

    def regex(self, value: Any, where: str) -> str | None:
        """A regular expression, or None when the key is absent (popliner's default rule)."""
        if value is None:
            return None
        text = self.text(value, where)
        try:
            BoundedRegex(text, where)  # the engine the analysis runs it with (time-bounded)
        except regex_error as exc:
            self.fail(where, f"not a regular expression ({exc})", "fix the pattern, or remove the key for the default")
        return text

    def layer_name(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail(where, f"expected a layer name (text), got {describe(value)}",
                      f"quote it: '{value}'" if value is not None else "remove the empty entry")
        return value


def join_place(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


#: How a message names a value it did not expect, by its type (the first that matches; bool before int).
_DESCRIPTIONS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (type(None), "nothing"), (bool, "the boolean {}"), ((int, float), "the number {}"), (str, "the text {!r}"),
    (list, "a list"), (dict, "a mapping"))


def describe(value: Any) -> str:
    for kind, text in _DESCRIPTIONS:
        if isinstance(value, kind):
            return text.format(value)
    return type(value).__name__

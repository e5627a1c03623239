"""JSON text to Python objects, with every fault worded the same way whichever parser ran."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from popliner.errors import ProfileFormatError

__all__ = ["JSON_SPACE", "ORJSON_SAFE_DEPTH", "objects_nested_deeper", "parse_json", "skip_space"]

#: orjson before 3.9.15 (CVE-2024-27454) has no depth limit when it reads: some 100,000 nested objects overflow
#: the C stack and end the process with SIGSEGV (arrays it reads fine). Deeper text goes to the standard parser.
ORJSON_SAFE_DEPTH = 1000
_NOT_BRACES = bytes(b for b in range(256) if b not in (0x7B, 0x7D))
#: The four bytes JSON allows between tokens (``bytes.isspace`` also takes \v and \f, which JSON does not).
JSON_SPACE = b" \t\n\r"
_SPACE_SET = frozenset(JSON_SPACE)


def skip_space(text: bytes | bytearray, i: int) -> int:
    """The index of the first byte at or after ``i`` that is not JSON whitespace (``len(text)`` if none).

    Used between the tokens the column reader checks one by one: the runs
    are short (an indented document's newline and indentation).
    """
    n = len(text)
    while i < n and text[i] in _SPACE_SET:
        i += 1
    return i


def objects_nested_deeper(text: bytes | bytearray, limit: int) -> bool:
    """Whether ``{`` minus ``}`` counted from the start passes ``limit`` anywhere (braces in strings count too).

    An over-count only sends the text to the slower parser. The braces are
    picked out with ``bytes.translate`` (C speed), then counted with numpy.
    """
    if text.count(b"{") <= limit:
        return False
    braces = np.frombuffer(text.translate(None, _NOT_BRACES), np.uint8)
    depth = np.cumsum(np.where(braces == 0x7B, 1, -1).astype(np.int32))
    return bool(depth.max() > limit)


def parse_json(text: bytes | bytearray, path: str) -> Any:
    """The document, or a :class:`ProfileFormatError` naming the file and where the JSON breaks."""
    # isspace() stops at the first other byte; strip() would copy a big file.
    if not text or text.isspace():
        raise ProfileFormatError(path, "", "empty file; a profile is one JSON object")
    try:
        import orjson
    except ImportError:  # pragma: no cover - orjson is a dependency, but the fallback stays correct
        orjson = None  # type: ignore[assignment]
    if orjson is not None and not objects_nested_deeper(text, ORJSON_SAFE_DEPTH):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            # Only bad input gets here. orjson's wording changes between its
            # versions, so the standard parser re-reads the text to name the
            # fault in the same words everywhere (or to accept what orjson
            # cannot hold, such as integers beyond 64 bits, for the checks that follow).
            pass
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileFormatError(path, f"byte {exc.start}", "not UTF-8 text; a profile is UTF-8 JSON") from None
    try:
        return json.loads(decoded, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise ProfileFormatError(path, f"line {exc.lineno} column {exc.colno}", f"not valid JSON: {exc.msg}") from None
    except ValueError as exc:
        # NaN/Infinity (refused below) or an integer literal beyond Python's digit limit.
        raise ProfileFormatError(path, "", f"not valid JSON: {exc}") from None
    except RecursionError:
        raise ProfileFormatError(path, "", "JSON nested too deeply") from None


def _refuse_constant(name: str) -> Any:
    # json.loads accepts NaN and Infinity, which are not JSON; orjson refuses them too.
    raise ValueError(f"{name} is not a JSON number")

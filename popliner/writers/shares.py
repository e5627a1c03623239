"""A share as people read it: a percentage that never rounds onto a boundary it has not reached.

``1.04`` of a budget printed as ``1.0x`` reads as "fits"; ``0.99996`` as
``100.0%`` reads as "full"; a growth of 3 bytes in a million as ``+0.0%``
reads as "unchanged". Each of these gets one more digit until it does not.
"""

from __future__ import annotations

__all__ = ["percent", "signed_bytes"]

_MAX_DIGITS = 6


def percent(share: float, digits: int = 1, *, signed: bool = False) -> str:
    """``share`` (1.0 = 100%) as ``104.3%`` (``+4.3%`` when ``signed``), precise enough to say which side of
    0% and 100% it is on."""
    sign = "+" if signed else ""
    value = share * 100
    for d in range(digits, _MAX_DIGITS + 1):
        rounded = round(value, d)
        if (rounded in (0.0, 100.0, -100.0)) == (value in (0.0, 100.0, -100.0)):
            break
    return f"{value:{sign}.{d}f}%"


def signed_bytes(change: int) -> str:
    """``+12,345`` / ``-12,345`` / ``0``."""
    return f"{change:+,}" if change else "0"

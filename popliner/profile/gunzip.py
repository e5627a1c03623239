"""The profile's bytes as JSON text: gunzip streamed, with the decompressed size bounded while it grows.

A gzip stream can inflate about a thousand times, so the text is inflated a
piece at a time and the limit checked after every piece: a bomb is refused
holding no more than the limit plus one piece. The two limits (the smaller
wins) and the message are docs/bad-inputs.md's ("Bounded work", gzip bombs).
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from typing import cast

from isal import isal_zlib

from popliner.errors import ProfileFormatError

__all__ = ["decompress", "max_gzip_ratio", "max_profile_bytes"]

GZIP_MAGIC = b"\x1f\x8b"
_DEFAULT_MAX_BYTES = 8 << 30
_DEFAULT_RATIO = 100
#: The ratio limit never goes below this: small files may be sparse and compress very well.
RATIO_FLOOR = 512 << 20
#: The trailer's size is believed up to this many times the compressed size (real profiles: 7 to 9).
_HINT_RATIO = 32
#: Decompressed bytes produced per step: the limit is checked this often.
CHUNK = 1 << 22


def _env_int(name: str, default: int) -> int:
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default


def max_profile_bytes() -> int:
    """Largest decompressed profile accepted (``$POPLINER_MAX_PROFILE_BYTES``, default 8 GiB)."""
    return _env_int("POPLINER_MAX_PROFILE_BYTES", _DEFAULT_MAX_BYTES)


def max_gzip_ratio() -> int:
    """Largest decompressed/compressed size ratio accepted (``$POPLINER_MAX_GZIP_RATIO``, default 100)."""
    return _env_int("POPLINER_MAX_GZIP_RATIO", _DEFAULT_RATIO)


def is_gzip(raw: bytes, path: str) -> bool:
    return path.endswith(".gz") or raw[:2] == GZIP_MAGIC


def decompress(raw: bytes, path: str, *, ratio_floor: int = RATIO_FLOOR) -> bytes:
    """The JSON text of the file's bytes (``raw`` itself when it is not gzip); ``ratio_floor``: the least the
    ratio limit allows."""
    limit = max_profile_bytes()
    if not is_gzip(raw, path):
        if len(raw) > limit:
            raise ProfileFormatError(path, "", _too_big(len(raw), limit, "POPLINER_MAX_PROFILE_BYTES"))
        return raw
    ratio_cap = max(ratio_floor, max_gzip_ratio() * len(raw))
    cap, knob = (limit, "POPLINER_MAX_PROFILE_BYTES") if limit <= ratio_cap else (
        ratio_cap, f"POPLINER_MAX_GZIP_RATIO (now {max_gzip_ratio()} times the {len(raw):,} compressed bytes)")
    try:
        return _inflate(raw, path, cap, knob)
    except (zlib.error, cast("type[Exception]", isal_zlib.error)):  # isal's stub types its error as an instance
        # Only a damaged stream gets here: the standard reader words the fault the same way every time.
        return _inflate_for_message(raw, path, cap, knob)


def _too_big(reached: int, cap: int, knob: str) -> str:
    return (f"decompressed profile reached {reached:,} bytes, over the limit of {cap:,} bytes; "
            f"if it is genuine, raise {knob}")


def _inflate(raw: bytes, path: str, cap: int, knob: str) -> bytes:
    """Every gzip member of ``raw`` inflated piece by piece, the limit checked after each piece.

    The first piece is as long as the trailer says the text is (its size
    modulo 2**32, so only a hint, and believed only up to
    :data:`_HINT_RATIO` times the compressed size): a profile of the usual
    kind comes out in that one piece, which is then the text itself, with
    no copy. Every later piece is :data:`CHUNK` bytes at most.
    """
    hint = int.from_bytes(raw[-4:], "little") if len(raw) >= 18 else 0
    step = max(CHUNK, min(hint, cap, _HINT_RATIO * len(raw)) + 1)
    pieces: list[bytes] = []
    size = 0
    pending = raw
    d = isal_zlib.decompressobj(wbits=31)  # one member, header and trailer (CRC-32, length) checked
    while True:
        if not pending:
            raise zlib.error("cut short")  # the standard reader words it
        piece = d.decompress(pending, step)
        step = CHUNK
        pending = d.unconsumed_tail
        size += len(piece)
        if size > cap:
            raise ProfileFormatError(path, "", _too_big(size, cap, knob))
        pieces.append(piece)
        if d.eof:
            pending = d.unused_data
            if not pending.strip(b"\0"):
                break  # the end, or zero padding after it (gzip(1) allows it too)
            if pending[:2] != GZIP_MAGIC:
                raise zlib.error("trailing garbage")
            d = isal_zlib.decompressobj(wbits=31)  # the next member
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _inflate_for_message(raw: bytes, path: str, cap: int, knob: str) -> bytes:
    """The standard library's reader, piece by piece: its words for a damaged stream (or the text, if it is not)."""
    out = bytearray()
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as stream:
            while chunk := stream.read(CHUNK):
                if len(out) + len(chunk) > cap:
                    raise ProfileFormatError(path, "", _too_big(len(out) + len(chunk), cap, knob))
                out += chunk
    except (OSError, EOFError, zlib.error) as exc:
        reason = str(exc).split(" 0x")[0]  # drop checksum values: same message for the same fault
        raise ProfileFormatError(path, "", f"corrupt gzip stream ({reason}); re-export or re-copy the file") from None
    return bytes(out)

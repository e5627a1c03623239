"""Write one large JSON document piece by piece, and spool columns to disk.

A full-size Poplar report has millions of lowered variables. Building the
whole format-v1 document as Python objects first would need gigabytes, so
the exporter writes it as a stream: small values (one program, the target)
are encoded whole, big arrays are written chunk by chunk. Data that has to be
written in a different order than it is read (the variable columns) goes
through unnamed temporary files (:class:`IntSpool`, :class:`FragmentSpool`),
which the OS removes even when the process dies.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

__all__ = ["DocumentTooLarge", "FragmentSpool", "IntSpool", "JsonWriter", "dumps", "int_items", "spool_folder"]


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON for one value (numpy arrays and ints allowed)."""
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)


def int_items(values: np.ndarray) -> bytes:
    """``1,2,3`` (no brackets) for a 1-D integer array: one chunk of a JSON list."""
    if values.size == 0:
        return b""
    return dumps(np.ascontiguousarray(values, dtype=np.int64))[1:-1]


class JsonWriter:
    """Writes nested objects and arrays in order, placing commas itself.

    Output is buffered and handed to ``stream`` in blocks of about
    ``flush_bytes`` so that a gzip stream below gets large writes.
    """

    def __init__(self, stream: IO[bytes], flush_bytes: int = 1 << 20, limit: int | None = None) -> None:
        self._stream = stream
        #: Bytes written so far, and the most the document may take (:class:`DocumentTooLarge` past it).
        self.total = 0
        self.limit = limit
        self._buf = bytearray()
        self._flush_bytes = flush_bytes
        self._first: list[bool] = []  # per open container: nothing written yet
        self._after_key = False

    # -- containers ---------------------------------------------------------

    def begin(self, opener: bytes) -> None:
        """Open an object (``b"{"``) or an array (``b"["``)."""
        self._prefix()
        self._write(opener)
        self._first.append(True)

    def end(self, closer: bytes) -> None:
        self._first.pop()
        self._write(closer)

    # -- values -------------------------------------------------------------

    def key(self, name: str) -> None:
        """Start a member of the current object; the next value is its value."""
        self._prefix()
        self._write(dumps(name) + b":")
        self._after_key = True

    def value(self, obj: Any) -> None:
        """One whole value: an array element, or the value after :meth:`key`."""
        self._prefix()
        self._write(dumps(obj))

    def field(self, name: str, obj: Any) -> None:
        self.key(name)
        self.value(obj)

    def items(self, fragment: bytes) -> None:
        """Append pre-encoded, comma-separated array elements (may be empty)."""
        if fragment:
            self._prefix()
            self._write(fragment)

    def raw(self, data: bytes) -> None:
        """Bytes that continue what the last call wrote (no separator added)."""
        self._write(data)

    def int_array(self, chunks: Iterable[np.ndarray]) -> None:
        """A JSON list of integers written chunk by chunk."""
        self.begin(b"[")
        for chunk in chunks:
            self.items(int_items(chunk))
        self.end(b"]")

    def flush(self) -> None:
        if self._buf:
            self._stream.write(bytes(self._buf))
            self._buf.clear()

    # -- internals ----------------------------------------------------------

    def _prefix(self) -> None:
        if self._after_key:
            self._after_key = False
            return
        if self._first:
            if not self._first[-1]:
                self._write(b",")
            self._first[-1] = False

    def _write(self, data: bytes) -> None:
        self.total += len(data)
        if self.limit is not None and self.total > self.limit:
            raise DocumentTooLarge(self.limit)
        self._buf += data
        if len(self._buf) >= self._flush_bytes:
            self.flush()


class DocumentTooLarge(ValueError):
    """The document grew past the size its reader accepts."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


class _Spool:
    """An unnamed temporary file, written first, then read back from its start."""

    def __init__(self, folder: Path | None = None) -> None:
        self._file: IO[bytes] = tempfile.TemporaryFile(dir=folder)  # noqa: SIM115 - closed by close()
        self.count = 0

    def _rewound(self) -> IO[bytes]:
        """The file, flushed and back at its start."""
        self._file.flush()
        self._file.seek(0)
        return self._file

    def close(self) -> None:
        self._file.close()


class IntSpool(_Spool):
    """An append-only int64 column kept in an unnamed temporary file."""

    def append(self, values: list[int] | np.ndarray) -> None:
        arr = np.asarray(values, dtype=np.int64)
        self._file.write(arr.tobytes())
        self.count += len(arr)

    def chunks(self, size: int) -> Iterator[np.ndarray]:
        """Read the column back in order, ``size`` values at a time."""
        f = self._rewound()
        return (np.frombuffer(block, dtype=np.int64) for block in iter(lambda: f.read(size * 8), b""))

    def read_all(self) -> np.ndarray:
        return np.fromfile(self._rewound(), dtype=np.int64) if self.count else np.zeros(0, np.int64)


class FragmentSpool(_Spool):
    """Encoded JSON array elements, comma-separated, in a temporary file."""

    def add(self, obj: Any) -> None:
        self._file.write((b"," if self.count else b"") + dumps(obj))
        self.count += 1

    def write_array(self, writer: JsonWriter, block: int = 1 << 20) -> None:
        """Copy the elements into ``writer`` as one JSON list."""
        f = self._rewound()
        writer.begin(b"[")
        for k, data in enumerate(iter(lambda: f.read(block), b"")):
            if k:
                writer.raw(data)  # continues the same run of elements
            else:
                writer.items(data)  # places the separator before the first element
        writer.end(b"]")


def spool_folder(out_path: Path) -> Path | None:
    """Spool next to the output: that disk was chosen to hold a profile."""
    parent = out_path.parent if str(out_path.parent) else Path(".")
    return parent if os.access(parent, os.W_OK) else None

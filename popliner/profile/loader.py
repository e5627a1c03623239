"""Read a format-v1 profile (``.json`` or ``.json.gz``), validate it, build a Profile.

Every problem is a :class:`ProfileFormatError` naming the file, the place in
the document (``programs[812].children[3]``) and what is wrong. The work is
split by job: :mod:`~popliner.profile.gunzip` (bounded decompression),
:mod:`~popliner.profile.columns` and :mod:`~popliner.profile.namelist` (the
bulky lists read straight from the text, whatever its whitespace),
:mod:`~popliner.profile.jsontext` (the rest as JSON),
:mod:`~popliner.profile.builder` with :mod:`~popliner.profile.varcols` and
:mod:`~popliner.profile.programs` (sections into arrays), all under the one
set of rules in :mod:`~popliner.profile.rules`.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import logging
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from popliner.allocator import give_back_freed_memory
from popliner.arrays import huge_page_setter
from popliner.errors import ProfileFormatError
from popliner.profile.builder import Builder
from popliner.profile.columns import PIECE_BYTES, extract_columns
from popliner.profile.files import read_profile_bytes
from popliner.profile.gunzip import decompress
from popliner.profile.jsontext import ORJSON_SAFE_DEPTH, objects_nested_deeper, parse_json
from popliner.profile.model import Profile
from popliner.profile.rules import MAX_TILES, NotFast

__all__ = ["MAX_TILES", "load_profile", "parse_profile_bytes", "small_pages"]

log = logging.getLogger(__name__)


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Read, decompress, parse and validate one profile file."""
    raw = read_profile_bytes(path)
    return parse_profile_bytes(raw, str(path))


def parse_profile_bytes(raw: bytes, path: str, sha256: str | None = None, *, piece: int = PIECE_BYTES) -> Profile:
    """The profile in ``raw`` (JSON, gzipped or not); ``piece``: bytes the column reader takes at once."""
    digest = sha256 or hashlib.sha256(raw).hexdigest()
    with _gc_paused(), small_pages():
        box = [decompress(raw, path)]
        fast = _parse_fast(box, path, digest, piece)
        if fast is not None:
            return fast
        # The shortcut let go of the text once it had its lists: only a document it then
        # found invalid or unusual is inflated a second time.
        text = box[0] if box else decompress(raw, path)
        return Builder(parse_json(text, path), path, digest).build()


def _parse_fast(box: list[bytes], path: str, digest: str, piece: int) -> Profile | None:
    """The profile read through :mod:`popliner.profile.columns`, or None to take the ordinary path.

    ``box`` holds the text; it is emptied once the bulky lists are arrays, so
    that the text's memory goes before the rest is parsed. The shortcut never
    reports a problem itself: on anything unexpected, including an invalid
    document, the ordinary path runs from the start and words the error, so
    every message comes from one place.
    """
    try:
        import orjson
    except ImportError:  # pragma: no cover - orjson is a dependency
        return None
    # The names are packed on another thread while this one reads the other columns and
    # parses the rest of the document.
    with ThreadPoolExecutor(1) as pool:
        found = extract_columns(box[0], pool, piece=piece)
        if found is None:
            return None
        box.clear()  # the bulky lists are arrays now; the rest is a small document
        rest, extracted = found
        # The packed names let go of the text, which then goes before the rest's objects are made.
        extracted.wait_for_names()
        # Its pages too: under the command's allocator thresholds (popliner.allocator) they would stay with
        # the process, and the arrays made from here on do not all reuse them.
        give_back_freed_memory()
        if objects_nested_deeper(rest, ORJSON_SAFE_DEPTH):
            return None  # the ordinary path reads it without orjson
        try:
            doc = orjson.loads(rest)
        except orjson.JSONDecodeError:
            return None
        del rest
    try:
        return Builder(doc, path, digest, extracted).build()
    except (ProfileFormatError, NotFast):
        return None


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while the document is parsed and read.

    The parsed document is millions of lists and dicts with no reference
    cycles; every full collection during the parse walks all of them again,
    which made parsing grow faster than the file (bert-large at 2x: 6.2 s
    with the collector, 3.8 s without). The previous state is restored.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """Turn numpy's huge-page advice off while the document is read (the previous state is restored).

    numpy asks the kernel for transparent huge pages on every array of 4 MB
    or more. A cold load makes several gigabytes of such arrays that live for
    moments; once the machine's memory is fragmented, each huge page costs a
    compaction, which took more system time than the ordinary page faults it
    saves (bert-large 4x: 4.2-4.3 s of system time with the advice, 2.9-3.1 s
    without, in pairs of fresh processes).
    """
    setter = huge_page_setter()
    previous = setter(False) if setter is not None else None
    try:
        yield
    finally:
        if setter is not None and previous is not None:
            setter(previous)

"""What makes a cache entry trusted: its folder and file, its digest, and its arrays' invariants.

A cache entry's name is predictable (the profile's digest), so whoever can
write in the folder could plant something under it. The folder and file
rules (as ssh and pip apply them to their own folders), what each refusal
says and how an entry is written are docs/bad-inputs.md's "The cache folder".

The digest (over everything the entry holds, compared before a codec, a
shape or a name from it is used) and the invariants (every index the code
later follows in range, even in an entry changed and signed again), with what
each refusal does: the same section. Each check is a few vectorised passes
over a column, cheap beside reading it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import secrets
import stat
from collections.abc import Callable, Mapping, Sized
from pathlib import Path
from typing import BinaryIO

import numpy as np

from popliner.hardware import CLOCK_HZ_RANGE
from popliner.profile.lazycol import Deferred
from popliner.profile.model import PROGRAM_TYPES, Profile, Target
from popliner.profile.rules import MAX_TILES, back_edge
from popliner.profile.tilevector import MAX_VALUE, RunTable

__all__ = ["Bad", "check_csr", "check_len", "check_profile", "check_range", "digest",
           "open_entry", "usable_dir", "write_entry"]

log = logging.getLogger(__name__)

#: Folders already refused in this process, so that the warning is printed once per run.
_REFUSED: set[str] = set()
_FIX = "running without the cache; pass --cache-dir or set POPLINER_CACHE_DIR to a folder of your own"


def _warn_once(where: Path, problem: str) -> None:
    key = f"{where}\0{problem}"
    if key not in _REFUSED:
        _REFUSED.add(key)
        log.warning("cache folder %s %s; %s", where, problem, _FIX)


def _problem(path: Path, st: os.stat_result, own: bool) -> str | None:
    """Why another user could change what is in ``path`` (a folder), or None."""
    me = os.geteuid()
    if own and st.st_uid != me:
        return f"is owned by user {st.st_uid}, not by you (user {me})"
    if not own and st.st_uid not in (me, 0):
        return f"is inside {path}, which user {st.st_uid} owns"
    loose = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if loose and (own or not st.st_mode & stat.S_ISVTX):
        who = "its group and others" if loose == stat.S_IWGRP | stat.S_IWOTH else (
            "its group" if loose == stat.S_IWGRP else "others")
        mode = f"mode {stat.S_IMODE(st.st_mode):04o}"
        return (f"can be written by {who} ({mode}); chmod go-w it or use another" if own
                else f"is inside {path}, which {who} can write ({mode})")
    return None


def usable_dir(where: Path) -> bool:
    """Create ``where`` (mode 0700) if missing; whether it is safe to use (else one warning, once)."""
    try:
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.stat(where)
    except OSError as exc:
        _warn_once(where, f"cannot be used ({exc.strerror or exc})")
        return False
    if not stat.S_ISDIR(st.st_mode):
        _warn_once(where, "is not a folder")
        return False
    problem = _problem(where, st, own=True)
    parent = where.resolve()
    while problem is None and parent.parent != parent:
        parent = parent.parent
        try:
            problem = _problem(parent, os.stat(parent), own=False)
        except OSError:
            break
    if problem is not None:
        _warn_once(where, problem)
        return False
    return True


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _not_ours(path: Path, what: str) -> None:
    log.warning("cache entry %s is %s; ignoring it (it is replaced, never followed, when the cache is written)",
                path, what)


def open_entry(path: Path) -> io.BufferedReader | None:
    """The entry open for reading, or None when absent or not a regular file of ours (then one warning)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cache entry %s cannot be read (%s); rebuilding it", path, exc.strerror or exc)
        return None
    if not stat.S_ISREG(st.st_mode):
        _not_ours(path, _kind(st.st_mode))
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:  # swapped for a link (ELOOP) or removed since the lstat
        log.warning("cache entry %s cannot be opened (%s); rebuilding it", path, exc.strerror or exc)
        return None
    now = os.fstat(fd)
    problem = None
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
        problem = "changing under us"
    elif now.st_uid != os.geteuid():
        problem = f"owned by user {now.st_uid}, not by you"
    if problem is not None:
        os.close(fd)
        _not_ours(path, problem)
        return None
    return os.fdopen(fd, "rb")


def write_entry(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write an entry through a fresh temporary file in its folder, then rename it over ``path``.

    The rename replaces whatever has the name (a planted link itself, never
    its target). On any failure, Ctrl-C included, the temporary file goes.
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def digest(sha256: str, arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 of the profile's digest and every stored member (name, type, shape, bytes as stored).

    ``arrays`` holds the metadata document too (as its deflated bytes): the
    digest covers everything an entry holds. Taken over the members as
    stored (packed), so it costs a few milliseconds per ten megabytes.
    """
    h = hashlib.sha256(sha256.encode())
    for k in sorted(arrays):
        a = arrays[k]
        h.update(f"{k}|{a.dtype.str}|{a.shape}|".encode())
        flat = a.reshape(-1, order="A")  # a view of a C- or Fortran-ordered array: its bytes as stored
        if a.size:
            h.update(np.ascontiguousarray(flat).view(np.uint8).data)
    return h.hexdigest()


class Bad(ValueError):
    """A cached array that breaks the profile's invariants (the entry is rebuilt)."""


def check_len(name: str, a: Sized, n: int) -> None:
    if len(a) != n:
        raise Bad(f"{name} has {len(a)} entries, expected {n}")


def check_range(name: str, a: np.ndarray | Deferred, lo: int, hi: int) -> None:
    """Every item in [lo, hi); integers only."""
    if not isinstance(a, (np.ndarray, Deferred)) or a.dtype.kind not in "iu":
        raise Bad(f"{name} is not an integer array")
    if a.size and (int(a.min()) < lo or int(a.max()) >= hi):
        raise Bad(f"{name} holds values outside [{lo}, {hi})")


def check_csr(name: str, ptr: np.ndarray, idx: np.ndarray | Deferred, rows: int, hi: int) -> None:
    """``ptr`` (rows + 1, non-decreasing, 0 to len(idx)) over ``idx`` (values in [0, hi))."""
    _check_ptr(name, ptr, rows, len(idx))
    check_range(name, idx, 0, hi)


def _check_ptr(name: str, ptr: np.ndarray, rows: int, n: int) -> None:
    """``ptr`` has rows + 1 integers, non-decreasing from 0 to ``n``."""
    check_len(f"{name} pointers", ptr, rows + 1)
    check_range(f"{name} pointers", ptr, 0, n + 1)
    if int(ptr[0]) != 0 or int(ptr[-1]) != n or bool((np.diff(ptr) < 0).any()):
        raise Bad(f"{name} pointers are not a CSR index")


def _check_runs(name: str, table: RunTable, rows: int, tiles: int, keys: int | None = None) -> None:
    n = len(table.first)
    _check_ptr(name, table.ptr, rows, n)
    check_len(f"{name} stops", table.stop, n)
    check_len(f"{name} values", table.value, n)
    check_range(f"{name} first tiles", table.first, 0, tiles)
    check_range(f"{name} stop tiles", table.stop, 1, tiles + 1)
    if bool((table.stop <= table.first).any()):
        raise Bad(f"{name} has empty runs")
    if keys is not None:
        if table.key is None:
            raise Bad(f"{name} has no keys")
        check_len(f"{name} keys", table.key, n)
        check_range(f"{name} keys", table.key, 0, keys)


def _check_target(t: Target) -> None:
    """The loader's ranges for the target (:meth:`popliner.profile.builder.Builder.build_target`), again: an
    entry written before a range was checked (clocks, issue 39) holds what the loader now refuses."""
    if type(t.tiles_per_ipu) is not int or not 1 <= t.tiles_per_ipu <= MAX_TILES:
        raise Bad("tiles per IPU out of range")
    for name in ("num_tiles", "num_ipus", "bytes_per_tile"):
        value = getattr(t, name)
        if type(value) is not int or not 1 <= value <= MAX_VALUE:
            raise Bad(f"target {name} out of range")
    low, high = CLOCK_HZ_RANGE
    if type(t.clock_hz) is not float or not low <= t.clock_hz <= high:
        raise Bad(f"a clock of {t.clock_hz!r} Hz, outside the {low:g} to {high:g} Hz the loader accepts")


def check_profile(p: Profile) -> None:
    """Raise :class:`Bad` when an index in ``p`` points outside what it indexes."""
    _check_target(p.target)
    tiles = p.target.tiles_per_ipu
    v, progs, ctx, vt = p.variables, p.programs, p.contexts, p.vertex_types
    steps, classes, n_prog = p.num_steps, p.num_classes, progs.count
    for col in ("bytes", "tile", "klass", "recompute_tensor"):
        check_len(f"variables.{col}", getattr(v, col), v.count)
    # vars(): the columns a cached load leaves packed are checked as stored, without unpacking them
    check_len("variables.ids", vars(v)["ids"], v.count)
    check_len("variable name pointers", vars(v.names)["ptr"], v.count + 1)
    check_range("variable tiles", v.tile, 0, tiles)
    check_range("variable classes", v.klass, 0, max(classes, 0))
    check_range("variable bytes", v.bytes, 0, 1 << 62)
    check_len("interval ends", p.iv_end, len(p.iv_start))
    if classes < 0:
        raise Bad("liveness class pointers are not a CSR index")
    _check_ptr("liveness class", p.class_ptr, classes, len(p.iv_start))
    check_range("interval starts", p.iv_start, 0, steps + 1)
    check_range("interval ends", p.iv_end, 0, steps + 1)
    if bool((p.iv_end < p.iv_start).any()):
        raise Bad("an interval ends before it starts")
    for col in ("type", "context", "repeat_count"):
        check_len(f"programs.{col}", getattr(progs, col), n_prog)
    check_len("program names", progs.names, n_prog)
    check_range("program types", progs.type, 0, len(PROGRAM_TYPES))
    check_range("program contexts", progs.context, -1, ctx.count)
    check_range("repeat counts", progs.repeat_count, 0, 1 << 62)
    check_csr("program children", progs.child_ptr, progs.child_idx, n_prog, n_prog)
    check_csr("program variables", progs.var_ptr, vars(progs)["var_idx"], n_prog, v.count)
    for name in ("control", "exchange", "cycles"):
        _check_runs(f"program {name}", getattr(progs, name), n_prog, tiles)
    _check_runs("program vertices", progs.vertices, n_prog, tiles, keys=len(vt.names))
    check_len("vertex sizes", vt.size, len(vt.names))
    _check_runs("vertex code", vt.code, len(vt.names), tiles)
    check_range("control programs", p.control_programs, 0, n_prog)
    check_range("steps", p.steps, 0, n_prog)
    for col in ("layer", "name", "data"):
        check_len(f"debug context {col}s", getattr(ctx, col), ctx.count)
    check_range("debug context parents", ctx.parent, -1, ctx.count)
    par = ctx.parent.tolist()
    if back_edge(range(len(par)), lambda c: () if par[c] == -1 else (par[c],)) is not None:
        raise Bad("the debug-context parent links form a cycle")
    for key, column in (p.tile_memory or {}).items():
        check_len(f"tile memory {key}", column, tiles)

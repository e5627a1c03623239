"""The cache folder and its files, trusting nothing found there.

A cache entry's name is predictable (the profile's digest), so whoever can
write in the folder could plant something under it. The rules, as ssh and
pip apply them to their own folders:

* The folder is created mode 0700. One that another user owns, or that its
  group or others may write (or whose parent folders they may write, except
  sticky ones such as /tmp), is not used: one warning line and the run goes
  on without the cache (its figures are the same, only slower).
* An entry is opened only when ``lstat`` says it is a regular file of ours;
  a symlink, FIFO, device or folder under an entry's name is never opened
  or followed (one warning line; the next write replaces the name itself,
  never what a link points at). Opening uses O_NOFOLLOW and O_NONBLOCK, so a
  swap between the check and the open fails instead of following or hanging.
* An entry is written to a fresh temporary name in the same folder, created
  with O_EXCL|O_NOFOLLOW and mode 0600, then renamed over the entry's name.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["open_entry", "usable_dir", "write_entry"]

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

"""Running a program that starts programs of its own (LibreOffice) with a time limit that holds.

``subprocess.run(..., capture_output=True, timeout=...)`` kills only the
program it started, then reads its pipes to the end: a child of that program
that still holds them (soffice's soffice.bin) keeps that read, and the test,
waiting for ever. Here the program runs in a session of its own with its output
in files, and at the limit the whole group is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from collections.abc import Sequence

import pytest


def run_group(argv: Sequence[str], *, timeout: float) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` to its end (a non-zero exit raises CalledProcessError); past ``timeout`` s the test fails."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            err.seek(0)
            pytest.fail(f"{argv[0]} still running after {timeout} s; its group was killed: "
                        f"{err.read()[-2000:].decode(errors='replace')}")
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(list(argv), code, out.read(), err.read())
    done.check_returncode()
    return done

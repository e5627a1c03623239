"""The CI check as JUnit XML: one test case per IPU, an IPU over budget a failure."""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime, timezone
from typing import IO
from xml.etree import ElementTree as ET

from popliner.check import CheckResult
from popliner.textsafe import shown
from popliner.writers.check_report import overflow_text
from popliner.writers.writer import FormatWriter

__all__ = ["JUNIT", "write_junit"]


def write_junit(result: CheckResult, stream: IO[bytes]) -> None:
    """One test case per IPU; an IPU over budget is a failure with the details.

    The file holds to the strict Ant JUnit schema as well as to the lenient readers (Jenkins,
    GitLab): the suite carries ``timestamp``, ``hostname`` and ``time``, an empty ``properties``
    and suite-level ``system-out``/``system-err``; a test case holds at most its failure, so the
    per-IPU lines go to the suite's ``system-out``. Times are 0: the figures are computed, no test
    runs. Names go in with their non-printable characters escaped: XML forbids most control
    characters outright, and a CI page shows the rest raw.
    """
    failures = sum(not i.fits for i in result.ipus)
    suite = ET.Element("testsuite", name="popliner memory budget", timestamp=_timestamp(),
                       hostname=_hostname(), tests=str(len(result.ipus)), failures=str(failures), errors="0",
                       time="0")
    ET.SubElement(suite, "properties")
    for ipu in result.ipus:
        case = ET.SubElement(suite, "testcase", classname=f"popliner.check.{shown(_stem(result.config_path))}",
                             name=f"ipu{ipu.ipu}_fits", time="0")
        if not ipu.fits:
            failure = ET.SubElement(case, "failure", message=f"IPU {ipu.ipu} needs {ipu.worst_tile_bytes} bytes "
                                                             f"on tile {ipu.worst_tile}; budget {ipu.budget}",
                                    type="over budget")
            failure.text = overflow_text(ipu)
    ET.SubElement(suite, "system-out").text = "\n".join(
        f"IPU {ipu.ipu}: layers {shown(', '.join(ipu.layers))}; worst tile {ipu.worst_tile} with "
        f"{ipu.worst_tile_bytes} bytes; headroom {ipu.headroom} bytes" for ipu in result.ipus)
    ET.SubElement(suite, "system-err")
    ET.ElementTree(suite).write(stream, encoding="utf-8", xml_declaration=True)


def _timestamp() -> str:
    """When the check ran, in UTC without a zone (the schema's form); SOURCE_DATE_EPOCH fixes it."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    when = datetime.fromtimestamp(int(epoch) if epoch.isdigit() else time.time(), tz=timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S")


def _hostname() -> str:
    """This machine's name, without the whitespace the schema forbids there."""
    return "".join(socket.gethostname().split()) or "localhost"


def _stem(path: str) -> str:
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[0].replace(".", "_") or "config"


JUNIT = FormatWriter("junit", (".xml",), {"CheckResult": write_junit}, binary=True)

"""The CI check as JUnit XML: one test case per IPU, an IPU over budget a failure."""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime, timezone
from typing import IO
from xml.etree import ElementTree as ET

from popliner.baseline import IpuDelta
from popliner.checkreport import CheckReport
from popliner.textsafe import shown
from popliner.writers.check_delta import growth_words, limit_words
from popliner.writers.check_report import overflow_text
from popliner.writers.shares import percent, signed_bytes
from popliner.writers.writer import Functions

__all__ = ["JUNIT", "write_junit"]


def write_junit(report: CheckReport, stream: IO[bytes]) -> None:
    """One test case per IPU; an IPU over budget, or grown beyond ``--max-growth``, is a failure with the details.

    The file holds to the strict Ant JUnit schema as well as to the lenient readers (Jenkins,
    GitLab): the suite carries ``timestamp``, ``hostname`` and ``time``, an empty ``properties``
    and suite-level ``system-out``/``system-err``; a test case holds at most its failure, so the
    per-IPU lines go to the suite's ``system-out``. Times are 0: the figures are computed, no test
    runs. Names go in with their non-printable characters escaped: XML forbids most control
    characters outright, and a CI page shows the rest raw. With a baseline, every message says
    how much the IPU grew since.
    """
    result, c = report.result, report.comparison
    deltas = {d.ipu: d for d in c.ipus} if c is not None else {}
    failures = sum(not i.fits or (i.ipu in deltas and deltas[i.ipu].beyond_limit) for i in result.ipus)
    suite = ET.Element("testsuite", name="popliner memory budget", timestamp=_timestamp(),
                       hostname=_hostname(), tests=str(len(result.ipus)), failures=str(failures), errors="0",
                       time="0")
    ET.SubElement(suite, "properties")
    for ipu in result.ipus:
        case = ET.SubElement(suite, "testcase", classname=f"popliner.check.{shown(_stem(result.config_path))}",
                             name=f"ipu{ipu.ipu}_fits", time="0")
        d = deltas.get(ipu.ipu)
        since = f"; {growth_words(d)} since the baseline" if d is not None else ""
        if not ipu.fits:
            failure = ET.SubElement(case, "failure", message=f"IPU {ipu.ipu} needs {ipu.worst_tile_bytes} bytes "
                                                             f"on tile {ipu.worst_tile}; budget {ipu.budget}{since}",
                                    type="over budget")
            failure.text = overflow_text(ipu)
        elif d is not None and c is not None and d.beyond_limit:
            failure = ET.SubElement(case, "failure", message=f"IPU {ipu.ipu} {growth_words(d)} since the baseline "
                                                             f"{shown(c.baseline_path)}, more than {limit_words(d, c)}",
                                    type="growth over limit")
            failure.text = _delta_text(d)
    ET.SubElement(suite, "system-out").text = "\n".join(
        f"IPU {ipu.ipu}: layers {shown(', '.join(ipu.layers))}; worst tile {ipu.worst_tile} with "
        f"{ipu.worst_tile_bytes} bytes; headroom {ipu.headroom} bytes"
        + (f"; {growth_words(deltas[ipu.ipu])} since the baseline" if ipu.ipu in deltas else "")
        for ipu in result.ipus)
    ET.SubElement(suite, "system-err")
    ET.ElementTree(suite).write(stream, encoding="utf-8", xml_declaration=True)


def _delta_text(d: IpuDelta) -> str:
    lines = [f"worst tile {d.baseline_worst_tile_bytes} -> {d.worst_tile_bytes} bytes "
             f"({signed_bytes(d.change)}, {percent(d.change_share, 2, signed=True)}); headroom "
             f"{d.baseline_headroom} -> {d.headroom}"]
    lines += [f"layer {shown(n.name)}: {n.baseline_bytes} -> {n.bytes}" for n in d.layer_changes]
    lines += [f"variable {shown(n.name)}: {n.baseline_bytes} -> {n.bytes}" for n in d.variable_changes]
    return "\n".join(lines)


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


JUNIT: Functions = {"CheckReport": write_junit}

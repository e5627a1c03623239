"""The exporter never writes, silently, a profile whose programs have no debug contexts (issue 22, point 10)."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest

from popliner.errors import ExportError
from popliner.export import export_report
from popliner.profile.loader import load_profile
from tests.pva_double import make_pva

DATA = Path(__file__).resolve().parent / "data"
#: Control-flow program types, which no operation owns.
CONTROL = {"Sequence", "Repeat", "Call", "If", "Switch", "Sync"}


def _without_contexts(doc: dict[str, Any], keep: int) -> dict[str, Any]:
    """``doc`` with the debug context of all but the first ``keep`` programs that have one removed."""
    out = copy.deepcopy(doc)
    kept = 0
    for p in out["programs"]:
        if p.get("debugContext") is not None:
            if kept < keep:
                kept += 1
            else:
                p.pop("debugContext")
    return out


@pytest.mark.parametrize("program_contexts", [True, False])
def test_no_program_context_is_refused_and_nothing_written(small_doc, inputs, tmp_path, program_contexts):
    doc = _without_contexts(small_doc, 0)
    out = tmp_path / "out.json"
    with pytest.raises(ExportError) as info:
        export_report(*inputs, out, pva_module=make_pva(doc, program_contexts=program_contexts))
    message = str(info.value)
    leaves = sum(1 for p in doc["programs"] if not p.get("children") and p["type"] not in CONTROL)
    assert f"{leaves} of {leaves} leaf programs have no debug context" in message
    # The message says what libpva gave: an empty attribute, or none (and no operation listing them).
    assert ("`debugContext` is empty on every program" if program_contexts
            else "carry no `debugContext` attribute and pva.OperationAnalysis lists them under no operation") in message
    assert "group nothing" in message and "--allow-missing-contexts" in message and "\n" not in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["debug.cbor", "profile.pop"]  # no output, no temp file


def test_most_programs_without_context_is_refused(small_doc, inputs, tmp_path):
    doc = _without_contexts(small_doc, 2)  # 2 of 12 programs keep one; of the 6 leaves (no Sync), 2 keep one
    with pytest.raises(ExportError, match="4 of 6 leaf programs have no debug context"):
        export_report(*inputs, tmp_path / "out.json", pva_module=make_pva(doc))


def test_structural_programs_without_context_are_not_counted(small_doc, inputs, tmp_path):
    """Sequences, Repeats and Syncs belong to no operation: only the leaves an operation can own count.

    The old check counted every program, so a report whose leaves all have
    contexts but whose (many) structural programs have none was refused.
    """
    doc = copy.deepcopy(small_doc)
    leaves = [p for p in doc["programs"] if not p.get("children") and p["type"] not in CONTROL]
    structural = [p for p in doc["programs"] if p not in leaves]
    for p in structural:
        p.pop("debugContext", None)
    for p in leaves:
        p.setdefault("debugContext", 40)
    # Pad with context-less Syncs and Sequences until they are the majority of all programs.
    top = max(p["id"] for p in doc["programs"]) + 1
    for k in range(2 * len(leaves)):
        doc["programs"].append({"id": top + k, "type": "Sync" if k % 2 else "Sequence"})
    assert all(p.get("debugContext") is not None for p in leaves)
    assert 2 * len(leaves) < len(doc["programs"])
    export_report(*inputs, tmp_path / "out.json", pva_module=make_pva(doc))
    assert load_profile(tmp_path / "out.json").programs.count == len(doc["programs"])


def test_allow_flag_writes_it_with_a_warning(small_doc, inputs, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    doc = _without_contexts(small_doc, 0)
    out = tmp_path / "out.json"
    export_report(*inputs, out, pva_module=make_pva(doc), allow_missing_contexts=True)
    assert any("exported anyway (--allow-missing-contexts)" in r.getMessage() for r in caplog.records)
    profile = load_profile(out)
    assert int((profile.programs.context >= 0).sum()) == 0


def test_a_real_share_of_programs_without_context_is_exported(small_doc, inputs, tmp_path):
    # 7 of 12 programs carry one in this document (the control programs do not): fine.
    assert sum(p.get("debugContext") is not None for p in small_doc["programs"]) == 7
    export_report(*inputs, tmp_path / "out.json", pva_module=make_pva(small_doc))
    assert (tmp_path / "out.json").is_file()

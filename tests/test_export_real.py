"""``popliner export`` on what real libpva returns (issue 34) and on what the loader would refuse (issue 39.10).

The double (tests/pva_double.py) copies the types and shapes public code
shows for real libpva: ``replacedDebugContext`` a list (empty when the
operation replaced nothing), ``parents`` a list (empty for a root), ``layer``
JSON text, ``target.architecture`` an enum, ``OperationAnalysis`` always
there. Where no public code settles a shape, each test runs on every one.
"""

from __future__ import annotations

import copy
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from popliner.cli import cli
from popliner.errors import ExportError
from popliner.export import export_report
from popliner.profile.loader import load_profile
from tests.paths import FIXTURES
from tests.pva_double import BoundVector, make_pva

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

#: Every shape the double offers where public code does not settle it.
SHAPES: list[dict[str, Any]] = [
    {},
    {"program_contexts": False},
    {"layer_shape": "text", "sequence": "vector"},
    {"program_contexts": False, "sequence": "vector", "architecture": "absent"},
]


def contexts_of(path: Path) -> dict[int, int | None]:
    return {p["id"]: p.get("debugContext") for p in json.loads(path.read_text())["programs"]}


def nothing_written(tmp_path: Path) -> bool:
    return sorted(p.name for p in tmp_path.iterdir()) == ["debug.cbor", "profile.pop"]


# -- 34.1/34.2: replacedDebugContext is a list ------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_empty_replaced_lists_leave_every_program_its_context(small_doc, inputs, tmp_path, shape):
    """libpva gives ``[]`` for operations that replaced nothing: the programs keep their contexts.

    The old exporter took ``[]`` for "set", in both places, and refused every
    such report ("N of N programs have no debug context").
    """
    out = tmp_path / "out.json"
    export_report(*inputs, out, pva_module=make_pva(small_doc, **shape))
    assert contexts_of(out) == {p["id"]: p.get("debugContext") for p in small_doc["programs"]}


@pytest.mark.parametrize("program_contexts", [True, False])
def test_one_replaced_context_names_the_original_operation(small_doc, inputs, tmp_path, program_contexts):
    # Programs of context 21 (a poplar context under popart 20) were made by a transform that replaced 22's op.
    out = tmp_path / "out.json"
    export_report(*inputs, out, pva_module=make_pva(small_doc, program_contexts=program_contexts,
                                                    replaced={21: [22]}))
    got = contexts_of(out)
    assert got[5] == 22  # program 5 had context 21
    assert got[9] == 22 and got[2] == 11  # others unchanged


@pytest.mark.parametrize("sequence", ["list", "vector"])
def test_an_outlined_call_that_replaced_several_ops_keeps_its_own_context(small_doc, inputs, tmp_path, sequence):
    """PopART's outliner records one id per replaced op on a Call: no one of them owns the call's programs."""
    out = tmp_path / "out.json"
    export_report(*inputs, out, pva_module=make_pva(small_doc, replaced={21: [11, 22]}, sequence=sequence))
    assert contexts_of(out)[5] == 21


def test_a_context_that_is_no_context_nor_a_list_is_refused(small_doc, inputs, tmp_path):
    pva = make_pva(small_doc)
    program = next(p for p in pva.report.compilation.programs if p._id == 2)
    program.debugContext = 11  # a bare number: the old code wrote context 0 for it without a word
    with pytest.raises(ExportError, match=r"program 2's debugContext has type int, neither a debug context nor a list"):
        export_report(*inputs, tmp_path / "out.json", pva_module=pva)
    assert nothing_written(tmp_path)


def test_a_sequence_type_that_is_not_a_list_is_unwrapped(small_doc, inputs, tmp_path):
    pva = make_pva(small_doc)
    program = next(p for p in pva.report.compilation.programs if p._id == 2)
    program.debugContext = BoundVector([program.debugContext])
    export_report(*inputs, tmp_path / "out.json", pva_module=pva)
    assert contexts_of(tmp_path / "out.json")[2] == 11


# -- 34.2: roots are legal; the flat check tests a missing `parents` -------------------------


@pytest.mark.parametrize("name", ["tiny-training.json", "tiny.json"])
@pytest.mark.parametrize("program_contexts", [True, False])
def test_roots_are_legal(inputs, tmp_path, name, program_contexts):
    """tiny-training.json's 18 contexts are all roots (as TensorFlow's xla_op contexts are): it exports."""
    doc = json.loads((FIXTURES / name).read_text())
    out = tmp_path / "out.json"
    export_report(*inputs, out, pva_module=make_pva(doc, program_contexts=program_contexts))
    assert load_profile(out).contexts.count == len(doc["debugContexts"])


# -- 34.2: the architecture enum ----------------------------------------------------------------


@pytest.mark.parametrize(("architecture", "expected"), [("enum", "ipu2"), ("absent", None)])
def test_architecture_enum_becomes_arch(small_doc, inputs, tmp_path, architecture, expected):
    small_doc["target"]["arch"] = "ipu2"
    out = tmp_path / "out.json"
    export_report(*inputs, out, pva_module=make_pva(small_doc, architecture=architecture))
    assert json.loads(out.read_text())["target"].get("arch") == expected
    assert load_profile(out).target.arch == expected


# -- 39.10: what the loader would refuse is refused before anything is written ------------------


def _corrupt_contexts_cycle(pva: Any) -> None:
    ctx = next(p for p in pva.report.compilation.programs if p._id == 2).debugContext  # 11 -> 10 -> 1
    root = ctx.parents[0].parents[0]
    root.parents = [ctx]


def _corrupt_program_cycle(pva: Any) -> None:
    by_id = {p._id: p for p in pva.report.compilation.programs}
    by_id[5].children = [by_id[4]]  # 4 -> 5 -> 4


def _corrupt_var_bytes(value: int) -> Any:
    def corrupt(pva: Any) -> None:
        pva.report.compilation.loweredVariables.allBriefVars[3].bytes = value
    return corrupt


def _corrupt_target(**fields: Any) -> Any:
    def corrupt(pva: Any) -> None:
        for key, value in fields.items():
            setattr(pva.report.compilation.target, key, value)
    return corrupt


def _corrupt_folded_ids(pva: Any) -> None:
    ctx = next(p for p in pva.report.compilation.programs if p._id == 9).debugContext  # 22, a leaf context
    ctx.id = 11 + 2**63  # folds onto context 11, which program 2 carries


def _corrupt_control_code(pva: Any) -> None:
    next(p for p in pva.report.compilation.programs if p._id == 2).controlCodeByTile[1] = -8


def _corrupt_var_id(pva: Any) -> None:
    pva.report.compilation.loweredVariables.allBriefVars[2].id = -7


def _corrupt_program_id(pva: Any) -> None:
    next(p for p in pva.report.compilation.programs if p._id == 9)._id = 2**64


CORRUPTIONS = {
    "negative variable id": (_corrupt_var_id, "has id -7, outside 0 to"),
    "program id beyond 64 bits": (_corrupt_program_id, "has id 18446744073709551616, outside 0 to"),
    "context cycle": (_corrupt_contexts_cycle, r"lead back to it \(a cycle"),
    "program cycle": (_corrupt_program_cycle, "is its own ancestor"),
    "negative variable size": (_corrupt_var_bytes(-4), "lowered variable .*'s bytes is -4"),
    "2**62 variable size": (_corrupt_var_bytes(2**62), "bytes is 4,611,686,018,427,387,904"),
    "tilesPerIpu 65,537": (_corrupt_target(tilesPerIpu=65_537), "65,537 tiles per IPU"),
    "tilesPerIpu 10**8": (_corrupt_target(tilesPerIpu=10**8, numTiles=10**8), "100,000,000 tiles per IPU"),
    "infinite clock": (_corrupt_target(clockFrequency=float("inf")), "clockFrequency inf"),
    "NaN clock": (_corrupt_target(clockFrequency=float("nan")), "clockFrequency nan"),
    "bytesPerTile 2**62": (_corrupt_target(bytesPerTile=2**62), "bytesPerTile is"),
    "ids folding to one": (_corrupt_folded_ids, "both become 11"),
    "negative control code": (_corrupt_control_code, "controlCodeByTile at tile 1 is -8"),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_what_the_loader_refuses_is_refused_before_writing(small_doc, inputs, tmp_path, case):
    corrupt, message = CORRUPTIONS[case]
    pva = make_pva(small_doc)
    corrupt(pva)
    t0 = time.monotonic()
    with pytest.raises(ExportError, match=message) as info:
        export_report(*inputs, tmp_path / "out.json", pva_module=pva)
    assert time.monotonic() - t0 < 5
    assert "\n" not in str(info.value) and str(info.value).startswith(str(inputs[0]))
    assert nothing_written(tmp_path)


@pytest.mark.slow  # a long case (about 7 s): a process per corruption
def test_every_corruption_is_one_line_and_exit_2_from_the_cli(small_doc, inputs, tmp_path):
    """A real process, as a user runs it; the lines docs/bad-inputs.md shows are these very lines."""
    documented = (ROOT / "docs" / "bad-inputs.md").read_text()
    shown = 0
    for case in CORRUPTIONS:
        code = (f"import json, sys; sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'tests')!r}]\n"
                "from pva_double import make_pva\n"
                f"import {__name__.rsplit('.', 1)[-1]} as t\n"
                f"pva = make_pva(json.load(open({str(DATA / 'export_small.json')!r})))\n"
                f"t.CORRUPTIONS[{case!r}][0](pva)\n"
                "sys.modules['pva'] = pva\n"
                "from popliner.cli import main\n"
                "sys.argv = ['popliner', 'export', 'profile.pop', 'debug.cbor', '-o', 'o.json']\n"
                "main()\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                           cwd=str(tmp_path))
        assert r.returncode == 2, (case, r.stderr)
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("popliner: error: profile.pop: "), (case, r.stderr)
        assert "Traceback" not in r.stderr
        assert nothing_written(tmp_path), case
        shown += f"`{r.stderr.strip()}`" in documented
    assert shown >= 6  # one documented example of each kind


def test_huge_tile_count_is_refused_in_bounded_memory(small_doc, inputs, tmp_path):
    """tilesPerIpu 10**8 used to allocate per-tile arrays until MemoryError (3.1 GB)."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    pva = make_pva(small_doc)
    _corrupt_target(tilesPerIpu=10**8, numTiles=10**8)(pva)
    with pytest.raises(ExportError, match="beyond any IPU"):
        export_report(*inputs, tmp_path / "out.json", pva_module=pva)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB: under 100 MB more


def test_an_oversized_integer_in_one_contexts_json_keeps_the_export(small_doc, inputs, tmp_path):
    """One context's free-form JSON with a 2**70 integer (and a NaN) used to abort the whole export."""
    pva = make_pva(small_doc)
    ctx = next(p for p in pva.report.compilation.programs if p._id == 2).debugContext
    text = json.loads(ctx.json)
    text.update(big=2**70, small=-(2**64), nan=float("nan"), nested={"deep": [2**65]})
    ctx.json = json.dumps(text)
    out = tmp_path / "out.json"
    export_report(*inputs, out, pva_module=pva)
    profile = load_profile(out)
    data = profile.contexts.data[int(list(profile.contexts.ids).index(11))]
    assert data is not None
    assert data["big"] == str(2**70) and data["small"] == str(-(2**64)) and data["nested"] == {"deep": [str(2**65)]}
    assert data["nan"] is None
    assert profile.contexts.count == len(small_doc["debugContexts"])


def test_too_deep_json_in_one_context_drops_only_its_data(small_doc, inputs, tmp_path):
    pva = make_pva(small_doc)
    ctx = next(p for p in pva.report.compilation.programs if p._id == 2).debugContext
    ctx.json = '{"name": "x", "a": ' + "[" * 5000 + "]" * 5000 + "}"
    out = tmp_path / "out.json"
    export_report(*inputs, out, pva_module=pva)
    profile = load_profile(out)
    assert profile.contexts.count == len(small_doc["debugContexts"])


def test_the_output_is_bounded_like_the_loader(small_doc, inputs, tmp_path, monkeypatch):
    monkeypatch.setenv("POPLINER_MAX_PROFILE_BYTES", "2000")
    with pytest.raises(ExportError, match="would pass 2,000 bytes.*POPLINER_MAX_PROFILE_BYTES"):
        export_report(*inputs, tmp_path / "out.json", pva_module=make_pva(small_doc))
    assert nothing_written(tmp_path)


def test_tiles_times_vertex_types_is_bounded_like_the_loader(small_doc, inputs, tmp_path, monkeypatch):
    monkeypatch.setenv("POPLINER_MAX_TILE_CELLS", "20")  # 8 tiles x 3 vertex types = 24
    with pytest.raises(ExportError, match="8 tiles x 3 vertex types = 24 per-tile cells.*POPLINER_MAX_TILE_CELLS"):
        export_report(*inputs, tmp_path / "out.json", pva_module=make_pva(small_doc))
    assert nothing_written(tmp_path)


# -- 39.12: the exporter and the detector share one rule -----------------------------------------


@pytest.mark.parametrize("layers", [("xla_op", "popxl"), ("popart", "xla_op"), ("tensorflow", "popart"),
                                    ("onnx", "poptorch")])
def test_exporter_and_detector_name_the_same_framework(small_doc, inputs, tmp_path, layers):
    from popliner.framework import detect_framework

    doc = copy.deepcopy(small_doc)
    for c in doc["debugContexts"]:
        if c["layer"] in ("popart", "onnx"):
            c["layer"] = layers[c["id"] % 2]
    out = tmp_path / "out.json"
    export_report(*inputs, out, pva_module=make_pva(doc))
    exported = load_profile(out)
    by_source = detect_framework(exported)
    assert by_source.origin == "source"
    plain = copy.deepcopy(json.loads(out.read_text()))
    plain["source"].pop("framework")
    (tmp_path / "plain.json").write_text(json.dumps(plain))
    by_contexts = detect_framework(load_profile(tmp_path / "plain.json"))
    assert by_contexts.origin == "contexts"
    assert by_source.name == by_contexts.name


def test_framework_rule_is_in_one_place() -> None:
    exporter = (ROOT / "popliner" / "export" / "exporter.py").read_text()
    assert "framework_of_layers" in exporter and "xla_op" not in exporter


def test_cli_still_exports(small_doc, inputs, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pva", make_pva(small_doc))
    r = CliRunner().invoke(cli, ["-q", "export", *map(str, inputs), "-o", str(tmp_path / "o.json")])
    assert r.exit_code == 0, r.stderr


# -- Program.vars: no public code reads it; the original PopLiner read Operation.vars -------------


@pytest.mark.parametrize("program_contexts", [True, False])
def test_variables_come_from_the_operations_when_programs_have_none(small_doc, inputs, tmp_path, program_contexts):
    from tests.test_export import memory_figures

    original = tmp_path / "original.json"
    original.write_text(json.dumps(small_doc))
    out = tmp_path / "out.json"
    export_report(*inputs, out, pva_module=make_pva(small_doc, program_vars=False,
                                                    program_contexts=program_contexts))
    assert memory_figures(load_profile(out)) == memory_figures(load_profile(original))
    exported = json.loads(out.read_text())
    assert sum(len(p.get("vars", [])) for p in exported["programs"]) > 0


def test_repeat_programs_without_a_count_attribute_count_once(small_doc, inputs, tmp_path):
    """No public code names a Repeat's count: without one the program is written without, and loads as 1."""
    repeats = {p["id"]: p.get("repeatCount", 1) for p in small_doc["programs"] if p["type"] == "Repeat"}
    assert repeats and any(n != 1 for n in repeats.values())
    for shape, expected in ((True, repeats), (False, dict.fromkeys(repeats, 1))):
        out = tmp_path / f"out{shape}.json"
        export_report(*inputs, out, pva_module=make_pva(small_doc, repeat_count=shape))
        profile = load_profile(out)
        ids = profile.programs.ids.tolist()
        assert {pid: int(profile.programs.repeat_count[ids.index(pid)]) for pid in repeats} == expected

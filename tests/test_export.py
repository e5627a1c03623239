"""``popliner export``: libpva report -> format-v1, tested against a libpva DOUBLE.

There is no Poplar SDK here. tests/pva_double.py builds a stand-in for the
``pva`` module from a format-v1 document; exporting it must give back an
equivalent profile. Equivalence is checked on loaded Profiles, keyed by the
document's ids (vertex types by name and size, liveness classes by the set of
steps at which they are live), with every TileVector compared densely.
"""

from __future__ import annotations

import copy
import gzip
import json
import logging
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from click.testing import CliRunner

from popliner.analysis import analyse_profile
from popliner.cli import cli
from popliner.errors import ExportError, OutputExistsError
from popliner.export import export_hint, export_report, is_poplar_report
from popliner.export.exporter import CHUNK
from popliner.export.pvaread import encode_tilevector, program_type, read_context
from popliner.profile.loader import load_profile
from popliner.profile.model import PROGRAM_TYPES, Profile

try:  # tests/ is a plain folder (rootdir on sys.path under `python -m pytest`)...
    from tests.pva_double import IPU_ID_OFFSET, dense, make_pva
except ImportError:  # ...or the test's own folder is (plain `pytest`)
    from pva_double import IPU_ID_OFFSET, dense, make_pva  # type: ignore[no-redef]

DATA = Path(__file__).parent / "data"


# -- helpers --------------------------------------------------------------------


@pytest.fixture
def popliner_log(caplog: pytest.LogCaptureFixture) -> Any:
    """caplog that also sees records when the CLI has made the "popliner" logger non-propagating."""
    logger = logging.getLogger("popliner")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="popliner")
    yield caplog
    logger.removeHandler(caplog.handler)


def write_doc(doc: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def live_sets(p: Profile) -> list[frozenset[int]]:
    out = []
    for c in range(p.num_classes):
        steps: set[int] = set()
        for k in range(int(p.class_ptr[c]), int(p.class_ptr[c + 1])):
            steps.update(range(int(p.iv_start[k]), int(p.iv_end[k])))
        out.append(frozenset(steps))
    return out


def canonical(p: Profile) -> dict[str, Any]:
    """Everything popliner reads from a profile, keyed by document ids, TileVectors dense."""
    tiles = p.tiles
    progs, vt, ctx = p.programs, p.vertex_types, p.contexts
    vt_key = [(vt.names[i], int(vt.size[i])) for i in range(len(vt.names))]
    live = live_sets(p)
    var_ids = p.variables.ids.tolist()

    def row(table: Any, r: int) -> tuple[int, ...]:
        return tuple(table.dense(r, tiles).tolist())

    def vertices(r: int) -> dict[tuple[str, int], tuple[int, ...]]:
        runs = np.arange(progs.vertices.ptr[r], progs.vertices.ptr[r + 1])
        keys = progs.vertices.key[runs]
        return {vt_key[k]: tuple(progs.vertices.sum_runs(runs[keys == k], tiles).tolist()) for k in set(keys.tolist())}

    programs = {
        int(progs.ids[i]): {
            "type": PROGRAM_TYPES[int(progs.type[i])],
            "name": progs.names[i],
            "children": tuple(int(progs.ids[c]) for c in progs.children(i)),
            "context": int(ctx.ids[progs.context[i]]) if progs.context[i] >= 0 else None,
            "control": row(progs.control, i),
            "exchange": row(progs.exchange, i),
            "cycles": row(progs.cycles, i),
            "repeat": int(progs.repeat_count[i]),
            "vars": tuple(sorted(var_ids[v] for v in progs.var_idx[progs.var_ptr[i]:progs.var_ptr[i + 1]])),
            "vertices": vertices(i),
        }
        for i in range(progs.count)
    }
    contexts = {
        int(ctx.ids[i]): (
            int(ctx.ids[ctx.parent[i]]) if ctx.parent[i] >= 0 else None, ctx.layer[i], ctx.name[i], ctx.data[i] or {}
        )
        for i in range(ctx.count)
    }
    v = p.variables
    target = asdict(p.target)
    target.pop("arch")  # compared by the tests of target.architecture (SDKs before 3.0 have none)
    return {
        "target": target,
        "vertexTypes": {vt_key[i]: row(vt.code, i) for i in range(len(vt_key))},
        "programs": programs,
        "controlPrograms": [int(progs.ids[i]) for i in p.control_programs],
        "steps": [int(progs.ids[i]) for i in p.steps],
        "variables": {
            int(v.ids[i]): (int(v.bytes[i]), int(v.tile[i]), live[int(v.klass[i])]) for i in range(v.count)
        },
        "classes": {live[int(k)] for k in v.klass},
        "contexts": contexts,
        "tileMemory": {k: tuple(a.tolist()) for k, a in (p.tile_memory or {}).items()},
    }


def memory_figures(p: Profile) -> dict[str, Any]:
    """popliner's own figures: operations, layers, per-tile memory of each layer and of everything."""
    a = analyse_profile(p)
    out: dict[str, Any] = {
        "operations": list(zip(a.ops.names, a.ops.first_step.tolist(), a.ops.last_step.tolist())),
        "layers": a.layer_names,
        "all operations": a.model.stage(np.arange(a.ops.count)).per_tile.tolist(),
    }
    for name in a.layer_names:
        out[f"layer {name}"] = a.stage_memory([name]).per_tile.tolist()
    return out


def assert_same_profile(original: Profile, exported: Profile) -> None:
    a, b = canonical(original), canonical(exported)
    for key in a:  # one section at a time gives a readable failure
        assert b[key] == a[key], key
    assert memory_figures(exported) == memory_figures(original)


def export_double(doc: dict[str, Any], inputs: tuple[Path, Path], out: Path, chunk: int = CHUNK,
                  **double: Any) -> Profile:
    export_report(*inputs, out, pva_module=make_pva(doc, **double), chunk=chunk)
    return load_profile(out)


# -- round trip -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "double"),
    [
        ("out.json", {}),
        ("out.json.gz", {"control_programs": True}),
        ("out.json", {"tile_vertex_sizes": False}),
        ("out.json.gz", {"program_contexts": False}),
    ],
)
def test_round_trip_small(small_doc: dict[str, Any], inputs: tuple[Path, Path], tmp_path: Path,
                          name: str, double: dict[str, Any]) -> None:
    original = load_profile(write_doc(small_doc, tmp_path / "original.json"))
    exported = export_double(small_doc, inputs, tmp_path / name, **double)
    assert_same_profile(original, exported)
    assert exported.source["sdkVersion"] == "0.0.0 (pva test double)"
    assert exported.source["framework"] == "popart"
    assert "note" not in exported.source


def test_gz_output_is_gzip_and_plain_is_not(small_doc: dict[str, Any], inputs: tuple[Path, Path],
                                            tmp_path: Path) -> None:
    export_report(*inputs, tmp_path / "a.json.gz", pva_module=make_pva(small_doc))
    export_report(*inputs, tmp_path / "a.json", pva_module=make_pva(small_doc))
    assert (tmp_path / "a.json.gz").read_bytes()[:2] == b"\x1f\x8b"
    doc = json.loads((tmp_path / "a.json").read_bytes())
    assert json.loads(gzip.decompress((tmp_path / "a.json.gz").read_bytes()))["programs"] == doc["programs"]
    assert doc["format"] == "popliner-profile" and doc["version"] == 1


def random_doc(seed: int, tiles: int = 16, num_programs: int = 60, num_vars: int = 400) -> dict[str, Any]:
    """A larger valid document: a tree of Sequences over random leaves."""
    rng = np.random.default_rng(seed)

    def tv() -> Any:
        form = rng.integers(4)
        vals = (rng.integers(0, 3, tiles) * rng.integers(1, 500, tiles)).tolist()
        if form == 0:
            return vals
        if form == 1:
            return {"sparse": [[t, v] for t, v in enumerate(vals) if v]}
        if form == 2:
            return {"runs": [[0, tiles // 2, int(rng.integers(1, 99))]]}
        return {"runs": []}

    num_steps = 50
    classes = []
    for _ in range(40):
        a, b = sorted(rng.integers(0, num_steps + 1, 2).tolist())
        classes.append([[a, b]] if rng.random() < 0.8 else [[0, num_steps]])
    var_ids = rng.choice(10**6, num_vars, replace=False).tolist()
    vtypes = [{"name": f"v{i}", "size": int(rng.integers(0, 64)), "codeBytes": tv()} for i in range(6)]
    leaves = []
    leaf_types = ["OnTileExecute", "DoExchange", "StreamCopyMid", "Copy", "GlobalExchange"]
    for pid in range(1, num_programs):
        ptype = leaf_types[pid % len(leaf_types)]
        p: dict[str, Any] = {"id": pid * 7, "type": ptype, "name": f"Layer{pid % 5}/op{pid}",
                             "controlCode": tv(), "debugContext": int(rng.integers(0, 20)),
                             "vars": sorted(rng.choice(var_ids, 5, replace=False).tolist())}
        if ptype == "OnTileExecute":
            p["vertices"] = [[int(k), tv()] for k in rng.choice(len(vtypes), 2, replace=False)]
            p["cycles"] = tv()
        if ptype == "DoExchange":
            p["exchangeCode"] = tv()
        leaves.append(p)
    root = {"id": 0, "type": "Sequence", "name": "main", "children": [p["id"] for p in leaves]}
    contexts = [{"id": i, "parent": (i - 1 if i % 4 else None), "layer": ["popart", "poplibs"][i % 2],
                 "name": f"c{i}", "data": {"opName": f"Layer{i % 5}/x"}} for i in range(20)]
    return {
        "format": "popliner-profile", "version": 1,
        "target": {"tilesPerIpu": tiles, "numTiles": tiles, "numIpus": 1, "bytesPerTile": 638976,
                   "clockFrequency": 1.85e9},
        "vertexTypes": vtypes,
        "programs": [root, *leaves],
        "controlPrograms": [0],
        "steps": [leaves[int(i)]["id"] for i in rng.integers(0, len(leaves), num_steps)],
        "variables": {"id": var_ids, "bytes": rng.integers(0, 10**5, num_vars).tolist(),
                      "tile": rng.integers(0, tiles, num_vars).tolist(),
                      "class": rng.integers(0, len(classes), num_vars).tolist()},
        "livenessClasses": classes,
        "debugContexts": contexts,
    }


@pytest.mark.parametrize("seed", [1, 2])
def test_round_trip_in_small_chunks(seed: int, inputs: tuple[Path, Path], tmp_path: Path) -> None:
    """Chunked spooling/writing gives the same profile as one big chunk."""
    doc = random_doc(seed)
    original = load_profile(write_doc(doc, tmp_path / "original.json"))
    exported = export_double(doc, inputs, tmp_path / "out.json.gz", chunk=7)
    assert_same_profile(original, exported)
    assert exported.tile_memory is None  # the document had none, so the double has none


def test_programs_missing_from_the_list_are_found_through_the_tree(
        small_doc: dict[str, Any], inputs: tuple[Path, Path], tmp_path: Path) -> None:
    pva = make_pva(small_doc)
    programs = pva.report.compilation.programs
    pva.report.compilation.programs = [p for p in programs if p._id not in (4, 9)]
    export_report(*inputs, tmp_path / "out.json", pva_module=pva)
    original = load_profile(write_doc(small_doc, tmp_path / "original.json"))
    assert_same_profile(original, load_profile(tmp_path / "out.json"))


def test_duplicate_variable_ids_keep_the_first(small_doc: dict[str, Any], inputs: tuple[Path, Path],
                                               tmp_path: Path, popliner_log: pytest.LogCaptureFixture) -> None:
    pva = make_pva(small_doc)
    brief = pva.report.compilation.loweredVariables.allBriefVars
    brief.append(copy.copy(brief[0]))
    export_report(*inputs, tmp_path / "out.json", pva_module=pva)
    loaded = load_profile(tmp_path / "out.json")
    assert loaded.variables.count == len(small_doc["variables"]["id"])
    assert "more than once" in popliner_log.text


# -- several IPUs / replicas ---------------------------------------------------------


def test_multi_ipu_report_exports_ipu0_and_warns(small_doc: dict[str, Any], inputs: tuple[Path, Path],
                                                  tmp_path: Path, popliner_log: pytest.LogCaptureFixture) -> None:
    summary = export_report(*inputs, tmp_path / "out.json", pva_module=make_pva(small_doc, ipus=2))
    warnings = [r.getMessage() for r in popliner_log.records if r.levelno == logging.WARNING]
    assert any("first replica's first IPU" in w for w in warnings)
    assert summary.dropped_variables == len(small_doc["variables"]["id"])
    exported = load_profile(tmp_path / "out.json")
    assert exported.target.num_tiles == 16 and exported.target.num_ipus == 2 and exported.tiles == 8
    assert "tiles 0 to 7" in exported.source["note"]
    assert not (exported.variables.ids >= IPU_ID_OFFSET).any()
    expected_doc = copy.deepcopy(small_doc)
    expected_doc["target"].update(numTiles=16, numIpus=2)
    expected = load_profile(write_doc(expected_doc, tmp_path / "expected.json"))
    assert_same_profile(expected, exported)


# -- failures -------------------------------------------------------------------------


def test_without_pva_the_error_names_the_sdk(inputs: tuple[Path, Path], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pva", None)  # makes `import pva` fail even inside an SDK
    with pytest.raises(ExportError, match=r"enable\.sh.*`import pva` works") as info:
        export_report(*inputs, tmp_path / "out.json")
    assert info.value.exit_code == 2
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("exc", [RuntimeError("profile.pop: read error"), KeyboardInterrupt()])
def test_interrupted_export_leaves_no_file(small_doc: dict[str, Any], inputs: tuple[Path, Path],
                                           tmp_path: Path, exc: BaseException) -> None:
    pva = make_pva(small_doc, fail_after_vars=5, fail_with=exc)
    before = sorted(os.listdir(tmp_path))
    expected = ExportError if isinstance(exc, Exception) else KeyboardInterrupt
    with pytest.raises(expected) as info:
        export_report(*inputs, tmp_path / "out.json.gz", pva_module=pva, chunk=2)  # some output written already
    if expected is ExportError:
        assert "while reading the lowered variables" in str(info.value)
        assert "read error" in str(info.value)
    assert sorted(os.listdir(tmp_path)) == before


def test_existing_output_needs_force(small_doc: dict[str, Any], inputs: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    out.write_text("keep me")
    with pytest.raises(OutputExistsError):
        export_report(*inputs, out, pva_module=make_pva(small_doc))
    assert out.read_text() == "keep me"
    export_report(*inputs, out, force=True, pva_module=make_pva(small_doc))
    assert load_profile(out).programs.count == len(small_doc["programs"])


def test_missing_or_swapped_inputs(small_doc: dict[str, Any], inputs: tuple[Path, Path], tmp_path: Path) -> None:
    pop, cbor = inputs
    with pytest.raises(ExportError, match="no such file"):
        export_report(tmp_path / "nope.pop", cbor, tmp_path / "o.json", pva_module=make_pva(small_doc))
    with pytest.raises(ExportError, match="swapped"):
        export_report(cbor, pop, tmp_path / "o.json", pva_module=make_pva(small_doc))


def test_libpva_open_failure_is_an_export_error(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    class Broken:
        @staticmethod
        def openReport(profile: str, debug: str) -> None:
            raise RuntimeError("not a profile")

    with pytest.raises(ExportError, match="libpva cannot open the report.*not a profile"):
        export_report(*inputs, tmp_path / "o.json", pva_module=Broken)


def test_modules_import_without_pva() -> None:
    code = "import sys, popliner.export, popliner.cli.export; assert 'pva' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[1])


# -- CLI ----------------------------------------------------------------------------------


def test_cli_without_pva_exits_2_with_one_line(inputs: tuple[Path, Path], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pva", None)
    result = CliRunner().invoke(cli, ["export", *map(str, inputs), "-o", str(tmp_path / "o.json.gz")])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("popliner: error: ")
    assert "enable.sh" in lines[0]
    assert "Traceback" not in result.output


def test_cli_exports_with_the_double(small_doc: dict[str, Any], inputs: tuple[Path, Path], tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pva", make_pva(small_doc))
    out = tmp_path / "o.json.gz"
    result = CliRunner().invoke(cli, ["export", *map(str, inputs), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert f"wrote {out}" in result.stderr
    original = load_profile(write_doc(small_doc, tmp_path / "original.json"))
    assert_same_profile(original, load_profile(out))
    again = CliRunner().invoke(cli, ["export", *map(str, inputs), "-o", str(out)])
    assert again.exit_code == 2 and "--force" in again.stderr
    forced = CliRunner().invoke(cli, ["export", *map(str, inputs), "-o", str(out), "--force"])
    assert forced.exit_code == 0, forced.output


def test_cli_help_mentions_the_sdk() -> None:
    result = CliRunner().invoke(cli, ["export", "--help"])
    assert result.exit_code == 0
    assert "import pva" in result.output and "-o, --output" in result.output


# -- small pieces ---------------------------------------------------------------------------


def test_is_poplar_report_and_hint() -> None:
    assert is_poplar_report("run/profile.pop") and is_poplar_report(Path("X.POP"))
    assert not is_poplar_report("model.json.gz") and not is_poplar_report("profile.pop.json")
    hint = export_hint("run/profile.pop")
    assert "popliner export run/profile.pop run/debug.cbor -o run/profile.json.gz" in hint


@pytest.mark.parametrize(
    "values",
    [[0, 0, 0, 0], [5, 5, 5, 5], [1, 2, 3, 4], [0, 7, 0, 0], [3, 3, 0, 9]],
)
def test_encode_tilevector_round_trips(values: list[int]) -> None:
    encoded = encode_tilevector(np.array(values, dtype=np.int64))
    assert dense(encoded, len(values)) == values


def test_program_type_aliases() -> None:
    class T:
        def __init__(self, name: str) -> None:
            self.type = type("E", (), {"name": name})()

    assert program_type(T("OnEveryTileSwitch")) == "Switch"
    assert program_type(T("RepeatWhileTrue")) == "Repeat"
    assert program_type(T("SyncAns")) == "Sync"
    assert program_type(T("DoExchange")) == "DoExchange"
    assert program_type(T("SomethingNew")) == "Other"


def test_read_context_accepts_json_text_layer_and_name_attribute() -> None:
    class Ctx:
        id = 7
        layer = '"poptorch"'
        name = "block0/lstm"
        json = '{"op_name": "block0/lstm", "inputs": [1, "x"], "id": 7}'
        parents: ClassVar[list[Any]] = []

    rec = read_context(Ctx())
    assert (rec.id, rec.layer, rec.name, rec.parent) == (7, "poptorch", "block0/lstm", None)
    assert rec.data == {"op_name": "block0/lstm", "inputs": ["1", "x"]}


# -- issue 12: flat contexts, replacedDebugContext, a pva that breaks at import ---------


def test_flat_contexts_are_refused_unless_allowed(small_doc: dict[str, Any], inputs: tuple[Path, Path],
                                                 tmp_path: Path, popliner_log: Any) -> None:
    out = tmp_path / "flat.json"
    with pytest.raises(ExportError, match=r"none of the \d+ debug contexts has a `parents` attribute.*"
                                          r"--allow-flat-contexts"):
        export_report(*inputs, out, pva_module=make_pva(small_doc, flat_contexts=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["debug.cbor", "profile.pop"]  # nothing left
    export_report(*inputs, out, pva_module=make_pva(small_doc, flat_contexts=True), allow_flat_contexts=True)
    assert "`parents` attribute" in popliner_log.text and "exported anyway" in popliner_log.text
    assert all(c["parent"] is None for c in json.loads(out.read_text())["debugContexts"])


def test_cli_flat_contexts_one_line(small_doc: dict[str, Any], inputs: tuple[Path, Path], tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pva", make_pva(small_doc, flat_contexts=True))
    out = tmp_path / "o.json"
    r = CliRunner().invoke(cli, ["-q", "export", *map(str, inputs), "-o", str(out)])
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("popliner: error: ")
    assert "--allow-flat-contexts" in r.stderr
    r = CliRunner().invoke(cli, ["-q", "export", *map(str, inputs), "-o", str(out), "--allow-flat-contexts"])
    assert r.exit_code == 0 and out.exists()


def test_replaced_debug_context_wins(small_doc: dict[str, Any], inputs: tuple[Path, Path], tmp_path: Path) -> None:
    with_ctx = [p for p in small_doc["programs"] if p.get("debugContext") is not None]
    ids = sorted({p["debugContext"] for p in with_ctx})
    assert len(ids) >= 2
    first, other = ids[0], ids[1]
    doc = export_double(small_doc, inputs, tmp_path / "r.json", replaced={first: other})
    moved = {p["id"] for p in with_ctx if p["debugContext"] == first}
    exported = json.loads((tmp_path / "r.json").read_text())
    got = {p["id"]: p.get("debugContext") for p in exported["programs"]}
    assert moved and all(got[pid] == other for pid in moved)
    assert doc is not None
    # Without replacements (libpva's empty lists) the program keeps its own context.
    plain = json.loads(export_report(*inputs, tmp_path / "p.json", pva_module=make_pva(small_doc)).path.read_text())
    assert all({p["id"]: p.get("debugContext") for p in plain["programs"]}[pid] == first for pid in moved)


@pytest.mark.parametrize(("body", "needle"), [
    ("raise RuntimeError('libpva.so: undefined symbol _ZN3pva6Report')", "RuntimeError: libpva.so: undefined symbol"),
    ("def broken(:\n    pass\n", "SyntaxError"),
    ("import nonexistent_helper_module_xyz\n", "ModuleNotFoundError"),
    ("raise SystemError('bad build')", "SystemError: bad build"),
])
def test_any_exception_importing_pva_is_one_line(body: str, needle: str, inputs: tuple[Path, Path], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    mod = tmp_path / "mod"
    mod.mkdir()
    (mod / "pva.py").write_text(body)
    monkeypatch.syspath_prepend(str(mod))
    monkeypatch.delitem(sys.modules, "pva", raising=False)
    r = CliRunner().invoke(cli, ["-q", "export", *map(str, inputs), "-o", str(tmp_path / "o.json")])
    assert r.exit_code == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    line = r.stderr.strip()
    assert line.startswith("popliner: error: ") and ("import pva" in line or "Poplar SDK" in line), line
    if needle != "ModuleNotFoundError":  # a missing dependency reads as "no SDK", which it usually is
        assert needle in line, line

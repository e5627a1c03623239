"""The synthetic profile generator: determinism, format, structure, ground truth, CLI, fixtures.

Checks here decode the documents with their own small helpers (plain
Python), not with popliner's reader, so that the generator and the reader
check each other. The tests that do use the project's loader and analysis
are marked as such.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import io
import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from popliner.errors import OutputExistsError, UsageProblem
from popliner.synth import (
    SynthSpec,
    generate_document,
    preset_names,
    preset_spec,
    write_profile,
)
from popliner.synth.graph import ALWAYS_LIVE, GraphBuilder
from popliner.synth.models import build_model

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "profiles"
LAYER_RE = re.compile(r"(?:^|\/)(?:[L|l]ayer|blocks|encoder)[\/_\.]?(\d+)")
OP_LAYERS = ("popart", "poptorch", "xla_op", "popxl")
MIB = 1 << 20


def tiny(kind: str = "encoder", mode: str = "training", **changes: Any) -> SynthSpec:
    """A few hundred steps on 8 tiles: small enough for brute-force checks."""
    base = {"kind": kind, "mode": mode, "layers": 2, "hidden": 64, "seq": 32 if kind == "cnn" else 16, "batch": 2,
            "vocab": 64, "tiles": 8, "scale": 0.5, "optimizer": "sgd" if kind == "cnn" else "adam"}
    return SynthSpec(**{**base, **changes})


@functools.cache
def doc_of(spec: SynthSpec) -> dict[str, Any]:
    return generate_document(spec)


SPECS = [tiny("encoder", "training"), tiny("encoder", "inference"), tiny("decoder", "training"),
         tiny("decoder", "inference"), tiny("cnn", "training"), tiny("cnn", "inference")]
SPEC_IDS = [f"{s.kind}-{s.mode}" for s in SPECS]


# -- small independent readers -----------------------------------------------------------


def dense(tv: Any, tiles: int) -> list[int]:
    """Decode one TileVector (None = absent), checking tiles are in range."""
    out = [0] * tiles
    if tv is None:
        return out
    if isinstance(tv, list):
        assert len(tv) == tiles
        return list(tv)
    if "runs" in tv:
        for first, stop, value in tv["runs"]:
            assert 0 <= first < stop <= tiles
            for t in range(first, stop):
                assert out[t] == 0, "runs overlap"
                out[t] = value
        return out
    for tile, value in tv["sparse"]:
        assert 0 <= tile < tiles
        out[tile] = value
    return out


def encoding(tv: Any) -> str:
    if tv is None:
        return "absent"
    if isinstance(tv, list):
        return "dense"
    return next(iter(tv))


def tilevectors(doc: dict[str, Any]) -> list[Any]:
    """Every TileVector slot of the document (None where a key is absent)."""
    out: list[Any] = [vt["codeBytes"] for vt in doc["vertexTypes"]]
    for p in doc["programs"]:
        out += [p.get("controlCode"), p.get("exchangeCode"), p.get("cycles")]
        out += [tv for _, tv in p.get("vertices", [])]
    tm = doc["tileMemory"]
    out += [tm["alwaysLive"], tm["notAlwaysLivePeak"], *tm["categories"].values()]
    return out


def programs_by_id(doc: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["id"]: p for p in doc["programs"]}


def operation_of_program(doc: dict[str, Any]) -> dict[int, str]:
    """Program id -> operation name, by the rules of the format (nearest operation-layer context)."""
    ctx = {c["id"]: c for c in doc["debugContexts"]}

    def op_context(cid: int) -> dict[str, Any]:
        c = ctx[cid]
        while c["layer"] not in OP_LAYERS and c["parent"] is not None:
            c = ctx[c["parent"]]
        return c

    def name(c: dict[str, Any]) -> str:
        node: dict[str, Any] | None = c
        while node is not None:
            data = node.get("data") or {}
            if data.get("opName"):
                return str(data["opName"])
            node = ctx[node["parent"]] if node["parent"] is not None else None
        data = c.get("data") or {}
        if c["name"]:
            return str(c["name"])
        if "tensorId" in data:
            return f"Tensor/{data['tensorId']}"
        if "instanceId" in data:
            return f"Call({data['instanceId']})"
        return "Anonymous"

    return {p["id"]: name(op_context(p["debugContext"])) for p in doc["programs"] if p.get("debugContext")}


def op_steps(doc: dict[str, Any]) -> dict[str, list[int]]:
    owner = operation_of_program(doc)
    out: dict[str, list[int]] = defaultdict(list)
    for s, pid in enumerate(doc["steps"]):
        if pid in owner:
            out[owner[pid]].append(s)
    return out


def op_contexts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in doc["debugContexts"] if c["layer"] == "popart"]


# -- determinism ---------------------------------------------------------------------------


def test_same_spec_gives_identical_bytes() -> None:
    spec = preset_spec("bert-tiny", "training", scale=0.5)
    for compress in (False, True):
        a, b = io.BytesIO(), io.BytesIO()
        write_profile(spec, a, compress=compress)
        write_profile(spec, b, compress=compress)
        assert a.getvalue() == b.getvalue()
    assert json.loads(gzip.decompress(b.getvalue())) == generate_document(spec)


def test_seed_changes_the_profile_but_not_its_shape() -> None:
    a, b = doc_of(tiny()), doc_of(tiny(seed=7))
    assert a["variables"]["tile"] != b["variables"]["tile"]
    assert len(a["programs"]) == len(b["programs"]) and len(a["steps"]) == len(b["steps"])


# -- format ----------------------------------------------------------------------------------


def test_every_tilevector_encoding_is_used() -> None:
    for spec in (tiny(), preset_spec("bert-tiny", "training", scale=0.5)):
        used = Counter(encoding(tv) for tv in tilevectors(doc_of(spec)))
        assert set(used) == {"absent", "dense", "runs", "sparse"}, used


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_references_resolve(spec: SynthSpec) -> None:
    doc = doc_of(spec)
    tiles, nsteps = doc["target"]["tilesPerIpu"], len(doc["steps"])
    progs = programs_by_id(doc)
    ctx_ids = {c["id"] for c in doc["debugContexts"]}
    var = doc["variables"]
    var_ids = set(var["id"])
    assert len(progs) == len(doc["programs"]) and len(ctx_ids) == len(doc["debugContexts"])
    assert len(var_ids) == len(var["id"]) and {len(col) for col in var.values()} == {len(var["id"])}
    for p in doc["programs"]:
        assert all(c in progs for c in p.get("children", []))
        assert p.get("debugContext") is None or p["debugContext"] in ctx_ids
        assert all(v in var_ids for v in p.get("vars", []))
        assert all(0 <= vt < len(doc["vertexTypes"]) for vt, _ in p.get("vertices", []))
        assert ("exchangeCode" in p) == (p["type"] == "DoExchange")
        assert "cycles" in p, "every program here runs"
    assert all(c["parent"] is None or c["parent"] in ctx_ids for c in doc["debugContexts"])
    assert all(pid in progs and not progs[pid].get("children") for pid in doc["steps"])
    assert all(pid in progs for pid in doc["controlPrograms"])
    for tv in tilevectors(doc):
        dense(tv, tiles)
    assert all(0 <= t < tiles for t in var["tile"]) and all(b >= 0 for b in var["bytes"])
    assert all(0 <= c < len(doc["livenessClasses"]) for c in var["class"])
    for intervals in doc["livenessClasses"]:
        assert all(0 <= s < e <= nsteps for s, e in intervals)


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_program_tree_is_a_dag_whose_leaves_are_the_steps(spec: SynthSpec) -> None:
    doc = doc_of(spec)
    progs = programs_by_id(doc)
    reached: set[int] = set()
    stack = list(doc["controlPrograms"])
    while stack:  # a cycle would never end; the generator only makes parents after children
        pid = stack.pop()
        reached.add(pid)
        assert all(c < pid for c in progs[pid].get("children", []))
        stack.extend(progs[pid].get("children", []))
    assert reached == set(progs)
    leaves = {pid for pid, p in progs.items() if not p.get("children")}
    assert set(doc["steps"]) == leaves


def test_function_bodies_are_shared_and_stepped_once_per_call() -> None:
    doc = doc_of(tiny())
    progs = programs_by_id(doc)
    callers = Counter(p["children"][0] for p in doc["programs"] if p["type"] == "Call")
    body, calls = callers.most_common(1)[0]
    assert calls >= 2 and progs[body]["type"] == "Sequence"
    leaf = progs[body]["children"][0]
    while progs[leaf].get("children"):
        leaf = progs[leaf]["children"][0]
    assert doc["steps"].count(leaf) == calls


def test_target_and_source() -> None:
    doc = doc_of(tiny())
    assert doc["format"] == "popliner-profile" and doc["version"] == 1
    assert doc["target"] == {"tilesPerIpu": 8, "numTiles": 8, "numIpus": 1, "bytesPerTile": 638976,
                             "clockFrequency": 1.33e9, "arch": "ipu2"}
    assert doc["source"]["framework"] == "synthetic" and "created" not in doc["source"]


# -- model structure ---------------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_layer_numbers_in_names(spec: SynthSpec) -> None:
    doc = doc_of(spec)
    contexts = op_contexts(doc)
    names = [c["data"]["opName"] for c in contexts if (c.get("data") or {}).get("opName")]
    found = {int(m.group(1)) for n in names if (m := LAYER_RE.search(n))}
    assert found == set(range(spec.layers))
    # Unlayered operations: tensor initialisers and a call site with nothing but an instance id.
    assert any("tensorId" in (c.get("data") or {}) for c in contexts)
    assert any("instanceId" in (c.get("data") or {}) and c["name"] == "" for c in contexts)
    # Some operations show their layer only in their inputs.
    only_inputs = [c for c in contexts if not LAYER_RE.search((c.get("data") or {}).get("opName", ""))
                   and LAYER_RE.search("/".join((c.get("data") or {}).get("inputs", [])).replace(".", "/"))]
    assert only_inputs


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_embedding_has_no_layer_but_names_word_embeddings_in_inputs(kind: str) -> None:
    contexts = op_contexts(doc_of(tiny(kind)))
    gathers = [c for c in contexts if any("word_embeddings" in i for i in c.get("data", {}).get("inputs", []))
               and c["data"].get("opType") == "Gather"]
    assert gathers and not any(LAYER_RE.search(c["data"]["opName"]) for c in gathers)


def test_every_operation_context_has_popart_data() -> None:
    for c in op_contexts(doc_of(tiny())):
        data = c.get("data") or {}
        assert "tensorId" in data or data.get("opType") == "Call" or {"opName", "opType", "inputs", "outputs"} <= set(
            data)
    layers = {c["layer"] for c in doc_of(tiny())["debugContexts"]}
    assert {"popart", "poplibs", "poplar", "onnx"} <= layers


def test_training_has_backward_and_optimizer_operations() -> None:
    names = set(op_steps(doc_of(tiny("encoder", "training"))))
    assert any("_grad" in n for n in names) and any("Grad" in n and "_grad" not in n for n in names)
    assert any(n.endswith("/AdamVarUpdate") for n in names) and any(n.endswith("/AdamUpdater") for n in names)
    sgd = set(op_steps(doc_of(tiny("cnn", "training"))))
    assert any(n.endswith("/SGD_update") for n in sgd)
    assert not any("Grad" in n or "Adam" in n for n in op_steps(doc_of(tiny("encoder", "inference"))))


def test_activation_lives_from_forward_to_backward() -> None:
    doc = doc_of(tiny("encoder", "training"))
    steps = op_steps(doc)
    fwd = steps["bert/encoder/layer_0/attention/self/Softmax"]
    bwd = steps["bert/encoder/layer_0/attention/self/Softmax/SoftmaxGrad"]
    assert max(fwd) < min(bwd)
    var = doc["variables"]
    classes = {c for n, c in zip(var["name"], var["class"]) if n == "bert/encoder/layer_0/attention/self/Softmax:0"}
    assert len(classes) == 1
    (start, end), = doc["livenessClasses"][classes.pop()]
    assert start <= min(fwd) and end > min(bwd) and end < len(doc["steps"])


def test_weights_and_optimizer_state_are_always_live() -> None:
    doc = doc_of(tiny("encoder", "training"))
    nsteps = len(doc["steps"])
    var = doc["variables"]
    for name, cls in zip(var["name"], var["class"]):
        if name.endswith("/kernel") or name.startswith("Accl"):
            assert doc["livenessClasses"][cls] == [[0, nsteps]]
    # Classes are shared: far fewer classes than variables.
    assert len(doc["livenessClasses"]) * 3 < len(var["id"])


def test_real_model_sizes_are_plausible_for_a_mk2_ipu() -> None:
    """bert-large training needs several IPUs; a layer is 10-30% of one; the embedding is big."""
    spec = preset_spec("bert-large", "training")
    g = GraphBuilder(spec.tiles, np.random.default_rng(0), spec.optimizer)
    build_model(g, spec)
    ipu = spec.tiles * spec.bytes_per_tile
    per_group: Counter[str] = Counter()
    for t in g.tensors:
        if t.kind in ALWAYS_LIVE:
            per_group[t.group] += t.nbytes
    assert 3.0 < sum(per_group.values()) / ipu < 8.0
    assert all(0.10 < per_group[f"bert/encoder/layer_{i}"] / ipu < 0.30 for i in range(spec.layers))
    assert per_group["bert/embeddings"] > 2 * per_group["bert/encoder/layer_0"]


# -- ground truth ---------------------------------------------------------------------------------


def recompute_tile_memory(doc: dict[str, Any]) -> dict[str, list[int]]:
    """tileMemory from the document alone, by brute force over steps and tiles."""
    tiles, nsteps = doc["target"]["tilesPerIpu"], len(doc["steps"])
    code = [dense(vt["codeBytes"], tiles) for vt in doc["vertexTypes"]]
    present: set[tuple[int, int]] = set()
    state, control, exchange = [0] * tiles, [0] * tiles, [0] * tiles
    for p in doc["programs"]:
        for vt, counts in p.get("vertices", []):
            for t, n in enumerate(dense(counts, tiles)):
                if n:
                    present.add((vt, t))
                    state[t] += n * doc["vertexTypes"][vt]["size"]
        if not p.get("children"):
            control = [a + b for a, b in zip(control, dense(p.get("controlCode"), tiles))]
        if p["type"] == "DoExchange":
            exchange = [a + b for a, b in zip(exchange, dense(p.get("exchangeCode"), tiles))]
    vcode = [0] * tiles
    for vt, t in present:
        vcode[t] += code[vt][t]
    classes = doc["livenessClasses"]
    always = [sum(e - s for s, e in c) == nsteps and any(s == 0 for s, _ in c) for c in classes]
    var = doc["variables"]
    by_class: dict[int, list[int]] = defaultdict(lambda: [0] * tiles)
    always_vars = [0] * tiles
    for b, t, c in zip(var["bytes"], var["tile"], var["class"]):
        if always[c]:
            always_vars[t] += b
        else:
            by_class[c][t] += b
    peak = [0] * tiles
    for s in range(nsteps):
        live = [0] * tiles
        for c, per_tile in by_class.items():
            if any(a <= s < e for a, e in classes[c]):
                live = [x + y for x, y in zip(live, per_tile)]
        peak = [max(x, y) for x, y in zip(peak, live)]
    total = [sum(xs) for xs in zip(always_vars, vcode, state, control, exchange)]
    return {"alwaysLive": total, "notAlwaysLivePeak": peak, "vertexCode": vcode, "vertexInstanceState": state,
            "controlCode": control, "internalExchangeCode": exchange}


@pytest.mark.parametrize("spec", [tiny("encoder", "training"), tiny("decoder", "inference"),
                                  tiny("cnn", "training", layers=3)], ids=["encoder", "decoder", "cnn"])
def test_tile_memory_matches_an_independent_recomputation(spec: SynthSpec) -> None:
    doc = doc_of(spec)
    tiles = spec.tiles
    want = recompute_tile_memory(doc)
    tm = doc["tileMemory"]
    assert dense(tm["alwaysLive"], tiles) == want["alwaysLive"]
    assert dense(tm["notAlwaysLivePeak"], tiles) == want["notAlwaysLivePeak"]
    for cat in ("vertexCode", "vertexInstanceState", "controlCode", "internalExchangeCode"):
        assert dense(tm["categories"][cat], tiles) == want[cat], cat
    assert max(want["notAlwaysLivePeak"]) > 0 and min(want["vertexCode"]) > 0


# -- scale and parameters -----------------------------------------------------------------------------


def test_scale_changes_granularity_roughly_linearly() -> None:
    counts = {}
    for scale in (0.5, 1.0, 2.0):
        d = doc_of(preset_spec("bert-tiny", "training", layers=2, scale=scale))
        counts[scale] = (len(d["variables"]["id"]), len(d["programs"]), len(d["steps"]))
    for i in range(3):
        assert counts[0.5][i] < counts[1.0][i] < counts[2.0][i]
    assert 1.6 < counts[2.0][0] / counts[1.0][0] < 2.4
    assert 1.5 < counts[2.0][2] / counts[1.0][2] < 2.5


@pytest.mark.parametrize("changes, message", [
    ({"layers": 0}, "layers=0"),
    ({"scale": 100.0}, "scale=100"),
    ({"kind": "rnn"}, "kind must be"),
    ({"hidden": 200, "kind": "encoder"}, "multiple"),
    ({"tiles": -1}, "tiles=-1"),
    ({"batch": 1.5}, "batch must be an integer"),
    ({"nonsense": 1}, "unknown synth parameter"),
])
def test_bad_parameters_are_usage_problems(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageProblem, match=message):
        tiny().replace(**changes)


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(UsageProblem, match="bert-large"):
        preset_spec("bert-huge")
    assert {"bert-tiny", "bert-base", "bert-large", "gpt2-small", "resnet50"} <= set(preset_names())


def test_write_profile_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    out = tmp_path / "p.json.gz"
    write_profile(tiny(), out)
    with pytest.raises(OutputExistsError):
        write_profile(tiny(), out)
    summary = write_profile(tiny(seed=1), out, force=True)
    assert json.loads(gzip.decompress(out.read_bytes())) == doc_of(tiny(seed=1))
    assert summary.bytes_written == out.stat().st_size and summary.variables > 0


# -- CLI ---------------------------------------------------------------------------------------------


def test_cli_writes_a_profile(tmp_path: Path) -> None:
    from popliner.cli import cli

    out = tmp_path / "bert.json"
    result = CliRunner().invoke(cli, ["synth", "--preset", "bert-tiny", "--mode", "training", "--layers", "2",
                                      "--scale", "0.5", "--seed", "3", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert json.loads(out.read_bytes()) == doc_of(preset_spec("bert-tiny", "training", layers=2, scale=0.5, seed=3))


def test_cli_errors_are_one_line_with_exit_code_2(tmp_path: Path) -> None:
    from popliner.cli import cli

    out = tmp_path / "x.json"
    out.write_text("{}")
    runner = CliRunner()
    exists = runner.invoke(cli, ["synth", "--preset", "bert-tiny", "-o", str(out)])
    assert exists.exit_code == 2 and "--force" in exists.stderr
    bad = runner.invoke(cli, ["synth", "--kind", "cnn", "--seq", "4", "-o", str(tmp_path / "y.json")])
    assert bad.exit_code == 2 and "seq=4" in bad.stderr
    assert out.read_text() == "{}"


# -- committed fixtures --------------------------------------------------------------------------------


def load_fixture_script() -> Any:
    spec = importlib.util.spec_from_file_location("make_fixtures", ROOT / "scripts" / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FIXTURE_SPECS: dict[str, SynthSpec] = load_fixture_script().fixtures()


def read_fixture(name: str) -> dict[str, Any]:
    raw = (FIXTURES / name).read_bytes()
    return json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", sorted(FIXTURE_SPECS))
def test_fixture_is_committed_and_up_to_date(name: str) -> None:
    path = FIXTURES / name
    assert path.exists(), "run scripts/make_fixtures.py"
    assert path.stat().st_size < 5 * MIB
    module = load_fixture_script()
    assert module.render(FIXTURE_SPECS[name], name) == path.read_bytes(), "stale: run scripts/make_fixtures.py"


@pytest.mark.parametrize("name", sorted(FIXTURE_SPECS))
def test_fixture_loads_with_the_project_loader(name: str) -> None:
    loader = pytest.importorskip("popliner.profile.loader")
    doc = read_fixture(name)
    profile = loader.load_profile(FIXTURES / name)
    assert profile.tiles == doc["target"]["tilesPerIpu"]
    assert profile.programs.count == len(doc["programs"])
    assert profile.num_steps == len(doc["steps"])
    assert profile.variables.count == len(doc["variables"]["id"])
    assert profile.num_classes == len(doc["livenessClasses"])
    assert profile.contexts.count == len(doc["debugContexts"])
    assert len(profile.vertex_types.names) == len(doc["vertexTypes"])
    assert profile.tile_memory is not None
    assert profile.tile_memory["alwaysLive"].tolist() == dense(doc["tileMemory"]["alwaysLive"], profile.tiles)
    always = profile.always_live_classes()
    assert always[0] and always.sum() == 1


@pytest.mark.parametrize("name", sorted(FIXTURE_SPECS))
def test_fixture_layers_and_memory_agree_with_the_project_model(name: str) -> None:
    """popliner's layer deduction finds every layer; its memory model for all
    operations reproduces the ground truth (control code apart from the
    unattributed Sync programs)."""
    analysis = pytest.importorskip("popliner.analysis")
    loader = pytest.importorskip("popliner.profile.loader")
    profile = loader.load_profile(FIXTURES / name)
    a = analysis.analyse_profile(profile, analysis.AnalysisOptions(layered_vars_only=False))
    assert a.layer_names == tuple(str(i) for i in range(FIXTURE_SPECS[name].layers))
    assert a.layers.coverage > 0.8
    stage = a.model.stage(np.arange(a.ops.count)).per_tile
    truth = profile.tile_memory
    assert (stage[1] == truth["category.vertexCode"]).all()
    assert (stage[2] == truth["category.vertexInstanceState"]).all()
    assert (stage[3] == truth["category.internalExchangeCode"]).all()
    assert (stage[4] <= truth["category.controlCode"]).all()
    total_truth = truth["alwaysLive"] + truth["notAlwaysLivePeak"]
    assert (stage.sum(axis=0) <= total_truth).all()

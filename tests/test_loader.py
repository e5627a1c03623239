"""The format-v1 loader: TileVector decoding, every validation error, the CLI path, the schema.

Bad documents are built from ``base_document()`` by one mutation each. The
catalogue ``BAD_INPUTS`` is shared by three tests: the loader raises exactly
the expected (file, place, problem), the CLI prints that message on one
stderr line with exit code 2, and ``docs/bad-inputs.md`` shows the same
table (regenerate it with ``python -m tests.test_loader``).
"""

from __future__ import annotations

import copy
import dataclasses
import gzip
import json
import os
import sys
import tempfile
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from click.testing import CliRunner

from popliner.cli import cli
from popliner.errors import ProfileFormatError
from popliner.profile.loader import MAX_TILES, load_profile, parse_profile_bytes
from popliner.profile.model import NameTable, Profile
from popliner.profile.schema import load_schema, schema_path
from popliner.profile.tilevector import MAX_VALUE, RunTableBuilder, decode_tilevector
from tests.helpers import FIXTURES

ROOT = Path(__file__).resolve().parent.parent
TINY = FIXTURES / "tiny.json"
BAD_INPUTS_DOC = ROOT / "docs" / "bad-inputs.md"

Doc = dict[str, Any]


def base_document() -> Doc:
    """A small valid profile: 4 tiles, 3 programs, 2 steps, 2 variables, 2 contexts.

    ``programs[1]`` is the root with children so that error places read like
    ``programs[1].children[0]``; every TileVector encoding appears once.
    """
    return {
        "format": "popliner-profile",
        "version": 1,
        "source": {"tool": "test_loader", "framework": "synthetic"},
        "target": {"tilesPerIpu": 4, "numTiles": 4, "numIpus": 1, "bytesPerTile": 1000,
                   "clockFrequency": 1.33e9, "arch": "ipu2"},
        "vertexTypes": [
            {"name": "VA", "size": 8, "codeBytes": [10, 10, 0, 0]},
            {"name": "VB", "size": 4, "codeBytes": {"runs": [[1, 3, 7]]}},
        ],
        "programs": [
            {"id": 11, "type": "OnTileExecute", "name": "op0", "debugContext": 1,
             "vertices": [[0, {"sparse": [[0, 2], [1, 1]]}], [1, {"runs": [[2, 4, 3]]}]],
             "vars": [100, 101], "cycles": [4, 4, 4, 4]},
            {"id": 10, "type": "Sequence", "name": "main", "children": [11, 12],
             "controlCode": {"runs": [[0, 4, 5]]}},
            {"id": 12, "type": "DoExchange", "debugContext": 2, "exchangeCode": {"sparse": [[3, 9]]},
             "vars": [101]},
        ],
        "controlPrograms": [10],
        "steps": [11, 12],
        "variables": {"id": [100, 101], "bytes": [64, 32], "tile": [0, 3], "class": [0, 1],
                      "name": ["w", "act"]},
        "livenessClasses": [[[0, 2]], [[1, 2]]],
        "debugContexts": [
            {"id": 1, "parent": None, "layer": "popart", "name": "op0", "data": {"opName": "layer0/op0"}},
            {"id": 2, "parent": 1, "layer": "poplibs", "name": "exchange"},
        ],
    }


def encode(doc: Any) -> bytes:
    return json.dumps(doc).encode("utf-8")


def load_doc(doc: Any, path: str = "test.json") -> Profile:
    return parse_profile_bytes(encode(doc), path)


def raises_format_error(raw: bytes, path: str) -> ProfileFormatError:
    with pytest.raises(ProfileFormatError) as info:
        parse_profile_bytes(raw, path)
    return info.value


def profile_fields(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf of a Profile as (dotted name, value), for comparing two loads."""
    if isinstance(obj, NameTable):
        # The names themselves: the column reader keeps them packed and with the document's separators.
        yield prefix.rstrip("."), [obj.get(i) for i in range(len(obj.ptr) - 1)]
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from profile_fields(getattr(obj, f.name), f"{prefix}{f.name}.")
    elif isinstance(obj, dict) and obj and all(isinstance(v, np.ndarray) for v in obj.values()):
        for k, v in obj.items():
            yield from profile_fields(v, f"{prefix}{k}.")
    else:
        yield prefix.rstrip("."), obj


def assert_same_profile(a: Profile, b: Profile) -> None:
    left = {k: v for k, v in profile_fields(a) if k not in ("path", "sha256")}
    right = {k: v for k, v in profile_fields(b) if k not in ("path", "sha256")}
    assert left.keys() == right.keys()
    for key, value in left.items():
        if isinstance(value, np.ndarray):
            assert value.dtype == right[key].dtype, key
            assert np.array_equal(value, right[key]), key
        else:
            assert value == right[key], key


# -- TileVector decoding ------------------------------------------------------


def _fail(where: str, problem: str) -> ProfileFormatError:
    return ProfileFormatError("tv.json", where, problem)


def dense_of(raw: Any, tiles: int) -> list[int]:
    """Decode one TileVector and expand it back to one value per tile."""
    builder = RunTableBuilder()
    builder.add(*decode_tilevector(raw, tiles, "v", _fail))
    builder.end_row()
    return [int(v) for v in builder.build().dense(0, tiles)]


def runs_of(raw: Any, tiles: int) -> list[tuple[int, int, int]]:
    first, stop, value = decode_tilevector(raw, tiles, "v", _fail)
    return list(zip(first.tolist(), stop.tolist(), value.tolist()))


def test_dense_tilevector_becomes_runs_of_equal_values() -> None:
    raw = [0, 5, 5, 0, 7, 7, 7, 0]
    # Zero stretches are dropped; equal neighbours merge into one run.
    assert runs_of(raw, 8) == [(1, 3, 5), (4, 7, 7)]
    assert dense_of(raw, 8) == raw


def test_dense_tilevector_all_zero_has_no_runs() -> None:
    assert runs_of([0, 0, 0], 3) == []
    assert dense_of([0, 0, 0], 3) == [0, 0, 0]


def test_runs_tilevector_out_of_order_with_a_zero_run() -> None:
    raw = {"runs": [[5, 8, 2], [0, 2, 9], [2, 5, 0]]}
    # Sorted by first tile; the zero-valued run [2, 5) carries nothing.
    assert runs_of(raw, 8) == [(0, 2, 9), (5, 8, 2)]
    assert dense_of(raw, 8) == [9, 9, 0, 0, 0, 2, 2, 2]


def test_runs_tilevector_adjacent_runs_and_full_width() -> None:
    assert dense_of({"runs": [[0, 1, 4], [1, 3, 6]]}, 3) == [4, 6, 6]
    assert dense_of({"runs": [[0, 5, MAX_VALUE]]}, 5) == [MAX_VALUE] * 5
    assert dense_of({"runs": []}, 2) == [0, 0]


def test_sparse_tilevector_out_of_order_with_a_zero_entry() -> None:
    raw = {"sparse": [[6, 4], [1, 3], [3, 0]]}
    assert runs_of(raw, 8) == [(1, 2, 3), (6, 7, 4)]
    assert dense_of(raw, 8) == [0, 3, 0, 0, 0, 0, 4, 0]
    assert dense_of({"sparse": []}, 2) == [0, 0]


def test_every_encoding_in_a_loaded_profile() -> None:
    p = load_doc(base_document())
    tiles = p.tiles
    assert tiles == 4
    # vertexTypes: dense, then runs
    assert p.vertex_types.code.dense(0, tiles).tolist() == [10, 10, 0, 0]
    assert p.vertex_types.code.dense(1, tiles).tolist() == [0, 7, 7, 0]
    # programs[1].controlCode runs over all tiles; the others have none (absent = zeros)
    assert [p.programs.control.dense(i, tiles).tolist() for i in range(3)] == [[0] * 4, [5] * 4, [0] * 4]
    # programs[2].exchangeCode sparse on tile 3 only
    assert [p.programs.exchange.dense(i, tiles).tolist() for i in range(3)] == [[0] * 4, [0] * 4, [0, 0, 0, 9]]
    # cycles: dense on programs[0], absent elsewhere
    assert [p.programs.cycles.dense(i, tiles).tolist() for i in range(3)] == [[4] * 4, [0] * 4, [0] * 4]
    assert p.programs.has_cycles
    # vertices of programs[0]: type 0 sparse on tiles 0-1, type 1 runs on tiles 2-3
    verts = p.programs.vertices
    assert verts.key is not None
    runs = verts.runs_of([0])
    by_type = {vt: verts.sum_runs(runs[verts.key[runs] == vt], tiles).tolist() for vt in (0, 1)}
    assert by_type == {0: [2, 1, 0, 0], 1: [0, 0, 3, 3]}
    assert verts.ptr.tolist() == [0, 3, 3, 3]


def test_loaded_profile_matches_the_document() -> None:
    p = load_doc(base_document(), "base.json")
    assert p.path == "base.json"
    assert (p.target.tiles_per_ipu, p.target.num_tiles, p.target.num_ipus) == (4, 4, 1)
    assert (p.target.bytes_per_tile, p.target.clock_hz, p.target.arch) == (1000, 1.33e9, "ipu2")
    assert p.vertex_types.names == ("VA", "VB")
    assert p.vertex_types.size.tolist() == [8, 4]
    assert p.programs.ids.tolist() == [11, 10, 12]
    assert p.programs.names == ("op0", "main", "")
    # children 11, 12 are the positions 0 and 2
    assert p.programs.children(1).tolist() == [0, 2]
    assert p.programs.context.tolist() == [0, -1, 1]
    assert p.programs.repeat_count.tolist() == [1, 1, 1]
    assert p.control_programs.tolist() == [1]
    assert p.steps.tolist() == [0, 2]
    assert p.variables.ids.tolist() == [100, 101]
    assert p.variables.bytes.tolist() == [64, 32]
    assert p.variables.tile.tolist() == [0, 3]
    assert p.variables.klass.tolist() == [0, 1]
    assert [p.variables.name(i) for i in range(2)] == ["w", "act"]
    # programs' vars: positions of variables 100, 101 and 101
    assert p.programs.var_ptr.tolist() == [0, 2, 2, 3]
    assert p.programs.var_idx.tolist() == [0, 1, 1]
    assert p.class_ptr.tolist() == [0, 1, 2]
    assert (p.iv_start.tolist(), p.iv_end.tolist()) == ([0, 1], [2, 2])
    assert p.always_live_classes().tolist() == [True, False]
    assert p.contexts.ids.tolist() == [1, 2]
    assert p.contexts.parent.tolist() == [-1, 0]
    assert p.contexts.layer == ("popart", "poplibs")
    assert p.source == {"tool": "test_loader", "framework": "synthetic"}
    assert p.tile_memory is None


def test_liveness_intervals_are_merged_and_empty_ones_dropped() -> None:
    doc = base_document()
    doc["steps"] = [11, 12, 11, 12, 11]
    doc["livenessClasses"] = [[[3, 5], [0, 2], [1, 3], [4, 4]], []]
    p = load_doc(doc)
    # [0,2) and [1,3) merge into [0,3); [3,5) touches it and merges too; [4,4) is empty.
    assert p.class_ptr.tolist() == [0, 1, 1]
    assert (p.iv_start.tolist(), p.iv_end.tolist()) == ([0], [5])
    assert p.always_live_classes().tolist() == [True, False]


def test_variable_names_absent_give_placeholders() -> None:
    doc = base_document()
    del doc["variables"]["name"]
    p = load_doc(doc)
    assert [p.variables.name(i) for i in range(2)] == ["var#100", "var#101"]


def test_tile_memory_every_encoding() -> None:
    doc = base_document()
    doc["tileMemory"] = {"alwaysLive": [1, 2, 3, 4], "notAlwaysLivePeak": {"runs": [[1, 4, 6]]},
                         "categories": {"vertexCode": {"sparse": [[2, 5]]}}}
    tm = load_doc(doc).tile_memory
    assert tm is not None
    assert {k: v.tolist() for k, v in tm.items()} == {
        "alwaysLive": [1, 2, 3, 4], "notAlwaysLivePeak": [0, 6, 6, 6], "category.vertexCode": [0, 0, 5, 0]}


def test_null_where_the_loader_treats_it_as_absent() -> None:
    doc = base_document()
    doc["source"] = None
    doc["programs"][2]["children"] = None
    doc["programs"][2]["vars"] = None
    doc["programs"][2]["debugContext"] = None
    p = load_doc(doc)
    assert p.source == {}
    assert p.programs.children(2).tolist() == []
    assert p.programs.var_ptr.tolist() == [0, 2, 2, 2]
    assert p.programs.context.tolist() == [0, -1, -1]


def test_two_gigabyte_variable_and_values_at_the_limit_load_exactly() -> None:
    doc = base_document()
    doc["variables"]["bytes"] = [2**31, 2**32 + 7]  # beyond int32: must not wrap
    doc["programs"][0]["cycles"] = [MAX_VALUE, 0, 0, 1]
    p = load_doc(doc)
    assert p.variables.bytes.dtype == np.int64
    assert p.variables.bytes.tolist() == [2**31, 2**32 + 7]
    assert p.programs.cycles.dense(0, 4).tolist() == [MAX_VALUE, 0, 0, 1]


def test_gzip_loads_the_same_as_plain(tmp_path: Path) -> None:
    raw = encode(base_document())
    plain = tmp_path / "p.json"
    plain.write_bytes(raw)
    packed = tmp_path / "p.json.gz"
    packed.write_bytes(gzip.compress(raw))
    a, b = load_profile(plain), load_profile(packed)
    assert (a.path, b.path) == (str(plain), str(packed))
    assert_same_profile(a, b)


def test_gzip_is_recognised_by_content_under_any_name(tmp_path: Path) -> None:
    odd = tmp_path / "p.profile"
    odd.write_bytes(gzip.compress(encode(base_document())))
    assert_same_profile(load_profile(odd), load_doc(base_document()))


def test_tiny_fixture_loads() -> None:
    p = load_profile(TINY)
    assert (p.programs.count, p.variables.count, p.num_steps, p.num_classes, p.contexts.count) == (14, 10, 11, 6, 10)


def test_example_in_the_format_doc_loads_and_fits_the_schema() -> None:
    text = (ROOT / "docs" / "profile-format.md").read_text(encoding="utf-8")
    example = text.split("```json\n", 1)[1].split("```", 1)[0]
    p = parse_profile_bytes(example.encode(), "example.json")
    # The doc says: one variable live through both steps, program 2 run twice.
    assert p.always_live_classes().tolist() == [True]
    assert p.programs.children(0).tolist() == [1, 1]
    assert p.programs.cycles.dense(1, 2).tolist() == [120, 40]
    assert schema_validator().is_valid(json.loads(example))


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ProfileFormatError) as info:
        load_profile(tmp_path / "nope.json")
    assert str(info.value) == f"{tmp_path / 'nope.json'}: no such file"
    with pytest.raises(ProfileFormatError) as info:
        load_profile(tmp_path)
    assert str(info.value) == f"{tmp_path}: is a directory, not a profile file"


# -- the catalogue of bad inputs ------------------------------------------------


@dataclass(frozen=True)
class Bad:
    """One bad input: how to make its bytes and exactly what the loader says."""

    name: str  # file stem and pytest id
    what: str  # one line for the docs table
    make: Callable[[], bytes]
    where: str
    problem: str
    suffix: str = ".json"

    @property
    def filename(self) -> str:
        return self.name + self.suffix

    @property
    def message(self) -> str:
        return str(ProfileFormatError(self.filename, self.where, self.problem))


def mutated(change: Callable[[Doc], Any]) -> Callable[[], bytes]:
    def make() -> bytes:
        doc = copy.deepcopy(base_document())
        change(doc)
        return encode(doc)
    return make


def replaced(old: str, new: str | bytes) -> Callable[[], bytes]:
    """Edit the JSON text itself, for values json.dumps cannot write (huge numbers, bad bytes)."""
    def make() -> bytes:
        text = encode(base_document())
        assert text.count(old.encode()) == 1, old
        return text.replace(old.encode(), new if isinstance(new, bytes) else new.encode())
    return make


def raw(data: bytes) -> Callable[[], bytes]:
    return lambda: data


def gzip_with_bad_crc() -> bytes:
    data = bytearray(gzip.compress(encode(base_document()), mtime=0))
    data[-8] ^= 0xFF  # the trailer's CRC32: always detected, whatever zlib produced
    return bytes(data)


def _set(path: str, value: Any) -> Callable[[Doc], None]:
    """A mutation that sets one place given as ``a.b[2].c``."""
    def change(doc: Doc) -> None:
        keys = [int(k) if k.isdigit() else k for k in path.replace("[", ".").replace("]", "").split(".")]
        node: Any = doc
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return change


def _del(path: str) -> Callable[[Doc], None]:
    def change(doc: Doc) -> None:
        keys = [int(k) if k.isdigit() else k for k in path.replace("[", ".").replace("]", "").split(".")]
        node: Any = doc
        for k in keys[:-1]:
            node = node[k]
        del node[keys[-1]]
    return change


BIG = 10**30  # orjson reads an integer this long as a float
TRUNCATED = b'{"format": "popliner-profile", "vers'

BAD_INPUTS: list[Bad] = [
    # container: bytes, encoding, JSON
    Bad("empty", "empty file", raw(b""), "", "empty file; a profile is one JSON object"),
    Bad("blank", "only whitespace", raw(b" \n\t\n"), "", "empty file; a profile is one JSON object"),
    Bad("top-array", "top level is an array", raw(b"[]"), "", "expected a JSON object at the top level, got list"),
    Bad("top-null", "top level is null", raw(b"null"), "", "expected a JSON object at the top level, got null"),
    Bad("truncated", "truncated JSON", raw(TRUNCATED), "line 1 column 32",
        "not valid JSON: Unterminated string starting at"),
    Bad("trailing-garbage", "a second value after the object", raw(b'{"format": "popliner-profile"} {}'),
        "line 1 column 32", "not valid JSON: Extra data"),
    Bad("non-utf8", "byte 0xFF inside a string", replaced('"act"', b'"a\xffct"'),
        "byte 935", "not UTF-8 text; a profile is UTF-8 JSON"),
    Bad("latin1", "Latin-1 text (e-acute as byte 0xE9)", raw('{"name": "caf\u00e9"}'.encode("latin-1")),
        "byte 13", "not UTF-8 text; a profile is UTF-8 JSON"),
    Bad("utf16", "UTF-16 text", raw('{"format": "popliner-profile"}'.encode("utf-16")), "byte 0",
        "not UTF-8 text; a profile is UTF-8 JSON"),
    Bad("nan", "NaN as a number", raw(b'{"version": NaN}'), "",
        "not valid JSON: NaN is not a JSON number"),
    Bad("gzip-truncated", "gzip stream cut short",
        lambda: gzip.compress(encode(base_document()), mtime=0)[:30], "",
        "corrupt gzip stream (Compressed file ended before the end-of-stream marker was reached); "
        "re-export or re-copy the file", ".json.gz"),
    Bad("gzip-crc", "gzip CRC does not match", gzip_with_bad_crc, "",
        "corrupt gzip stream (CRC check failed); re-export or re-copy the file", ".json.gz"),
    Bad("gzip-plain", "plain JSON named .gz", lambda: encode(base_document()), "",
        "corrupt gzip stream (Not a gzipped file (b'{\"')); re-export or re-copy the file", ".json.gz"),
    # format and version
    Bad("no-format", "no \"format\" key", mutated(_del("format")), "",
        'missing required key "format"; is this a popliner profile?'),
    Bad("wrong-format", "another format", mutated(_set("format", "pva-report")), "format",
        'expected "popliner-profile", got "pva-report"; is this a popliner profile?'),
    Bad("no-version", "no \"version\" key", mutated(_del("version")), "", 'missing required key "version"'),
    Bad("version-2", "version 2", mutated(_set("version", 2)), "version",
        "unsupported version 2; this popliner reads version 1"),
    Bad("version-string", "version \"1\"", mutated(_set("version", "1")), "version",
        'unsupported version "1"; this popliner reads version 1'),
    Bad("version-true", "version true", mutated(_set("version", True)), "version",
        "unsupported version true; this popliner reads version 1"),
    # missing required keys
    Bad("no-target", "no target (top level)", mutated(_del("target")), "", 'missing required key "target"'),
    Bad("no-programs", "no programs (top level)", mutated(_del("programs")), "", 'missing required key "programs"'),
    Bad("no-tiles", "no target.tilesPerIpu", mutated(_del("target.tilesPerIpu")), "target",
        'missing required key "tilesPerIpu"'),
    Bad("no-program-id", "a program without id", mutated(_del("programs[1].id")), "programs[1]",
        'missing required key "id"'),
    Bad("no-var-bytes", "variables without bytes", mutated(_del("variables.bytes")), "variables",
        'missing required key "bytes"'),
    Bad("no-parent", "a debug context without parent", mutated(_del("debugContexts[1].parent")), "debugContexts[1]",
        'missing required key "parent" (null for a root)'),
    # wrong types
    Bad("string-for-int", "tilesPerIpu is \"4\"", mutated(_set("target.tilesPerIpu", "4")), "target.tilesPerIpu",
        "expected an integer, got string"),
    Bad("bool-for-int", "a vertex size is true", mutated(_set("vertexTypes[0].size", True)), "vertexTypes[0].size",
        "expected an integer, got boolean"),
    Bad("float-for-int", "a variable size is 32.5", mutated(_set("variables.bytes[1]", 32.5)), "variables.bytes[1]",
        "expected an integer, got number"),
    Bad("integral-float", "a variable size is 32.0", mutated(_set("variables.bytes[1]", 32.0)), "variables.bytes[1]",
        "expected an integer, got number"),
    Bad("float-in-tilevector", "a dense TileVector holds 4.0", mutated(_set("programs[0].cycles[2]", 4.0)),
        "programs[0].cycles", "expected integers, found a non-integer value"),
    Bad("object-for-list", "programs is an object", mutated(_set("programs", {})), "programs",
        "expected a list, got object"),
    Bad("object-for-children", "children is an object", mutated(_set("programs[1].children", {})),
        "programs[1].children", "expected a list of program ids, got object"),
    Bad("list-for-object", "target is a list", mutated(_set("target", [])), "target", "expected an object, got list"),
    Bad("string-for-step", "a step is \"11\"", mutated(_set("steps[0]", "11")), "steps[0]",
        "expected a program id, got string"),
    Bad("null-name", "a program name is null", mutated(_set("programs[0].name", None)), "programs[0].name",
        "expected a string, got null"),
    Bad("bad-program-type", "unknown program type", mutated(_set("programs[0].type", "Loop")), "programs[0].type",
        'unknown program type "Loop"; expected one of Sequence, Repeat, Call, If, Switch, OnTileExecute, '
        "DoExchange, GlobalExchange, StreamCopyBegin, StreamCopyMid, StreamCopyEnd, Copy, Sync, Other"),
    Bad("bad-tilevector-object", "TileVector object with both keys",
        mutated(_set("vertexTypes[1].codeBytes", {"runs": [], "sparse": []})), "vertexTypes[1].codeBytes",
        'a TileVector object must have exactly one key, "runs" or "sparse"'),
    Bad("bad-interval", "an interval with one bound", mutated(_set("livenessClasses[0][0]", [0])),
        "livenessClasses[0][0]", "expected an interval [start, end] of two integers"),
    Bad("bad-clock", "clockFrequency 0", mutated(_set("target.clockFrequency", 0)), "target.clockFrequency",
        "expected a positive frequency in Hz, got 0"),
    # references to nothing
    Bad("child-nowhere", "a child id no program has", mutated(_set("programs[1].children[0]", 99)),
        "programs[1].children[0]", "no program has id 99"),
    Bad("step-nowhere", "a step id no program has", mutated(_set("steps[1]", 99)), "steps[1]",
        "no program has id 99"),
    Bad("control-nowhere", "a control program id no program has", mutated(_set("controlPrograms[0]", 99)),
        "controlPrograms[0]", "no program has id 99"),
    Bad("var-nowhere", "a program var id no variable has", mutated(_set("programs[0].vars[1]", 999)),
        "programs[0].vars[1]", "no variable has id 999"),
    Bad("class-nowhere", "a variable class beyond livenessClasses", mutated(_set("variables.class[1]", 2)),
        "variables.class[1]", "no such liveness class (there are 2)"),
    Bad("context-nowhere", "a program debugContext no context has", mutated(_set("programs[2].debugContext", 99)),
        "programs[2].debugContext", "no debug context has id 99"),
    Bad("parent-nowhere", "a context parent no context has", mutated(_set("debugContexts[1].parent", 99)),
        "debugContexts[1].parent", "no debug context has id 99"),
    Bad("vertex-type-nowhere", "a vertex type id beyond vertexTypes", mutated(_set("programs[0].vertices[1][0]", 2)),
        "programs[0].vertices[1][0]", "no vertex type 2 (there are 2)"),
    # duplicates
    Bad("duplicate-program", "two programs with id 11", mutated(_set("programs[2].id", 11)), "programs[2].id",
        "program id 11 is used twice (also at programs[0])"),
    Bad("duplicate-variable", "two variables with id 100", mutated(_set("variables.id[1]", 100)), "variables.id[1]",
        "variable id 100 is used twice"),
    Bad("duplicate-context", "two debug contexts with id 1", mutated(_set("debugContexts[1].id", 1)),
        "debugContexts[1].id", "debug context id 1 is used twice (also at debugContexts[0])"),
    Bad("column-lengths", "variables.tile longer than variables.id", mutated(_set("variables.tile", [0, 3, 1])),
        "variables.tile", "has 3 entries but variables.id has 2"),
    # negative sizes
    Bad("negative-size", "vertex size -1", mutated(_set("vertexTypes[0].size", -1)), "vertexTypes[0].size",
        "-1 is below the minimum 0"),
    Bad("negative-bytes", "variable bytes -5", mutated(_set("variables.bytes[1]", -5)), "variables.bytes[1]",
        "negative size"),
    Bad("negative-tilevector", "a dense TileVector holds -1", mutated(_set("vertexTypes[0].codeBytes[1]", -1)),
        "vertexTypes[0].codeBytes", "negative value; TileVector entries are non-negative integers"),
    Bad("negative-repeat", "repeatCount -2", mutated(_set("programs[1].repeatCount", -2)), "programs[1].repeatCount",
        "-2 is below the minimum 0"),
    # tiles out of range
    Bad("variable-tile", "variables.tile 4 on a 4-tile IPU", mutated(_set("variables.tile[1]", 4)),
        "variables.tile[1]", "tile outside [0, 4)"),
    Bad("sparse-tile", "sparse entry on tile 4", mutated(_set("programs[2].exchangeCode", {"sparse": [[4, 1]]})),
        "programs[2].exchangeCode.sparse[0]", "tile 4 outside [0, 4)"),
    Bad("runs-tile", "run [0, 5) on 4 tiles", mutated(_set("programs[1].controlCode", {"runs": [[0, 5, 1]]})),
        "programs[1].controlCode.runs[0]", "run [0, 5) is empty or outside tiles [0, 4)"),
    Bad("dense-empty-lists", "dense entries that are empty lists (found by the property test)",
        mutated(_set("programs[1].controlCode", [[], [], [], []])), "programs[1].controlCode",
        "expected non-negative integers, found a list"),
    Bad("empty-run", "run [2, 2)", mutated(_set("vertexTypes[1].codeBytes", {"runs": [[2, 2, 1]]})),
        "vertexTypes[1].codeBytes.runs[0]", "run [2, 2) is empty or outside tiles [0, 4)"),
    Bad("runs-overlap", "runs [2, 4) and [0, 3)",
        mutated(_set("vertexTypes[1].codeBytes", {"runs": [[2, 4, 1], [0, 3, 1]]})),
        "vertexTypes[1].codeBytes.runs[0]", "run [2, 4) overlaps [0, 3) (runs[1])"),
    Bad("sparse-twice", "tile 2 listed twice in sparse",
        mutated(_set("vertexTypes[1].codeBytes", {"sparse": [[2, 1], [2, 3]]})),
        "vertexTypes[1].codeBytes.sparse[1]", "tile 2 listed twice"),
    Bad("dense-short", "dense TileVector of 3 on 4 tiles", mutated(_set("programs[0].cycles", [1, 2, 3])),
        "programs[0].cycles", "dense TileVector has 3 entries; expected tilesPerIpu = 4"),
    Bad("dense-long", "dense TileVector of 5 on 4 tiles", mutated(_set("programs[0].cycles", [1, 2, 3, 4, 5])),
        "programs[0].cycles", "dense TileVector has 5 entries; expected tilesPerIpu = 4"),
    # liveness intervals
    Bad("interval-past-steps", "interval [1, 3) with 2 steps", mutated(_set("livenessClasses[1][0]", [1, 3])),
        "livenessClasses[1][0]", "interval [1, 3) is outside the steps [0, 2)"),
    Bad("interval-negative", "interval [-1, 1)", mutated(_set("livenessClasses[1][0]", [-1, 1])),
        "livenessClasses[1][0]", "interval [-1, 1) is outside the steps [0, 2)"),
    Bad("interval-reversed", "interval [2, 1)", mutated(_set("livenessClasses[1][0]", [2, 1])),
        "livenessClasses[1][0]", "interval [2, 1) ends before it starts"),
    # cycles
    Bad("program-cycle", "program 11 has child 10, its parent", mutated(_set("programs[0].children", [10])),
        "programs[1].children[0]", "program 11 is its own ancestor (cycle in the tree)"),
    Bad("program-self", "program 11 is its own child", mutated(_set("programs[0].children", [11])),
        "programs[0].children[0]", "program 11 is its own ancestor (cycle in the tree)"),
    Bad("context-cycle", "debug contexts 1 and 2 are each other's parent", mutated(_set("debugContexts[0].parent", 2)),
        "debugContexts[0].parent", "the parent links form a cycle"),
    Bad("context-self", "debug context 1 is its own parent", mutated(_set("debugContexts[0].parent", 1)),
        "debugContexts[0].parent", "the parent links form a cycle"),
    # huge numbers
    Bad("bytes-1e30", "variable bytes 10^30 (read as a float)",
        replaced('"bytes": [64, 32]', f'"bytes": [64, {BIG}]'), "variables.bytes[1]",
        "expected an integer, got number"),
    Bad("bytes-2e41", "variable bytes 2^41 (2 TiB)", mutated(_set("variables.bytes[1]", 2**41)),
        "variables.bytes[1]", f"size above {MAX_VALUE} bytes"),
    Bad("id-2e64", "variable id 2^64-1", mutated(_set("variables.id[1]", 2**64 - 1)), "variables.id[1]",
        "18446744073709551615 does not fit in a 64-bit integer"),
    Bad("var-ref-2e63", "program var id 2^63", mutated(_set("programs[0].vars[0]", 2**63)), "programs[0].vars[0]",
        "no variable has id 9223372036854775808"),
    Bad("tilevector-2e63", "a dense TileVector holds 2^63", mutated(_set("programs[0].cycles[0]", 2**63)),
        "programs[0].cycles", f"value 9223372036854775808 is implausibly large (limit {MAX_VALUE})"),
    Bad("tilevector-2e41", "a run value of 2^41", mutated(_set("programs[1].controlCode", {"runs": [[0, 4, 2**41]]})),
        "programs[1].controlCode.runs", f"value 2199023255552 is implausibly large (limit {MAX_VALUE})"),
    Bad("size-2e41", "vertex size 2^41", mutated(_set("vertexTypes[0].size", 2**41)), "vertexTypes[0].size",
        f"2199023255552 is above the maximum {MAX_VALUE}"),
    Bad("num-ipus-2e63", "numIpus 2^63", mutated(_set("target.numIpus", 2**63)), "target.numIpus",
        f"9223372036854775808 is above the maximum {MAX_VALUE}"),
    Bad("tiles-1e9", "tilesPerIpu 10^9", mutated(_set("target.tilesPerIpu", 10**9)), "target.tilesPerIpu",
        f"1000000000 tiles per IPU is beyond any IPU (limit {MAX_TILES})"),
    Bad("tiles-2e41", "tilesPerIpu 2^41", mutated(_set("target.tilesPerIpu", 2**41)), "target.tilesPerIpu",
        f"2199023255552 tiles per IPU is beyond any IPU (limit {MAX_TILES})"),
    # a positive clock too small to divide by: every time derived from it was infinite (issue 39)
    Bad("clock-1e-300", "clockFrequency 1e-300", mutated(_set("target.clockFrequency", 1e-300)),
        "target.clockFrequency", "1e-300 Hz is no IPU clock (expected 1000 to 1e+12 Hz)"),
]


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=[b.name for b in BAD_INPUTS])
def test_loader_names_file_place_and_problem(bad: Bad) -> None:
    err = raises_format_error(bad.make(), bad.filename)
    assert (err.path, err.where, err.problem) == (bad.filename, bad.where, bad.problem)
    assert str(err) == bad.message
    assert err.exit_code == 2


def test_catalogue_names_are_unique() -> None:
    names = [b.name for b in BAD_INPUTS]
    assert len(names) == len(set(names))


def test_huge_tile_count_is_refused_before_anything_is_built() -> None:
    # A dense vector of the wrong length would fail later; the error must come from
    # target.tilesPerIpu, before any per-tile array of 10**12 entries exists.
    doc = base_document()
    doc["target"]["tilesPerIpu"] = 10**12
    raw_doc = encode(doc)
    tracemalloc.start()
    try:
        err = raises_format_error(raw_doc, "big.json")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert err.where == "target.tilesPerIpu"
    assert peak < 4_000_000  # bytes: nothing per-tile was allocated (numpy reports to tracemalloc)
    doc["target"]["tilesPerIpu"] = MAX_TILES  # the limit itself is allowed (then the 4-entry vectors fail)
    err = raises_format_error(encode(doc), "big.json")
    assert (err.where, err.problem) == ("vertexTypes[0].codeBytes",
                                        f"dense TileVector has 4 entries; expected tilesPerIpu = {MAX_TILES}")


# -- the fallback parser (no orjson) --------------------------------------------

FALLBACK_CASES: list[tuple[str, bytes, str, str]] = [
    ("truncated", TRUNCATED, "line 1 column 32", "not valid JSON: Unterminated string starting at"),
    ("non-utf8", b'{"a": "\xff"}', "byte 7", "not UTF-8 text; a profile is UTF-8 JSON"),
    ("empty", b"", "", "empty file; a profile is one JSON object"),
    ("nan", b'{"a": NaN}', "", "not valid JSON: NaN is not a JSON number"),
    ("infinity", b'{"a": -Infinity}', "", "not valid JSON: -Infinity is not a JSON number"),
    ("deep", b"[" * 100_000 + b"]" * 100_000, "", "JSON nested too deeply"),
]


@pytest.mark.parametrize("raw_bytes,where,problem", [c[1:] for c in FALLBACK_CASES], ids=[c[0] for c in FALLBACK_CASES])
def test_fallback_json_parser_errors(monkeypatch: pytest.MonkeyPatch, raw_bytes: bytes, where: str,
                                     problem: str) -> None:
    monkeypatch.setitem(sys.modules, "orjson", None)  # makes `import orjson` fail
    err = raises_format_error(raw_bytes, "f.json")
    assert (err.where, err.problem) == (where, problem)


def test_fallback_parser_huge_digits_and_lone_surrogate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "orjson", None)
    # Python's int() refuses > 4300 digits with a ValueError that is not a JSONDecodeError.
    err = raises_format_error(b'{"a": ' + b"9" * 5000 + b"}", "f.json")
    assert err.where == "" and err.problem.startswith("not valid JSON: Exceeds the limit (4300 digits)")
    # json.loads turns "\ud800" into a lone surrogate, which cannot be UTF-8 encoded.
    text = encode(base_document()).replace(b'"act"', b'"a\\ud800"')
    err = raises_format_error(text, "f.json")
    assert (err.where, err.problem) == ("variables.name[1]", "not valid Unicode (a lone surrogate escape)")
    # Beyond int64 is a real int here (orjson would give a float).
    text = encode(base_document()).replace(b'"bytes": [64, 32]', f'"bytes": [64, {BIG}]'.encode())
    err = raises_format_error(text, "f.json")
    assert (err.where, err.problem) == ("variables.bytes[1]", f"{BIG} does not fit in a 64-bit integer")


def test_fallback_parser_loads_the_same_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = load_doc(base_document())
    monkeypatch.setitem(sys.modules, "orjson", None)
    assert_same_profile(load_doc(base_document()), expected)


# -- the CLI path -------------------------------------------------------------


def run_cli(bad: Bad, cache_dir: Path, *options: str) -> tuple[int, str, str]:
    """Run ``popliner [options] FILE`` in a scratch directory; (exit code, stdout, stderr)."""
    runner = CliRunner()
    with tempfile.TemporaryDirectory() as scratch:
        here = os.getcwd()
        os.chdir(scratch)  # the message names the file as given: a bare name
        try:
            Path(bad.filename).write_bytes(bad.make())
            result = runner.invoke(cli, [*options, bad.filename], env={"POPLINER_CACHE_DIR": str(cache_dir)})
        finally:
            os.chdir(here)
    return result.exit_code, result.stdout, result.stderr


CLI_CASES = ["empty", "top-array", "truncated", "non-utf8", "gzip-crc", "no-target", "child-nowhere",
             "program-cycle", "bytes-1e30", "tiles-1e9"]


@pytest.mark.parametrize("name", CLI_CASES)
def test_cli_prints_one_error_line_and_exits_2(name: str, tmp_path: Path) -> None:
    bad = next(b for b in BAD_INPUTS if b.name == name)
    code, out, err = run_cli(bad, tmp_path)
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    # At the default verbosity an info line about reading the file may come first;
    # the error itself is exactly one line, the last.
    lines = err.splitlines()
    assert [line for line in lines if line.startswith("popliner: error:")] == [f"popliner: error: {bad.message}"]
    assert lines[-1] == f"popliner: error: {bad.message}"
    assert all(line.startswith("popliner: reading ") for line in lines[:-1])


@pytest.mark.parametrize("name", CLI_CASES)
def test_cli_quiet_prints_only_the_error_line(name: str, tmp_path: Path) -> None:
    bad = next(b for b in BAD_INPUTS if b.name == name)
    assert run_cli(bad, tmp_path, "-q") == (2, "", f"popliner: error: {bad.message}\n")


def test_cli_missing_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, [str(tmp_path / "gone.json")], env={"POPLINER_CACHE_DIR": str(tmp_path)})
    assert result.exit_code == 2
    assert result.stderr == f"popliner: error: {tmp_path / 'gone.json'}: no such file\n"


# -- docs/bad-inputs.md is the CLI's real output --------------------------------

TABLE_START = "<!-- bad-inputs:start -->"
TABLE_END = "<!-- bad-inputs:end -->"


def schema_verdict(bad: Bad) -> str:
    """What the JSON Schema says of a bad input: rejects, accepts, or n/a when it is not JSON text."""
    if bad.suffix.endswith(".gz"):
        return "n/a"  # the schema sees documents, not files
    try:
        doc = json.loads(bad.make().decode("utf-8"), parse_constant=lambda name: 1 / 0)
    except (ValueError, ZeroDivisionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return "n/a"
    return "accepts" if schema_validator().is_valid(doc) else "rejects"


def schema_validator() -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(load_schema())


def render_bad_inputs_table(cache_dir: Path) -> str:
    """The markdown table of every bad input with what ``popliner -q FILE`` prints."""
    lines = ["| # | bad input | file | exit | message on stderr | JSON Schema |", "|---|---|---|---|---|---|"]
    for k, bad in enumerate(BAD_INPUTS, 1):
        code, _, err = run_cli(bad, cache_dir, "-q")
        message = err.rstrip("\n").replace("|", "\\|")
        lines.append(f"| {k} | {bad.what} | `{bad.filename}` | {code} | `{message}` | {schema_verdict(bad)} |")
    return "\n".join(lines)


def test_bad_inputs_doc_matches_the_cli(tmp_path: Path) -> None:
    text = BAD_INPUTS_DOC.read_text(encoding="utf-8")
    block = text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip()
    assert block == render_bad_inputs_table(tmp_path), "regenerate with: python scripts/docs.py"


# -- the JSON Schema ------------------------------------------------------------


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    jsonschema.Draft202012Validator.check_schema(load_schema())
    return schema_validator()


def test_schema_is_package_data() -> None:
    path = schema_path()
    assert path.name == "profile-v1.schema.json"
    assert json.loads(path.read_text(encoding="utf-8"))["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert "referential integrity" in load_schema()["description"]


def test_schema_accepts_tiny_and_the_base_document(validator: jsonschema.protocols.Validator) -> None:
    assert list(validator.iter_errors(json.loads(TINY.read_text()))) == []
    assert list(validator.iter_errors(base_document())) == []


# Structural mutations (a missing key, a wrong type) that the schema alone must catch.
SCHEMA_REJECTS = [b for b in BAD_INPUTS if b.name.startswith(("no-", "string-for", "bool-for", "float-for",
                                                              "object-for", "list-for", "null-name", "negative-",
                                                              "wrong-format", "version-", "bad-", "tiles-"))]


@pytest.mark.parametrize("bad", SCHEMA_REJECTS, ids=[b.name for b in SCHEMA_REJECTS])
def test_schema_rejects_structural_mutations(bad: Bad, validator: jsonschema.protocols.Validator) -> None:
    assert not validator.is_valid(json.loads(bad.make()))


def test_schema_cannot_see_references(validator: jsonschema.protocols.Validator) -> None:
    # What the schema's description promises: ids pointing nowhere pass the schema.
    for name in ("child-nowhere", "var-nowhere", "program-cycle", "interval-past-steps", "dense-short"):
        bad = next(b for b in BAD_INPUTS if b.name == name)
        assert validator.is_valid(json.loads(bad.make())), name


if __name__ == "__main__":  # python -m tests.test_loader > table.md
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        print(render_bad_inputs_table(Path(scratch)))

"""The fast column reader gives exactly what the ordinary JSON path gives, or steps aside."""

from __future__ import annotations

import copy
import dataclasses
import gzip
import hashlib
import json
from typing import Any

import numpy as np
import pytest

from popliner.errors import ProfileFormatError
from popliner.profile import columns
from popliner.profile.builder import Builder
from popliner.profile.columns import PIECE_BYTES, extract_columns, parse_uint_list
from popliner.profile.jsontext import parse_json
from popliner.profile.loader import parse_profile_bytes
from popliner.synth import preset_spec, write_profile


def compact(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def slow(text: bytes) -> Any:
    return Builder(parse_json(text, "t.json"), "t.json", hashlib.sha256(text).hexdigest()).build()


def same(a: Any, b: Any, where: str = "profile") -> None:
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), where
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            if f.init and f.name != "names":
                same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    else:
        assert a == b, where


@pytest.mark.parametrize(("body", "expected"), [
    (b"", []), (b"0", [0]), (b"7,0,12", [7, 0, 12]), (b"0,0", [0, 0]), (b"9223372036854775806", [2**63 - 2]),
    # JSON whitespace around the items (json.dumps's ", ", indent's newlines, tabs, carriage returns).
    (b" ", []), (b"\n  ", []), (b"1 ,2", [1, 2]), (b"7, 0, 12", [7, 0, 12]), (b"\n  7,\n  0,\n  12\n ", [7, 0, 12]),
    (b"\t1,\r\n2", [1, 2]),
])
def test_integer_lists(body: bytes, expected: list[int]) -> None:
    out = parse_uint_list(body)
    assert out is not None and out.dtype == np.int64 and out.tolist() == expected


@pytest.mark.parametrize("body", [b"01", b"1,02", b"1,,2", b",1", b"1,", b"-1", b"1.5", b"1e3",
                                  b"99999999999999999999", b"9223372036854775807",
                                  # whitespace inside a number, around an empty item, or not JSON's (\v, \f)
                                  b"1 2", b" ,1", b"1, ,2", b"1 , ", b", ", b"0 1", b"1,\v2", b"1,\f2", b"\v"])
def test_integer_lists_left_to_the_json_parser(body: bytes) -> None:
    assert parse_uint_list(body) is None


@pytest.fixture(scope="module")
def tiny_text(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("columns") / "tiny.json.gz"
    write_profile(preset_spec("bert-tiny", "training"), path, force=True)
    return gzip.decompress(path.read_bytes())


def test_synthetic_profile_same_either_way(tiny_text: bytes) -> None:
    assert extract_columns(tiny_text) is not None
    fast = parse_profile_bytes(tiny_text, "t.json")
    assert fast.variables.names.pad == 3  # the shortcut was taken
    ref = slow(tiny_text)
    same(fast, ref)
    v, w = fast.variables, ref.variables
    assert [v.name(i) for i in range(v.count)] == [w.name(i) for i in range(w.count)]


def _variants(doc: dict[str, Any]) -> list[tuple[str, bytes]]:
    """Documents the shortcut must not change: odd but valid, or invalid."""
    text = compact(doc)
    first_vars = next(p for p in doc["programs"] if p.get("vars"))
    out = [
        ("leading zero", text.replace(b'"bytes":[', b'"bytes":[0', 1)),
        ("negative size", text.replace(b'"bytes":[', b'"bytes":[-', 1)),
        ("escaped name", text.replace(b'"name":["', b'"name":["\\u00e9', 1)),
        ("non-ascii name", text.replace(b'"name":["', '"name":["\u00e9'.encode(), 1)),
        ("name with bracket", text.replace(b'"name":["', b'"name":["]', 1)),
        ("brackets inside names", text.replace(b'"name":["', b'"name":["x[0]","a]b]","', 1).replace(
            b'"tile":[', b'"tile":[0,0,', 1).replace(b'"bytes":[', b'"bytes":[1,1,', 1).replace(
            b'"class":[', b'"class":[0,0,', 1).replace(b'"id":[', b'"id":[99999998,99999999,', 1)),
        ("spaced list", text.replace(b'"vars":[', b'"vars": [', 1)),
        ("vars elsewhere", text.replace(b'"source":{', b'"source":{"vars":[1],', 1)),
        ("names too short", text.replace(b'"name":["', b'"name":["x","', 1)),
        ("float id", text.replace(b'"vars":[', b'"vars":[1.0,', 1)),
        ("unknown variable", text.replace(b'"vars":[', b'"vars":[123456789,', 1)),
        ("no names", compact(doc | {"variables": {k: v for k, v in doc["variables"].items() if k != "name"}})),
        ("tile out of range", text.replace(b'"tile":[', b'"tile":[100000', 1)),
    ]
    assert first_vars
    return out


def _agrees(label: str, text: bytes, piece: int = PIECE_BYTES) -> None:
    """The loader gives what the ordinary path gives: the same profile and names, or the same error."""
    try:
        ref: Any = slow(text)
    except ProfileFormatError as exc:
        with pytest.raises(ProfileFormatError) as got:
            parse_profile_bytes(text, "t.json", piece=piece)
        assert str(got.value) == str(exc), label
        return
    fast = parse_profile_bytes(text, "t.json", piece=piece)
    same(fast, ref, label)
    v, w = fast.variables, ref.variables
    assert [v.name(i) for i in range(v.count)] == [w.name(i) for i in range(w.count)], label


# The odd documents, each read both ways: in the slow step (main suite time, about 10 s on a quiet machine).
@pytest.mark.slow
def test_shortcut_steps_aside_or_agrees(tiny_text: bytes, piece: int = PIECE_BYTES) -> None:
    doc = json.loads(tiny_text)
    for label, text in _variants(doc):
        assert text != compact(doc), label
        _agrees(label, text, piece)


def _indented_variants(doc: dict[str, Any]) -> list[tuple[str, bytes]]:
    """Odd or invalid indented documents: the separators, whitespace and keys the spaced reader looks at."""
    text = json.dumps(doc, indent=1).encode()
    names = b'"name": [\n   "'

    def between_names(new: bytes) -> bytes:
        """The separator after the second name replaced by ``new`` (the first one sets the layout)."""
        at = text.index(b'",\n   "', text.index(b'",\n   "', text.index(names)) + 1)
        return text[:at] + new + text[at + 6 :]

    return [
        ("one separator longer", between_names(b'",\n    "')),
        ("space before a comma", between_names(b'" ,\n   "')),
        ("vertical tab between names", between_names(b'",\v   "')),
        ("a tab for a space between names", between_names(b'",\n  \t"')),
        ("newline in a name", text.replace(names, names + b"a\nb", 1)),
        ("tab in a name", text.replace(names, names + b"\t", 1)),
        ("separator in a name", text.replace(names, names + b'x",\n   "', 1)),
        ("non-ascii name", text.replace(names, names + "\u00e9".encode(), 1)),
        ("invalid utf-8 name", text.replace(names, names + b"\xff", 1)),
        ("vertical tab between numbers", text.replace(b'"bytes": [\n   ', b'"bytes": [\v', 1)),
        ("form feed in a vars list", text.replace(b'"vars": [\n', b'"vars": [\f', 1)),
        ("space inside a number", text.replace(b'"bytes": [\n   2', b'"bytes": [\n   2 ', 1)),
        ("empty vars list of spaces", text.replace(b'"vars": [\n    0,\n    1,', b'"vars": [ ], "x": [0,', 1)),
        ("a value spelt like the keys", text.replace(b'"source": {', b'"source": {"a": "variables", "b": "vars",', 1)),
        ("spaced keys", text.replace(b'"vars": [', b'"vars"\n :\t[', 2).replace(b'"name": [', b'"name" : [', 1)),
        ("names of one item", json.dumps(_one_variable(doc), indent=1).encode()),
    ]


def _one_variable(doc: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out["variables"] = {k: v[:1] for k, v in doc["variables"].items()}
    for p in out["programs"]:
        if "vars" in p:
            p["vars"] = [x for x in p["vars"] if x == out["variables"]["id"][0]]
    return out


@pytest.mark.slow  # as test_shortcut_steps_aside_or_agrees
def test_spaced_shortcut_steps_aside_or_agrees(tiny_text: bytes) -> None:
    doc = json.loads(tiny_text)
    read = {"non-ascii name", "empty vars list of spaces", "a value spelt like the keys", "spaced keys",
            "names of one item"}
    for label, text in _indented_variants(doc):
        assert text != json.dumps(doc, indent=1).encode(), label
        # Valid and regular: the column reader takes these (the others it leaves, or the builder refuses).
        assert (extract_columns(text) is not None) == (label in read or label == "separator in a name"), label
        _agrees(label, text)


# Pieces of 512 bytes in the main suite (half the time of 64-byte ones); the smaller ones, which cut far more
# tokens, in the slow step.
@pytest.mark.parametrize("piece", [pytest.param(1, marks=pytest.mark.slow), pytest.param(5, marks=pytest.mark.slow),
                                   pytest.param(64, marks=pytest.mark.slow), 512])
def test_small_pieces_read_the_same(tiny_text: bytes, piece: int) -> None:
    """Integer lists cut into pieces and names scanned in pieces give the same profile, compact or indented."""
    fast = parse_profile_bytes(tiny_text, "t.json", piece=piece)
    assert fast.variables.names.pad == 3  # the shortcut was taken
    same(fast, slow(tiny_text))
    test_spaced_and_indented_profiles_read_the_same(tiny_text, {"indent": 1}, 7, piece)


# The odd documents read in pieces: in the slow step (suite time, about 10 s in pieces of 64 bytes).
@pytest.mark.slow
@pytest.mark.parametrize("piece", [1, 5, 64])
def test_small_pieces_step_aside_or_agree(tiny_text: bytes, piece: int) -> None:
    """Odd but valid, or invalid, documents read in pieces give the same profile, or the same refusal."""
    test_shortcut_steps_aside_or_agrees(tiny_text, piece)


@pytest.mark.parametrize("body", [
    b"", b"0", b"7,0,12", b"10,200,3000,4,5,66,777", b"1,,2", b",1,2,3", b"1,2,3,", b"1,2,03", b"1,2,-3",
    b"12345678901,2", b"1 ,2", b"1 2,3", b"1, ,2", b" 1,\n 2 ",
    b"9223372036854775807,1", b"1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20",
])
@pytest.mark.parametrize("piece", [1, 2, 3, 7, 1 << 23])
def test_integer_lists_in_pieces(body: bytes, piece: int) -> None:
    text = b"[" + body + b"]"
    whole = parse_uint_list(body)
    got = columns._parse_span(text, 1, len(text) - 1, piece=piece)
    assert (got is None) == (whole is None)
    if whole is not None and got is not None:
        assert got.dtype == np.int64 and got.tolist() == whole.tolist()
    # The same items spread over several program lists, joined a few bytes at a time.
    parts = [b"[" + part + b"]" for part in body.split(b";")] + [b"[]", b"[5,6]"]
    joined = b"".join(parts)
    bodies, at = [], 0
    for part in parts:
        bodies.append((at + 1, at + len(part) - 1))
        at += len(part)
    expected = parse_uint_list(b",".join(joined[a:b] for a, b in bodies if b > a))
    count = sum(joined.count(b",", a, b) + 1 for a, b in bodies if b > a)
    filled = columns._fill(np.empty(count, np.int64), columns._joined(joined, bodies, piece))
    assert (filled is None) == (expected is None)
    if expected is not None and filled is not None:
        assert filled.tolist() == expected.tolist()


@pytest.mark.parametrize(("layout", "pad"), [({"indent": 1}, 7), ({"indent": "\t"}, 7), ({}, 4),
                                            ({"separators": (" , ", " : ")}, 5)])
def test_spaced_and_indented_profiles_read_the_same(tiny_text: bytes, layout: dict[str, Any], pad: int,
                                                    piece: int = PIECE_BYTES) -> None:
    """What json.dumps writes with spaces or indentation is read by the column reader, to the same profile."""
    doc = json.loads(tiny_text)
    pretty = json.dumps(doc, **layout).encode()
    assert extract_columns(pretty, piece=piece) is not None
    got = parse_profile_bytes(pretty, "t.json", piece=piece)
    # The names' separator and their two quotes: ",\n" and three spaces or tabs (the list is three deep),
    # ", " or " , ".
    assert got.variables.names.pad == pad
    same(dataclasses.replace(got, sha256=""), dataclasses.replace(parse_profile_bytes(tiny_text, "t.json"), sha256=""))
    v, w = got.variables, slow(tiny_text).variables
    assert [v.name(i) for i in range(v.count)] == [w.name(i) for i in range(w.count)]


def test_name_table_reads_and_finds_the_same_in_every_form() -> None:
    from popliner.profile.model import NameTable

    names = [b"a__re", b"", b"x__re_y", b"__re.1", b"plain", b"__", b"re", b"b__re__re"]
    ptr = np.zeros(len(names) + 1, np.int64)
    np.cumsum([len(n) for n in names], out=ptr[1:])
    contiguous = NameTable(np.frombuffer(b"".join(names), np.uint8), ptr)
    quoted = b"[" + b",".join(b'"' + n + b'"' for n in names) + b"]"
    cut = NameTable(np.frombuffer(quoted[1:-1], np.uint8), ptr, lead=1, pad=3)
    # Packed in 3-byte chunks: names and matches straddle chunk boundaries.
    for table in (contiguous, cut, contiguous.packed(3), cut.packed(3)):
        assert [table.get(i) for i in range(len(names))] == names
        # By hand: (name, offset) of each "__re" wholly inside one name.
        assert table.find(b"__re") == [(0, 1), (2, 1), (3, 0), (7, 1), (7, 5)]


def test_recompute_tensors_by_hand_in_every_form() -> None:
    from popliner.profile.model import NameTable, recompute_tensors

    names = ["a__re", "", "x__re_y", "__re.1", "plain", "b__reX__re", "c__re__re7", "d__re\u00e9", "e__re\u00d7",
             "f__re/g", "__r", "h__re1"]
    # By hand: "__re" then the end, or a byte that is not a letter, digit or "_" read as Latin-1
    # (U+00E9 starts with byte 0xC3, a letter; U+00D7 also starts with 0xC3).
    expected = [True, False, False, True, False, True, False, False, False, True, False, False]
    raw = [n.encode() for n in names]
    ptr = np.zeros(len(raw) + 1, np.int64)
    np.cumsum([len(n) for n in raw], out=ptr[1:])
    contiguous = NameTable(np.frombuffer(b"".join(raw), np.uint8), ptr)
    quoted = b",".join(b'"' + n + b'"' for n in raw)
    cut = NameTable(np.frombuffer(quoted, np.uint8), ptr, lead=1, pad=3)
    for table in (contiguous, cut, contiguous.packed(5), cut.packed(5)):
        got = recompute_tensors(table)
        assert got.dtype == np.bool_ and got.tolist() == expected


def test_recompute_tensors_found_at_load_either_way(tiny_text: bytes) -> None:
    doc = json.loads(tiny_text)
    names = doc["variables"]["name"]
    names[0], names[3], names[5] = "w__re", "w__re_x", "w/__re:0"
    text = compact(doc)
    fast = parse_profile_bytes(text, "t.json")
    assert fast.variables.names.pad == 3  # the shortcut was taken
    want = np.zeros(len(names), bool)
    want[[0, 5]] = True
    assert fast.variables.recompute_tensor.tolist() == want.tolist()
    assert slow(text).variables.recompute_tensor.tolist() == want.tolist()


def _tilevector_forms(tiles: int) -> list[tuple[str, Any]]:
    """TileVectors in every form the profile may hold: the bulk reader must agree or step aside."""
    return [
        ("dense", [k % 3 for k in range(tiles)]),
        ("sparse", {"sparse": [[0, 5], [2, 0], [tiles - 1, 7]]}),
        ("zero run", {"runs": [[0, 1, 0], [1, tiles, 4]]}),
        ("empty runs", {"runs": []}),
        ("runs out of order", {"runs": [[2, 3, 1], [0, 1, 1]]}),
        ("sparse out of order", {"sparse": [[3, 1], [1, 1]]}),
        ("run past the tiles", {"runs": [[0, tiles + 1, 1]]}),
        ("float value", {"runs": [[0, 1, 1.5]]}),
        ("boolean value", {"runs": [[0, 1, True]]}),
        ("huge value", {"runs": [[0, 1, 2**70]]}),
        ("two keys", {"runs": [], "sparse": []}),
        ("dense too short", [1, 2]),
        ("not a tilevector", "7"),
    ]


def _one_by_one(rows: list[int], objs: list[Any], keys: list[int] | None, n: int, tiles: int) -> Any:
    """The reference: each TileVector through the one-by-one decoder (its error's words when it refuses)."""
    from popliner.profile.tilevector import RunTableBuilder, decode_tilevector

    out = RunTableBuilder(keyed=keys is not None)
    try:
        for row in range(n):
            for at in [k for k, r in enumerate(rows) if r == row]:
                first, stop, value = decode_tilevector(objs[at], tiles, "x", _fail)
                out.add(first, stop, value, None if keys is None else [keys[at]] * len(first))
            out.end_row()
    except AssertionError as exc:
        return str(exc)
    return out.build()


@pytest.mark.parametrize("keyed", [False, True], ids=["control code", "vertices"])
def test_bulk_program_reading_agrees_with_the_reference(keyed: bool) -> None:
    """Each TileVector table read in bulk gives what the one-by-one reference decoder gives, or steps aside
    (then the reference reads it, and words any error); the usual forms are taken in bulk."""
    from popliner.profile import programs

    tiles, taken = 5, set()
    for label, vec in _tilevector_forms(tiles):
        # A table of three programs: the vector in the middle one (beside a plain run for vertices).
        objs = [vec, {"runs": [[0, 1, 3]]}] if keyed else [vec]
        rows, keys = ([1, 1], [4, 2]) if keyed else ([1], None)
        got = programs.bulk_runs(rows, objs, keys, 3, tiles)
        want = _one_by_one(rows, objs, keys, 3, tiles)
        if got is None:
            continue
        assert not isinstance(want, str), (label, want)  # taken in bulk, but the reference refuses it
        for name in ("ptr", "first", "stop", "value", "key"):
            a, b = getattr(got, name), getattr(want, name)
            assert (a is None) == (b is None) and (a is None or a.tolist() == b.tolist()), (label, name)
        taken.add(label)
    assert taken == {"dense", "sparse", "zero run", "empty runs"}


@pytest.mark.parametrize("body", [b"7,0,12", b"2147483647,0,1", b"1,2147483648,3", b"0,1,2,3,9223372036854775806", b" ",
                                  b"1, 2,\n 3", b"1,,2"])
@pytest.mark.parametrize("piece", [1, 3, 1 << 23])
def test_tiles_and_classes_read_as_int32_when_they_fit(body: bytes, piece: int) -> None:
    """The narrow columns: int32 when every value fits (2**31 - 1 does, 2**31 does not), else int64; same values."""
    text = b"[" + body + b"]"
    got = columns._parse_span(text, 1, len(text) - 1, np.int32, piece)
    wide = parse_uint_list(body)
    assert (got is None) == (wide is None)
    if got is not None and wide is not None:
        assert got.tolist() == wide.tolist()
        fits = not len(wide) or int(wide.max()) < 2**31
        assert got.dtype == (np.int32 if fits else np.int64)


def test_a_tile_beyond_int32_is_refused_in_the_same_words(tiny_text: bytes) -> None:
    # The first tile number gets 2147483648 in front of its digits: far beyond int32 and any tile.
    text = compact(json.loads(tiny_text)).replace(b'"tile":[', b'"tile":[2147483648', 1)
    with pytest.raises(ProfileFormatError, match=r"variables\.tile\[0\].*tile outside"):
        slow(text)
    _agrees("tile beyond int32", text)


@pytest.mark.parametrize("tiles", [1, 2, 7, 64])
def test_dense_tilevectors_in_bulk_give_the_reference_runs(tiles: int) -> None:
    """Dense vectors turned into runs all at once (a few per chunk here, so chunks meet) agree with the
    one-by-one decoder, mixed with the other forms, zero runs dropped, rows without a vector empty."""
    from popliner.profile import programs
    from popliner.profile.tilevector import RunTableBuilder, decode_tilevector

    rng = np.random.default_rng(tiles)
    objs: list[Any] = []
    rows: list[int] = []
    for row in range(40):
        if row % 5 == 4:
            continue  # a program without this vector
        rows.append(row)
        if row % 7 == 3:
            objs.append({"sparse": [[tiles - 1, 5]]})
        else:
            objs.append([int(v) for v in rng.choice([0, 0, 3, 2**40], size=tiles)])
    got = programs.bulk_runs(rows, objs, None, 40, tiles, chunk_cells=3 * tiles)
    assert got is not None
    want = RunTableBuilder(keyed=False)
    for row in range(40):
        if row in rows:
            want.add(*decode_tilevector(objs[rows.index(row)], tiles, "x", _fail), None)
        want.end_row()
    expected = want.build()
    for name in ("ptr", "first", "stop", "value"):
        assert getattr(got, name).tolist() == getattr(expected, name).tolist(), name
    assert int(got.ptr[-1]) > 0


@pytest.mark.parametrize("bad", [[1, 2.0], [1, True], [1, -1], [1, 2**41], [1, 2**64], [1]])
def test_dense_tilevectors_the_bulk_reader_does_not_take(bad: list[Any]) -> None:
    """Floats, booleans, negative, huge values and wrong lengths step aside to the reference decoder."""
    from popliner.profile import programs

    assert programs.bulk_runs([0, 1], [[0, 0], bad], None, 2, 2) is None


def _fail(where: str, problem: str) -> Exception:
    return AssertionError(f"{where}: {problem}")

"""Issue 37: a check's result file, a baseline to compare with, growth limits, and CI's language.

Every case runs on two generated profiles of the same model, the second with
a longer sequence (its activations grow), for two models of different
families, naming and mode. Expected growths are the check's own per-IPU
figures of two separate runs, subtracted here; expected percentages and
limits are worked out here from those.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import cmarkgfm
import jsonschema
import pytest

from popliner.check import check_config
from popliner.checkfile import read_record
from popliner.checkrecord import check_record
from popliner.cli.configured import analysis_for_config
from popliner.config.yaml_io import read_config
from popliner.textsafe import shown
from popliner.writers.check_md import code
from tests.helpers import invoke
from tests.hostile_names import HOSTILE_CHARACTERS, LAYER_REGEX, write_hostile

REPO = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((REPO / "popliner" / "profile" / "check-result-v1.schema.json").read_text(encoding="utf-8"))

#: (name, synth options, the longer sequence): an encoder in inference named as PopART names it, and a decoder
#: in training named as PopTorch names it, with recomputation so that two IPUs hold it.
MODELS = {
    "bert-inference": (("--preset", "bert-tiny"), "160"),
    "gpt2-training": (("--preset", "gpt2-tiny", "--mode", "training", "--framework", "poptorch", "--recompute",
                       "every-layer"), "144"),
}


@dataclass(frozen=True)
class Pair:
    folder: Path
    small: Path  # the profile at the preset's sequence length
    large: Path  # the same model with a longer sequence
    config: Path  # the split of the small one over 2 IPUs
    base: Path  # `check -o` of the config on the small profile


@pytest.fixture(scope="module", params=sorted(MODELS))
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Pair:
    options, seq = MODELS[request.param]
    folder = tmp_path_factory.mktemp(request.param)
    small, large = folder / "model.json.gz", folder / "model-long.json.gz"
    invoke("synth", *options, "-o", small)
    invoke("synth", *options, "--seq", seq, "-o", large)
    config = folder / "pipeline.yaml"
    invoke(small, "--solve", "--num-ipus", "2", "--config-out", config)
    base = folder / "base.json"
    invoke("check", config, "--profile", small, "-o", base)
    return Pair(folder, small, large, config, base)


def _ipus(result_file: Path) -> list[dict[str, object]]:
    ipus: list[dict[str, object]] = json.loads(result_file.read_text())["ipus"]
    return ipus


def _growth(pair: Pair) -> list[tuple[int, int, int]]:
    """Per IPU: (ipu, baseline worst-tile bytes, growth), from two runs of the check, subtracted here."""
    large = pair.folder / "large.json"
    if not large.exists():
        invoke("check", pair.config, "--profile", pair.large, "-o", large)
    return [(int(str(a["ipu"])), int(str(a["worst_tile_bytes"])), int(str(b["worst_tile_bytes"]))
             - int(str(a["worst_tile_bytes"]))) for a, b in zip(_ipus(pair.base), _ipus(large))]


def _growth_words(base: int, growth: int) -> str:
    return f"grew by {growth:,} bytes ({growth / base * 100:+.2f}%)"


# ------------------------------------------------------------------------------------------ the result file


def test_the_result_file_holds_the_checks_figures_and_its_schema(pair: Pair) -> None:
    doc = json.loads(pair.base.read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    # Independently: the check's library result, IPU by IPU.
    cfg = read_config(pair.config)
    analysis = analysis_for_config(str(pair.config), str(pair.small), cfg.mode, cfg.options, {},
                                   layer_groups=cfg.layer_groups, recorded_layers=cfg.layer_options)
    budget = cfg.effective_budget
    result = check_config(analysis, cfg, str(pair.config), budget=budget)
    assert doc["budget_bytes_per_tile"] == budget and doc["fits"] is result.fits is True
    assert doc["profile"]["sha256"] == analysis.profile.sha256
    for ipu, stage in zip(doc["ipus"], result.ipus):
        assert ipu["layers"] == list(stage.layers)
        assert (ipu["worst_tile"], ipu["worst_tile_bytes"]) == (stage.worst_tile, stage.worst_tile_bytes)
        assert ipu["headroom_bytes"] == budget - ipu["worst_tile_bytes"] >= 0
        # The components add up to the worst tile.
        assert sum(ipu["worst_tile_components"].values()) == ipu["worst_tile_bytes"]
        assert ipu["copy_buffer_bytes_per_tile"] == ipu["worst_tile_components"]["copy_buffers"] > 0
        live = ipu["largest_live_variables"]
        assert 0 < len(live) <= 10 and [v["bytes"] for v in live] == sorted((v["bytes"] for v in live), reverse=True)
    # The layers' figures are the layer table's (the CSV the main command prints).
    table = invoke(pair.small, "--head-placement", cfg.layout.placement).stdout.splitlines()
    rows = {line.split(",")[0]: line.split(",") for line in table[1:]}
    header = table[0].split(",")
    total, worst = header.index("Total (bytes)"), header.index("Worst-tile bytes")
    for ipu in doc["ipus"]:
        for layer in ipu["layer_bytes"]:
            row = rows[layer["layer"]]
            assert (layer["total_bytes"], layer["worst_tile_bytes"]) == (int(row[total]), int(row[worst]))
    # Read back, it is the record the check made.
    assert read_record(str(pair.base)) == check_record(analysis, result, cfg, budget_fraction=None)


def test_the_same_inputs_give_the_same_bytes(pair: Pair) -> None:
    again = pair.folder / "again.json"
    invoke("check", pair.config, "--profile", pair.small, "-o", again, "-f")
    assert again.read_bytes() == pair.base.read_bytes()


# ------------------------------------------------------------------------------------------ the baseline


def test_a_profile_against_its_own_result_passes(pair: Pair) -> None:
    out = invoke("check", pair.config, "--profile", pair.small, "--baseline", pair.base, "--max-growth", "0.01")
    lines = out.stdout.splitlines()
    for ipu, base, _ in _growth(pair):
        assert re.search(rf"^\s*{ipu}\s+{base:,}\s+{base:,}\s+0\s+\+0\.00%\s.*\sunchanged$", out.stdout, re.M), lines
    assert lines[-1] == "no IPU grew"


def test_the_longer_sequence_over_max_growth_fails_naming_the_growth_per_ipu(pair: Pair) -> None:
    growth = _growth(pair)
    assert all(g > 0 for _, _, g in growth)  # a longer sequence: more activation memory on every IPU
    out = invoke("check", pair.config, "--profile", pair.large, "--baseline", pair.base, "--max-growth", "0.01",
                 ok=(1,))
    expected = [f"IPU {ipu} {_growth_words(base, g)}, more than --max-growth 0.01 allows {int(0.01 * base):,} bytes"
                for ipu, base, g in growth if g > int(0.01 * base)]
    assert expected  # the pair grows beyond 1% somewhere
    assert out.stderr.splitlines()[-1] == "popliner: " + "; ".join(expected)
    assert out.stdout.splitlines()[-1] == "growth beyond the limit: " + "; ".join(expected)


def test_growth_within_the_limits_passes_and_says_so(pair: Pair) -> None:
    growth = _growth(pair)
    most = max(g for _, _, g in growth)
    out = invoke("check", pair.config, "--profile", pair.large, "--baseline", pair.base,
                 "--max-growth-bytes", most)
    assert out.stdout.splitlines()[-1] == (f"growth, within --max-growth-bytes {most}: "
                                           + ", ".join(f"IPU {i} {_growth_words(b, g)}" for i, b, g in growth))
    # One byte less is beyond it for the IPU that grew most, and only for it.
    failed = invoke("check", pair.config, "--profile", pair.large, "--baseline", pair.base,
                    "--max-growth-bytes", most - 1, ok=(1,))
    assert failed.stderr.splitlines()[-1].count("more than --max-growth-bytes") == sum(g == most for *_, g in growth)


def test_a_shrink_passes_and_says_so(pair: Pair) -> None:
    _growth(pair)  # writes large.json
    out = invoke("check", pair.config, "--profile", pair.small, "--baseline", pair.folder / "large.json",
                 "--max-growth", "0")
    assert out.stdout.splitlines()[-1].startswith("no IPU grew (IPU 0 shrank by ")
    assert " shrank" in out.stdout and "grew by" not in out.stdout


def test_the_layers_and_variables_that_grew_most_are_named(pair: Pair) -> None:
    growth = _growth(pair)
    out = invoke("check", pair.config, "--profile", pair.large, "--baseline", pair.base).stdout
    small, large = _ipus(pair.base), _ipus(pair.folder / "large.json")
    for (ipu, *_), a, b in zip(growth, small, large):
        then = {r["layer"]: r["total_bytes"] for r in a["layer_bytes"]}  # type: ignore[index, union-attr]
        now = {r["layer"]: r["total_bytes"] for r in b["layer_bytes"]}  # type: ignore[index, union-attr]
        top = max(now, key=lambda x: (abs(now[x] - then[x]), x))
        assert f"    {top}: {then[top]:,} -> {now[top]:,} ({now[top] - then[top]:+,})" in out
        variables = {v["name"]: v["bytes"] for v in a["largest_live_variables"]}  # type: ignore[index, union-attr]
        both = [(v["name"], variables[v["name"]], v["bytes"]) for v in b["largest_live_variables"]  # type: ignore
                if v["name"] in variables and v["bytes"] != variables[v["name"]]]
        name, was, is_ = max(both, key=lambda t: abs(t[2] - t[1]))
        assert f"    {name}: {was:,} -> {is_:,} ({is_ - was:+,})" in out, ipu


def test_a_different_split_is_reported_not_refused(pair: Pair, tmp_path: Path) -> None:
    cfg = read_config(pair.config)
    first = [name for name in cfg.stages[0].layers if name != "head"]  # a wrapped (tied) head stays on IPU 0
    other = tmp_path / "moved.yaml"
    # Another boundary: one layer earlier (the first IPU's last layer moves to the second; the first keeps one).
    assert len(first) >= 2
    invoke(pair.small, "--solve", "--num-ipus", "2", "--split-after", first[-2], "--config-out", other)
    moved = read_config(other).layer_groups
    assert moved != cfg.layer_groups
    out = invoke("check", other, "--profile", pair.small, "--baseline", pair.base).stdout
    for k, (then, now) in enumerate(zip(cfg.layer_groups, moved)):
        added, removed = [x for x in now if x not in then], [x for x in then if x not in now]
        parts = ([f"now also {', '.join(added)}"] if added else []) + (
            [f"no longer {', '.join(removed)}"] if removed else [])
        line = f"IPU {k}: the split differs from the baseline's: {'; '.join(parts)}"
        assert (line in out.splitlines()) == bool(parts), line


@pytest.mark.parametrize(("content", "needle"), [
    (None, "no such file"),
    (b"{not json", "not valid JSON"),
    (b"[]", "not a JSON object"),
    (b'{"format": "popliner-profile", "version": 1}', "not a popliner check result"),
    (b'{"format": "popliner-check", "version": 2}', "result format version 2"),
    (b"\xff\xfe", "not UTF-8"),
])
def test_a_missing_or_unreadable_baseline_is_one_line_and_exit_2(pair: Pair, tmp_path: Path, content: bytes | None,
                                                                  needle: str) -> None:
    baseline = tmp_path / "old.json"
    if content is not None:
        baseline.write_bytes(content)
    out = tmp_path / "summary.md"
    r = invoke("check", pair.config, "--profile", pair.small, "--baseline", baseline, "-o", out, ok=(2,))
    assert r.stderr.count("\n") == 1 and str(baseline) in r.stderr and needle in r.stderr
    assert not out.exists() and r.stdout == ""


def test_an_incompatible_baseline_is_one_line_and_exit_2(pair: Pair, tmp_path: Path) -> None:
    doc = json.loads(pair.base.read_text())
    broken = tmp_path / "broken.json"
    del doc["ipus"][1]["worst_tile_bytes"]
    broken.write_text(json.dumps(doc))
    r = invoke("check", pair.config, "--profile", pair.small, "--baseline", broken, ok=(2,))
    assert r.stderr.strip().endswith(f"{broken} at ipus[1].worst_tile_bytes: missing; give a result file popliner "
                                     "wrote")
    three = tmp_path / "three.yaml"
    invoke(pair.small, "--solve", "--num-ipus", "3", "--exact-ipus", "--config-out", three)
    r = invoke("check", three, "--profile", pair.small, "--baseline", pair.base, ok=(2,))
    last = r.stderr.splitlines()[-1]
    assert last.startswith(f"popliner: error: {pair.base}: the baseline checks 2 IPUs, this check 3; ")
    assert r.stderr.count("error:") == 1
    r = invoke("check", pair.config, "--profile", pair.small, "--max-growth", "0.01", ok=(2,))
    assert "--max-growth needs --baseline" in r.stderr
    # Another mode, and another model (no layer in common).
    doc = json.loads(pair.base.read_text())
    other_mode = "training" if doc["options"]["mode"] == "inference" else "inference"
    mode = tmp_path / "mode.json"
    mode.write_text(json.dumps(doc | {"options": doc["options"] | {"mode": other_mode}}))
    r = invoke("check", pair.config, "--profile", pair.small, "--baseline", mode, ok=(2,))
    assert r.stderr.splitlines()[-1].startswith(f"popliner: error: {mode}: the baseline checks {other_mode}, ")
    for ipu in doc["ipus"]:
        ipu["layers"] = [f"other.{x}" for x in ipu["layers"]]
    model = tmp_path / "model.json"
    model.write_text(json.dumps(doc))
    r = invoke("check", pair.config, "--profile", pair.small, "--baseline", model, ok=(2,))
    assert r.stderr.splitlines()[-1].startswith(f"popliner: error: {model}: the baseline has none of this model's")


# ------------------------------------------------------------------------------------------ CI's language


class _Cells(HTMLParser):
    """The cells of each table row of rendered HTML, as text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _tables(markdown: str) -> list[list[str]]:
    parser = _Cells()
    parser.feed(cmarkgfm.github_flavored_markdown_to_html(markdown))
    return parser.rows


def test_the_markdown_summary_gives_the_verdict_first_and_a_row_per_ipu(pair: Pair) -> None:
    growth = _growth(pair)
    summary = pair.folder / "summary.md"
    invoke("check", pair.config, "--profile", pair.large, "--baseline", pair.base, "--max-growth", "0.01",
           "-o", summary, "-f", ok=(1,))
    text = summary.read_text()
    lines = text.splitlines()
    assert lines[0] == f"## FAIL: popliner check of `{pair.config}`"
    beyond = [f"IPU {i} {_growth_words(b, g)}, more than --max-growth 0.01 allows {int(0.01 * b):,} bytes"
              for i, b, g in growth if g > int(0.01 * b)]
    assert lines[2] == f"- **{'; '.join(beyond)}**"
    # GitHub's renderer: one header row and one row per IPU, with the figures worked out here.
    rows = _tables(text)
    assert rows[0][:6] == ["IPU", "layers", "worst tile (bytes)", "baseline", "change", "change %"]
    for (ipu, base, g), row in zip(growth, rows[1:]):
        verdict = "grew beyond the limit" if g > int(0.01 * base) else "grew"
        assert row[0] == str(ipu) and row[2:6] == [f"{base + g:,}", f"{base:,}", f"{g:+,}",
                                                    f"{g / base * 100:+.2f}%"]
        assert row[-1] == verdict and row[-2] == "yes"
    passed = pair.folder / "passed.md"
    invoke("check", pair.config, "--profile", pair.small, "--baseline", pair.base, "-o", passed, "-f")
    assert passed.read_text().startswith(f"## PASS: popliner check of `{pair.config}`\n\n- **No IPU grew**\n")


def test_github_actions_annotations_and_the_job_summary(pair: Pair, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    growth = _growth(pair)
    # A limit that IPU 0's growth is within, but above 80% of: a warning; the other IPU is then judged by it too.
    _, base0, g0 = growth[0]
    limit = g0 / base0 / 0.9
    allowed = [int(limit * b) for _, b, _ in growth]
    assert 0.8 * allowed[0] < g0 <= allowed[0]
    job_summary = tmp_path / "step_summary.md"
    job_summary.write_text("an earlier step's summary\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(job_summary))
    md = tmp_path / "summary.md"
    r = invoke("check", pair.config, "--profile", pair.large, "--baseline", pair.base, "--max-growth", repr(limit),
               "-o", md, ok=(0, 1))
    commands = [line for line in r.stderr.splitlines() if line.startswith("::")]
    # GitHub's escapes (its docs, "Workflow commands"): % CR LF in a message, and also : and , in a property.
    file = str(pair.config).replace("%", "%25").replace(":", "%3A").replace(",", "%2C")
    expected = []
    for (ipu, base, g), allow in zip(growth, allowed):
        words = f"IPU {ipu} {_growth_words(base, g)} since {pair.base}".replace("%", "%25")
        if g > allow:
            expected.append(f"::error file={file},title=popliner check%3A IPU {ipu} grew beyond the limit::{words}, "
                            f"more than --max-growth {limit:g} allows {allow:,} bytes")
        elif g > 0.8 * allow:
            expected.append(f"::warning file={file},title=popliner check%3A IPU {ipu} grew near the limit::{words}; "
                            f"--max-growth {limit:g} allows {allow:,} bytes")
    assert commands == expected and commands[0].startswith("::warning")
    assert r.exit_code == (1 if any(c.startswith("::error") for c in commands) else 0)
    # The job summary: what was there, then the Markdown summary, as -o wrote it.
    assert job_summary.read_text() == "an earlier step's summary\n" + md.read_text() + "\n"
    # Outside GitHub Actions: no workflow commands.
    monkeypatch.delenv("GITHUB_ACTIONS")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    quiet = invoke("check", pair.config, "--profile", pair.large, "--baseline", pair.base, "--max-growth",
                   repr(limit), ok=(0, 1))
    assert "::" not in quiet.stderr


def test_a_job_summary_through_a_link_is_refused_before_any_work(pair: Pair, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "target.md"
    target.write_text("kept\n")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(link))
    out = tmp_path / "r.json"
    r = invoke("check", pair.config, "--profile", pair.small, "-o", out, ok=(2,))
    assert "is a symbolic link" in r.stderr and r.stderr.count("\n") == 1
    assert target.read_text() == "kept\n" and not out.exists()


def test_junit_keeps_working_with_the_deltas_in_its_messages(pair: Pair, tmp_path: Path) -> None:
    from xml.etree import ElementTree as ET

    growth = _growth(pair)
    junit = tmp_path / "memory.xml"
    r = invoke("check", pair.config, "--profile", pair.large, "--baseline", pair.base, "--max-growth", "0.01",
               "-o", junit, ok=(1,))
    assert f"popliner: wrote {junit}" in r.stderr  # issue 36 point 9: -o FILE.xml says it wrote
    suite = ET.parse(junit).getroot()
    beyond = [(i, b, g) for i, b, g in growth if g > int(0.01 * b)]
    assert suite.get("tests") == "2" and suite.get("failures") == str(len(beyond))
    cases = {case.get("name"): case.find("failure") for case in suite.findall("testcase")}
    for ipu, base, g in beyond:
        failure = cases[f"ipu{ipu}_fits"]
        assert failure is not None and failure.get("type") == "growth over limit"
        assert failure.get("message") == (f"IPU {ipu} {_growth_words(base, g)} since the baseline {pair.base}, more "
                                          f"than --max-growth 0.01 allows {int(0.01 * base):,} bytes")
    out = suite.find("system-out")
    assert out is not None and out.text is not None
    for ipu, base, g in growth:
        assert f"IPU {ipu}: " in out.text and f"{_growth_words(base, g)} since the baseline" in out.text


# ------------------------------------------------------------------------------------------ --solve


def test_solve_checks_its_config_through_the_same_result_file(pair: Pair, tmp_path: Path) -> None:
    config, result = tmp_path / "pipeline.yaml", tmp_path / "solved.json"
    invoke(pair.small, "--solve", "--num-ipus", "2", "--config-out", config, "--check-out", result)
    checked = tmp_path / "checked.json"
    invoke("check", config, "--profile", pair.small, "-o", checked)
    assert result.read_bytes() == checked.read_bytes()  # one door: the same record, byte for byte
    growth = _growth(pair)
    big = tmp_path / "big.yaml"
    r = invoke(pair.large, "--solve", "--num-ipus", "2", "--config-out", big, "--baseline", pair.base,
               "--max-growth", "0.01", ok=(1,))
    json.loads(r.stdout)  # the split JSON is still stdout's
    solved = read_config(big)
    if solved.layer_groups == read_config(pair.config).layer_groups:  # the same split: the same growth as check's
        expected = [f"IPU {i} {_growth_words(b, g)}, more than --max-growth 0.01 allows {int(0.01 * b):,} bytes"
                    for i, b, g in growth if g > int(0.01 * b)]
        assert r.stderr.splitlines()[-1] == "popliner: " + "; ".join(expected)
    r = invoke(pair.small, "--solve", "--num-ipus", "2", "--baseline", pair.base, ok=(2,))
    assert "--baseline needs --solve and --config-out" in r.stderr


# ------------------------------------------------------------------------------------------ names


@pytest.mark.parametrize("name", ["a|b", "`x`", "**bold**", "<script>", "a\\|b", "[l](http://x)", "_u_ ~s~",
                                  "a\nb", "x\x1b[31m", " lead", "``", "|"])
def test_a_name_shows_as_it_is_in_a_markdown_table(name: str) -> None:
    table = f"| name | n |\n|---|---|\n| {code(name, cell=True)} | 1 |\n"
    rows = _tables(table)
    assert len(rows) == 2 and rows[1] == [shown(name), "1"]


def test_hostile_layer_names_in_the_summary_and_annotations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = write_hostile(tmp_path / "hostile.json")
    config = tmp_path / "h.yaml"
    invoke(profile, "--layer-name-regex", LAYER_REGEX, "--solve", "--num-ipus", "2", "--config-out", config)
    base = tmp_path / "base.json"
    invoke("check", config, "--profile", profile, "-o", base)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    md = tmp_path / "h.md"
    r = invoke("check", config, "--profile", profile, "--baseline", base, "--max-growth", "0", "--budget", "0.3",
               "-o", md, ok=(1,))
    text = md.read_text()
    hostile = HOSTILE_CHARACTERS - {"\n"}
    assert not hostile & set(text) and not hostile & set(r.stderr)
    rows = _tables(text)
    spans = [ipu["layers"] for ipu in json.loads(base.read_text())["ipus"]]
    assert len(rows) == 3 and all(len(row) == 10 for row in rows)
    assert [row[1] for row in rows[1:]] == [
        shown(x[0]) if len(x) == 1 else f"{shown(x[0])} .. {shown(x[-1])}" for x in spans]
    over = sum(row[8] == "no" for row in rows[1:])
    assert over >= 1 and sum(line.startswith("::error") for line in r.stderr.splitlines()) == over
    assert os.linesep not in "".join(line.split("::", 2)[-1] for line in r.stderr.splitlines() if "::" in line)


@pytest.mark.parametrize(("share", "digits", "signed", "text"), [
    (472 / 450, 1, False, "104.9%"),  # 1.0489: said "1.0x the budget" before (issue 36 point 9)
    (666_172 / 638_976, 1, False, "104.3%"),  # the issue's own figures
    (0.99996, 1, False, "99.996%"),  # not "100.0%": it is not full
    (1.00004, 1, False, "100.004%"),  # not "100.0%": it is over
    (1.0, 1, False, "100.0%"),
    (3 / 1_000_000, 2, True, "+0.0003%"),  # a growth is never "+0.00%"
    (0.0, 2, True, "+0.00%"),
    (-0.05, 2, True, "-5.00%"),
])
def test_a_share_never_rounds_onto_a_boundary_it_has_not_reached(share: float, digits: int, signed: bool,
                                                                 text: str) -> None:
    from popliner.writers.shares import percent

    assert percent(share, digits, signed=signed) == text


def test_the_comparison_is_in_the_result_file_too(pair: Pair, tmp_path: Path) -> None:
    growth = _growth(pair)
    result = tmp_path / "compared.json"
    invoke("check", pair.config, "--profile", pair.large, "--baseline", pair.base, "--max-growth", "0.01",
           "-o", result, ok=(1,))
    doc = json.loads(result.read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    c = doc["comparison"]
    assert c["passed"] is False and c["max_growth"] == 0.01 and c["max_growth_bytes"] is None
    assert [(d["ipu"], d["baseline_worst_tile_bytes"], d["change_bytes"]) for d in c["ipus"]] == growth
    assert [d["allowed_growth_bytes"] for d in c["ipus"]] == [int(0.01 * b) for _, b, _ in growth]
    # Read back as a baseline, the comparison is left aside: it is the record of the longer sequence's check.
    assert read_record(str(result)) == read_record(str(pair.folder / "large.json"))
    # The output may not be the baseline itself, even with --force.
    r = invoke("check", pair.config, "--profile", pair.large, "--baseline", result, "-o", result, "-f", ok=(2,))
    assert "popliner never writes over its inputs" in r.stderr


def test_a_summary_without_a_baseline(pair: Pair, tmp_path: Path) -> None:
    md = tmp_path / "plain.md"
    invoke("check", pair.config, "--profile", pair.small, "-o", md)
    rows = _tables(md.read_text())
    ipus = _ipus(pair.base)
    assert md.read_text().startswith(f"## PASS: popliner check of `{pair.config}`\n\n- **All 2 IPUs fit.**\n")
    assert [row[3] for row in rows[1:]] == [f"{ipu['worst_tile_bytes']:,}" for ipu in ipus]
    assert [row[6] for row in rows[1:]] == ["yes", "yes"]

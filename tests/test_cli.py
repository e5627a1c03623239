"""The command line through click's CliRunner: outputs, goldens, exit codes, safety."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from popliner.cli import cli
from tests.helpers import FIXTURES

ROOT = Path(__file__).resolve().parent.parent
TINY = FIXTURES / "tiny.json"
GOLDEN = Path(__file__).resolve().parent / "golden" / "cli"
UPDATE = os.environ.get("POPLINER_UPDATE_GOLDEN") == "1"


@pytest.fixture()
def tiny(tmp_path):
    target = tmp_path / "tiny.json"
    shutil.copy(TINY, target)
    return target


def run(*args, ok=(0,)):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code in ok, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from the golden file (POPLINER_UPDATE_GOLDEN=1 to refresh)"


def csv_rows(text: str, delimiter: str = ",") -> list[list[str]]:
    return list(csv.reader(io.StringIO(text), delimiter=delimiter))


def test_default_is_the_layer_breakdown(tiny):
    out = run(tiny).stdout
    rows = csv_rows(out)
    header, unlayered, layer0, layer1 = rows[0], rows[1], rows[2], rows[3]
    col = {name: k for k, name in enumerate(header)}
    # The operations of no layer come first (Tensor/w0 and loss: 5 + 30 cycles, as in test_memory_tiny).
    assert unlayered[0] == "(no layer)"
    assert unlayered[col["Operations"]] == "2"
    assert unlayered[col["Cycles"]] == "35"
    assert [r[0] for r in rows[-3:]] == ["Sum of the rows above", "Whole model on one IPU", rows[-1][0]]
    # Hand-computed in fixtures/profiles/tiny.md: sums over tiles of each component.
    assert layer0[col["Variables (bytes)"]] == "190"
    assert layer0[col["Vertex code (bytes)"]] == "570"
    assert layer0[col["Worst-tile bytes"]] == "402"
    assert layer1[col["Worst-tile bytes"]] == "235"
    golden("layers.csv", out.replace("\r\n", "\n"))


def test_operation_breakdown_tsv_has_formulas(tiny):
    out = run(tiny, "--operation-breakdown", "--format", "tsv").stdout
    rows = csv_rows(out, "\t")
    names = [r[2] for r in rows[1:-1]]
    assert names == ["Tensor/w0", "Gather", "layer0/matmul", "layer0/add", "Call(7)", "layer1/matmul", "relu", "loss"]
    mm0 = rows[3]
    assert mm0[:8] == ["0", "name", "layer0/matmul", "170", "250", "80", "96", "28"]
    assert mm0[8].startswith("=SUM(")
    golden("operations.tsv", out.replace("\r\n", "\n"))


def test_memory_totals_show_ground_truth(tiny):
    out = run(tiny, "--memory-totals").stdout
    rows = {r[0]: r[1:] for r in csv_rows(out)[1:]}
    assert rows["Vertex code"][:2] == ["630", "630"]
    assert rows["Control code"][:2] == ["177", "181"]
    golden("totals.csv", out.replace("\r\n", "\n"))


def test_matrices(tiny):
    out = run(tiny, "--memory-affinity", "--interlayer-communication").stdout
    assert "190" in out and "55" in out
    golden("matrices.csv", out.replace("\r\n", "\n"))


def test_solve_json_and_stderr_picture(tiny):
    result = run(tiny, "--solve", "--num-ipus", "2", "--time-limit", "10")
    doc = json.loads(result.stdout)
    assert doc["status"] == "OPTIMAL" and doc["solver"] == "ilp"
    assert [s["layers"] for s in doc["stages"]] == [["0"], ["1"]]
    # tiny.md: 422 and 235 on the worst tiles, plus the copy buffers of the 30 bytes crossing
    # the boundary, spread over 4 tiles: ceil(30 / 4) = 8 on each IPU.
    assert [s["worst_tile_bytes"] for s in doc["stages"]] == [430, 243]
    assert [s["copy_buffer_bytes_per_tile"] for s in doc["stages"]] == [8, 8]
    assert "[ (unlayered) 0 | 1 ]" in result.stderr
    assert doc["profile"] == str(tiny)
    golden("solve.json", result.stdout.replace(json.dumps(str(tiny)), '"tiny.json"'))


def test_solve_is_byte_identical_twice(tiny):
    a = run(tiny, "--solve", "--num-ipus", "2").stdout
    b = run(tiny, "--solve", "--num-ipus", "2", "--no-cache").stdout
    assert a == b


def test_greedy_solver_and_fewer_ipus_warning(tiny):
    result = run(tiny, "--solve", "--num-ipus", "2", "--solver", "greedy")
    doc = json.loads(result.stdout)
    assert doc["status"] == "GREEDY" and doc["num_ipus_used"] == 1
    assert "uses 1 of the 2 IPUs" in result.stderr


def test_solve_that_does_not_fit_exits_3_with_a_best_effort_split(tiny):
    result = run(tiny, "--solve", "--num-ipus", "2", "--mem-per-tile", "300", ok=(3,))
    doc = json.loads(result.stdout)
    assert doc["status"] == "INFEASIBLE"
    assert "layer 0 alone needs 422 bytes" in result.stderr
    # Best effort: layer 0 (422 bytes on tile 0, + 8 of copy buffers) and layer 1 (235 + 8, fits).
    first, second = doc["stages"]
    assert (first["worst_tile_bytes"], first["fits"], second["fits"]) == (430, False, True)
    # Hand-computed in tiny.md: tile 0 peaks at step 2 with w0/0, l0/mm/out/0 and emb/out.
    assert first["overflow"] == {"tile": 0, "step": 2, "largest_live_variables": [
        {"name": "w0/0", "bytes": 50}, {"name": "l0/mm/out/0", "bytes": 30}, {"name": "emb/out", "bytes": 10}]}
    assert "over budget by 130 bytes on tile 0" in result.stderr


def test_headroom_shrinks_the_budget(tiny):
    doc = json.loads(run(tiny, "--solve", "--num-ipus", "2", "--headroom", "0.5").stdout)
    assert doc["budget_bytes_per_tile"] == 500


def test_config_out_simulate_and_check(tiny, tmp_path):
    cfg = tmp_path / "pipeline.yaml"
    run(tiny, "--solve", "--num-ipus", "2", "--config-out", cfg)
    data = yaml.safe_load(cfg.read_text())
    assert [s["layers"] for s in data["stages"]] == [["0"], ["1"]]
    checked = run("check", cfg, "--profile", tiny)
    assert "yes" in checked.stdout
    junit = tmp_path / "report.xml"
    failed = run("check", cfg, "--profile", tiny, "--budget", "0.3", "--junit", junit, ok=(1,))
    assert "IPU 0 is over budget by 130 bytes on tile 0" in failed.stdout  # 422 + 8 of copy buffers - 300
    assert "w0/0" in failed.stdout  # the largest live variable at the peak
    xml = junit.read_text()
    assert 'tests="2"' in xml and 'failures="1"' in xml
    sim = run("simulate", cfg, "--profile", tiny)
    assert "Step time" in sim.stdout


def test_workbook_and_plots(tiny, tmp_path):
    book = tmp_path / "review.xlsx"
    plot = tmp_path / "layers.png"
    run(tiny, "-o", book, "--solve", "--num-ipus", "2", "--plot", plot)
    for name in ("layers.png", "layers-split.png", "layers-tiles.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from openpyxl import load_workbook

    sheets = load_workbook(book).sheetnames
    assert sheets[:4] == ["Operations", "Layers", "Split planner", "Totals"]


def test_existing_output_needs_force(tiny, tmp_path):
    out = tmp_path / "layers.csv"
    out.write_text("keep me")
    result = run(tiny, "-o", out, ok=(2,))
    assert "--force" in result.stderr
    assert out.read_text() == "keep me"
    run(tiny, "-o", out, "--force")
    assert out.read_text().startswith("Layer,")


@pytest.mark.parametrize("args, message", [
    (["missing.json"], "missing.json: no such file"),
    (["{tiny}", "--solve", "--split-after", "nope"], "--split-after 'nope': no such layer"),
    (["{tiny}", "--solve", "--same-ipu", "0"], "expected two layer names"),
    (["{tiny}", "--layer-name-regex", "("], "--layer-name-regex"),
    (["{tiny}", "--config-out", "x.yaml"], "--config-out needs --solve"),
    (["{tiny}", "--solve", "--layer-breakdown"], "write the tables with -o FILE"),
    (["model.pop", "debug.cbor"], "popliner export"),
])
def test_bad_usage_is_one_line_exit_2(tiny, args, message):
    result = run(*[a.format(tiny=tiny) for a in args], ok=(2,))
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("popliner: error:")
    assert message in lines[-1]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("option, value", [("--num-ipus", "0"), ("--headroom", "1.5"), ("--time-limit", "-1")])
def test_bad_option_values(tiny, option, value):
    result = run(tiny, option, value, ok=(2,))
    assert "Invalid value" in result.stderr


def test_bad_profile_leaves_no_output(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "popliner-profile", "version": 1, "target": {"tilesPerIpu": 4}}')
    out = tmp_path / "out.csv"
    result = run(bad, "-o", out, ok=(2,))
    assert "bad.json at target: missing required key \"numTiles\"" in result.stderr
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [bad]


def test_help_lists_subcommands():
    out = run("--help").stdout
    for name in ("analyse", "check", "export", "simulate", "synth"):
        assert name in out
    assert "--solve" in run("analyse", "--help").stdout


def test_python_dash_m_entry_point(tiny):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "popliner", str(tiny)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0
    assert proc.stdout.startswith("Layer,")


@pytest.mark.parametrize("args", [(), ("--solve", "--num-ipus", "2")], ids=["tables", "split-json"])
def test_stdout_errors_are_one_line_for_tables_and_split_json(tmp_path, args):
    """Tables and the --solve JSON reach stdout the same way as ``-o -``: a full or closed stdout is one line."""
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    argv = [sys.executable, "-m", "popliner", "-q", str(TINY), *args]
    with open("/dev/full", "w") as full:
        r = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]
    assert "stdout: no space left on device" in r.stderr
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, timeout=120,
                       preexec_fn=lambda: os.close(1))
    assert r.returncode == 2 and "stdout: closed" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["-", "/dev/stdout"])
def test_tables_to_stdout_names_match_plain_stdout(tiny, name):
    assert run(tiny, "--format", "tsv", "-o", name).stdout == run(tiny, "--format", "tsv").stdout


def test_each_written_config_is_said_once(tiny, tmp_path):
    config, ipu_config = tmp_path / "pipeline.yaml", tmp_path / "ipu_config.json"
    err = run(tiny, "--solve", "--num-ipus", "2", "--config-out", config, "--ipu-config-out", ipu_config,
              "--head-placement", "last").stderr
    assert config.exists() and ipu_config.exists()
    lines = err.splitlines()
    assert [line for line in lines if "wrote" in line and str(ipu_config) in line] == [
        f"popliner: wrote {ipu_config} (optimum-graphcore IPUConfig)"]
    assert [line for line in lines if "wrote" in line and str(config) in line] == [f"popliner: wrote {config}; next:"]

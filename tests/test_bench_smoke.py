"""Smoke test of scripts/bench.py --quick: one tiny profile, every measurement once (about 10 s)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "scripts" / "bench.py"


@pytest.mark.slow  # about 13 s: runs the bench script end to end
def test_bench_quick_writes_tables_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "bench-out"
    run = subprocess.run([sys.executable, str(BENCH), "--quick", "--out", str(out)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "cold_load 1/1" in run.stderr  # progress goes to stderr
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert {r["measurement"] for r in rows} == {"cold_load", "cached_load", "greedy", "ilp", "greedy_recompute",
                                                "ilp_recompute", "layer_breakdown", "simulate", "xlsx", "plan",
                                                "plan_no_pipeline"}
    for r in rows:
        assert not r["status"].startswith(("ERROR", "CRASH", "EXIT", "CACHE")), r
        assert float(r["median_s"]) >= 0 and float(r["peak_rss_mb_max"]) > 0
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# popliner benchmark") and "## Targets (issues 15 and 24)" in summary
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

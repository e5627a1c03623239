"""``--time-limit`` bounds the whole solve: search, best effort, overflow details and the hint before exit 3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import popliner.solvers.solve as solve
import popliner.training_choice as training_choice
from popliner.analysis import AnalysisOptions, _stage_results, analyse_profile
from popliner.memory.training import TrainingOptions
from popliner.profile import load_profile
from popliner.solvers.problem import SplitProblem
from tests.helpers import FIXTURES

ROOT = Path(__file__).resolve().parent.parent
TINY_TRAINING = FIXTURES / "tiny-training.json"
BERT = FIXTURES / "bert-base-training.json.gz"


def _popliner(*args: str) -> subprocess.CompletedProcess[str]:
    """The real command in a fresh process (its own clock, imports and cache)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "popliner", *args], capture_output=True, text=True, env=env,
                          timeout=300, check=False)


def test_a_tiny_limit_cuts_the_solve_and_the_hint_short_and_says_so():
    # tiny-training.md: at 460 bytes per tile nothing fits 2 IPUs with the head last, and the hint
    # finds that pipeline recomputation would fit on 2 (tests/test_training_tiny.py). With a limit
    # spent before the first range is read, the JSON note says what was cut, and the hint says it
    # tried none of the options instead of trying them all.
    args = (str(TINY_TRAINING), "--solve", "--num-ipus", "2", "--head-placement", "last", "--mem-per-tile", "460")
    rushed = _popliner(*args, "--time-limit", "1e-6")
    assert rushed.returncode == 3, rushed.stderr
    note = json.loads(rushed.stdout)["note"]
    assert "the 1e-06 s time limit ran out while the memory facts were built" in note
    assert "the 1e-06 s time limit ran out after trying 0 of 5 other training options" in rushed.stderr
    assert "fits on 2 IPUs with" not in rushed.stderr and "Traceback" not in rushed.stderr
    full = _popliner(*args, "--time-limit", "60")
    assert full.returncode == 3
    assert "time limit" not in json.loads(full.stdout)["note"]
    assert "fits on 2 IPUs with --recompute pipeline" in full.stderr and "ran out" not in full.stderr


def test_the_hint_stops_between_options_when_the_deadline_passes(monkeypatch):
    # The deadline passes while the first option is being tried: the hint stops there and says how
    # far it got (one of five), keeping what the first option gave.
    analysis = analyse_profile(load_profile(TINY_TRAINING),
                               AnalysisOptions(training=TrainingOptions(head_placement="last")))
    problem = SplitProblem(2, 400, training=True)
    original = solve.minimum_ipus
    deadline = time.monotonic() + 3600

    def slow(*args, **kwargs):
        found = original(*args, **kwargs)
        monkeypatch.setattr("popliner.deadline.time", _After(deadline))
        return found

    monkeypatch.setattr(solve, "minimum_ipus", slow)
    out = training_choice.suggest_options(analysis, problem, deadline=deadline)
    assert (out.tried, out.candidates, out.out_of_time) == (1, 5, True)
    # Without a deadline the same search goes on to the option that fits (400 B: pipeline recomputation
    # needs 416 on 2 IPUs (tiny-training.md), off-chip optimizer state holds the model on one IPU at 335).
    monkeypatch.undo()
    whole = training_choice.suggest_options(analysis, problem)
    assert not whole.out_of_time and whole.options is not None and whole.fewest == 1


def test_the_hint_counts_the_tables_grid_in_the_set_up_it_cannot_stop(monkeypatch):
    # An option's engine and its table's liveness grid run without deadline checks. Here the table takes
    # 0.5 s: after the first option the hint must expect that again, and not start the second with less
    # than that left (it would end past the deadline, as it did when only the engine was timed).
    analysis = analyse_profile(load_profile(TINY_TRAINING),
                               AnalysisOptions(training=TrainingOptions(head_placement="last")))
    problem = SplitProblem(2, 400, training=True)  # the first option does not fit: the hint goes on
    original = training_choice.budget_table
    built: list[float] = []

    def slow_table(*args, **kwargs):
        table = original(*args, **kwargs)
        time.sleep(0.5)
        built.append(time.monotonic())
        return table

    monkeypatch.setattr(training_choice, "budget_table", slow_table)
    deadline = time.monotonic() + 0.9
    out = training_choice.suggest_options(analysis, problem, deadline=deadline)
    assert (out.tried, out.out_of_time) == (1, True)
    assert len(built) == 1 and built[0] < deadline  # the second option's table was never started


class _After:
    """A ``time`` whose clock reads past ``deadline``."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def monotonic(self) -> float:
        return self.deadline + 1.0


def test_overflow_details_stop_at_the_deadline_and_the_note_says_which():
    analysis = analyse_profile(load_profile(BERT))
    problem = SplitProblem(2, 150_000, training=True)
    bounds = ((0, 4), (5, 11))  # both stages far over 150,000 bytes
    stages, note = _stage_results(analysis, problem, bounds, True, time.monotonic() + 3600, 60)
    assert note == "" and all(s.overflow is not None and s.overflow.largest_live for s in stages)
    late, note = _stage_results(analysis, problem, bounds, True, time.monotonic() - 1, 60)
    assert [s.overflow for s in late] == [None, None]
    assert note == "; the 60 s time limit ran out before the overflow details of 2 stage(s) over budget (IPUs 0, 1) " \
                   "were found"
    # The stages' figures are the result itself: read whatever the time.
    assert [s.worst_tile_bytes for s in late] == [s.worst_tile_bytes for s in stages]

"""The range table's fast paths against the direct model: blocked liveness grid and incremental stash entries.

Every range of the training fixtures, with each recomputation mode and with
off-chip optimizer state, through grids of tiny blocks (so that windows
start, end and span several blocks) and stash horizons of one and two
growths (so that candidates wait beyond the horizon and are placed again):
the same per-tile total and stash entry as the memory engine's direct
figures. The growth at which a candidate joins the stash is checked
against the engine's own rule, growth by growth, on random windows.
"""

from __future__ import annotations

import numpy as np
import pytest

from popliner.analysis import Analysis, AnalysisOptions, load_analysis
from popliner.arrays import unique_inverse
from popliner.errors import ProfileFormatError
from popliner.memory import liveness, stash_row
from popliner.memory.facts import MemoryFacts
from popliner.memory.liveness import sweep
from popliner.memory.running import Pieces
from popliner.memory.stages import range_ops, stage_memory, stash_entry_per_tile
from popliner.memory.training import TrainingOptions
from tests.helpers import FIXTURES, range_table_equals_engine
from tests.liveness_oracle import EventList

OPTIONS = [
    {},
    {"recompute": "every-layer"},
    {"recompute": "pipeline"},
    {"recompute": "every-layer", "optimizer_state": "off-chip"},
    {"head_placement": "last"},
    {"head_placement": "wrap", "recompute": "every-layer"},
    {"head_placement": "wrap", "recompute": "pipeline"},
]


def _scenario(name: str, **kwargs: str) -> Analysis:
    options = AnalysisOptions(training=TrainingOptions(**kwargs))  # type: ignore[arg-type]
    return load_analysis(str(FIXTURES / name), options, use_cache=False)


def _engine(name: str, **kwargs: str) -> MemoryFacts:
    return _scenario(name, **kwargs).facts


#: Grid blocks of 3 segments: small profiles reach every branch.
SMALL = Pieces(grid_block=3)


@pytest.mark.parametrize("pieces", [Pieces(1), SMALL, Pieces(64)], ids=["b1", "b3", "b64"])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(o.values()) or "plain")
@pytest.mark.parametrize("fixture", ["tiny-training.json", "bert-tiny-training.json"])
def test_fast_paths_equal_the_direct_model(fixture: str, options: dict[str, str], pieces: Pieces) -> None:
    made = _scenario(fixture, **options)
    table = made.range_table(2**62, pieces=pieces)
    range_table_equals_engine(table, made.facts, table.num_layers)  # a wrapped head is no layer of the table's


@pytest.mark.parametrize("fixture", ["tiny-training.json", "bert-tiny-training.json",
                                     pytest.param("bert-base-training.json.gz", marks=pytest.mark.slow)])
def test_class_window_peak_equals_the_sweep(fixture: str) -> None:
    """The per-class path (large sets, e.g. the whole program) against the event sweep, tile block by block."""
    profile = _engine(fixture).profile
    rng = np.random.default_rng(12)
    n = profile.variables.count
    sets = [np.arange(n)] + [np.unique(rng.integers(0, n, int(rng.integers(1, n + 1)))) for _ in range(30)]
    for k, var in enumerate(sets):
        lo = 0 if k == 0 else int(rng.integers(-2, profile.num_steps + 1))
        hi = profile.num_steps - 1 if k == 0 else int(rng.integers(lo - 1, profile.num_steps + 3))
        block = int(rng.integers(1, profile.tiles + 2))
        by_class = sweep._class_window_peak(profile, var, lo, hi, factor=np.inf, tile_block=block)
        swept = sweep.group_peaks(profile, np.zeros(len(var), np.int64), var, np.array([lo]), np.array([hi]))[0]
        if by_class is None:  # an empty window: the sweep says 0 everywhere
            assert hi < lo and not swept.any()
            continue
        assert by_class.tolist() == swept.tolist(), (lo, hi, block)
        assert sweep.window_peak(profile, var, lo, hi).tolist() == swept.tolist()


@pytest.mark.parametrize("pieces", [Pieces(), SMALL], ids=["default", "small"])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(o.values()) or "plain")
def test_stage_memory_from_the_table_equals_the_sweep(options: dict[str, str], pieces: Pieces) -> None:
    tabled = _scenario("bert-tiny-training.json", **options)
    direct = _engine("bert-tiny-training.json", **options)  # its own memo: every figure from a sweep
    table = tabled.range_table(2**62, pieces=pieces)
    n = table.num_layers
    for i in range(n):
        for j in range(i, n):
            if (i + j) % 2:
                assert table.per_tile(i, j) is not None  # then the table also has the range's stash entry
            got = table.stage_memory(i, j).per_tile
            ops = table.stage_ops(i, j)  # with a wrapped head, range 0.. holds the head's operations too
            assert got.tolist() == stage_memory(direct, ops).per_tile.tolist(), (i, j)
            entry = table.stash_entry(i, j)
            assert entry is not None or not (i + j) % 2, (i, j)  # a range read has its entry (training)
            if entry is not None:  # the range's own operations: never a wrapped head's
                own = range_ops(direct, i, j)
                assert entry.tolist() == stash_entry_per_tile(direct, own).tolist(), (i, j)
            assert table.per_tile(i, j) is not None  # the table still reads right after a stage figure


def test_pair_groups_equal_a_sort() -> None:
    """The table-based grouping of (first, last) step pairs: the distinct pairs in sorted order, as a sort gives."""
    rng = np.random.default_rng(5)
    for _ in range(100):
        n = int(rng.integers(1, 3000))
        a = rng.integers(0, int(rng.integers(1, 400)), n)
        b = rng.integers(0, int(rng.integers(1, 40_000)), n)
        got = stash_row.pair_groups(a, b)
        assert got is not None
        keys, group = unique_inverse((a << 32) | b)
        assert got[0].tolist() == (keys >> 32).tolist()
        assert got[1].tolist() == (keys & 0xFFFFFFFF).tolist()
        assert got[2].tolist() == group.tolist()
    # Steps beyond the tables' reach: the caller sorts instead.
    assert stash_row.pair_groups(np.array([1 << 23]), np.array([0])) is None


@pytest.mark.parametrize("fixture", ["tiny-training.json", "bert-tiny-training.json", "bert-base-training.json.gz"])
def test_merged_change_equals_the_scattered_events(fixture: str) -> None:
    """A set of variables' net change per grid cell (dense rows or distinct cells) equals their events scattered."""
    profile = _engine(fixture).profile
    rng = np.random.default_rng(13)
    n = profile.variables.count
    for size in (1, 5, n // 10, n):
        var = np.unique(rng.integers(0, n, max(size, 1)))
        grid = liveness.SegmentGrid.of(profile, block=3)
        events = grid.events_of(var)
        expect = np.zeros(grid.diff.size, np.int64)
        np.add.at(expect, events["start"], events["nbytes"])
        np.add.at(expect, events["end"], -events["nbytes"].astype(np.int64))
        grid.add(grid.merged(var))
        assert grid.diff.reshape(-1).tolist() == expect.tolist(), size
        touched = np.unique(np.flatnonzero(expect) // (grid.block * grid.tiles))
        assert set(touched.tolist()) <= set(np.flatnonzero(grid.touched).tolist())


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_grid_readings_between_changes_equal_a_fresh_grid(dtype: type[np.signedinteger]) -> None:
    """The live bytes before each block and the blocks' largest, kept between readings, follow every change.

    Variables are added in random batches, the grid is read over random
    windows after each, and cleared now and then; every reading equals that
    of a grid built afresh from the same variables (read once).
    """
    profile = _engine("bert-tiny-training.json").profile
    rng = np.random.default_rng(5)
    grid = liveness.SegmentGrid.of(profile, block=3, dtype=dtype)
    assert grid.nblocks > 4
    steps = profile.num_steps
    # Variables whose events all fall in the second half of the blocks: the first batch after a clear, so
    # that what the clear emptied lies below every block the batch changes.
    every = grid.events_of(np.arange(profile.variables.count), with_owner=True)
    per_block = grid.block * grid.tiles
    early = np.zeros(profile.variables.count, bool)
    early[every["owner"][np.minimum(every["start"], every["end"]) // per_block < grid.nblocks // 2]] = True
    late = np.flatnonzero(~early)
    assert late.size
    held: list[np.ndarray] = []
    for round_ in range(60):
        var = np.unique(rng.integers(0, profile.variables.count, int(rng.integers(1, 40))))
        if round_ % 17 == 16:
            grid.clear()
            held = []
            var = np.unique(rng.choice(late, 5))
        grid.add(grid.merged(var) if round_ % 2 else grid.events_of(var))
        held.append(var)
        for _ in range(3):
            lo, hi = sorted(rng.integers(-1, steps + 1, 2).tolist())
            fresh = liveness.SegmentGrid.of(profile, block=3)
            fresh.add(fresh.events_of(np.concatenate(held)))  # a variable in two batches counts twice in both
            got = grid.peak(lo, hi)
            assert got.dtype == np.int64 and got.tolist() == fresh.peak(lo, hi).tolist(), (round_, lo, hi)


@pytest.mark.parametrize("options", OPTIONS[:4], ids=lambda o: "-".join(o.values()) or "plain")
def test_tables_of_rising_limits_equal_the_direct_model(options: dict[str, str]) -> None:
    """A best effort's relaxed tables: each row grown again past where a lower limit stopped it.

    The lower tables stop rows at ranges whose figures (and stash entries,
    taken over the limit too) the higher ones then reuse, growing the
    running set each row stopped with: every range each table holds is
    still the direct model's figure, and a table holds exactly the ranges
    within its limit.
    """
    made = _scenario("bert-tiny-training.json", **options)
    engine = made.facts
    n = engine.num_layers
    totals = {(i, j): int(stage_memory(engine, range_ops(engine, i, j)).total_per_tile.max())
              for i in range(n) for j in range(i, n)}
    ordered = sorted(set(totals.values()))
    for limit in (ordered[0], ordered[len(ordered) // 3], ordered[2 * len(ordered) // 3], ordered[-1]):
        table = made.range_table(limit, pieces=SMALL)
        for i in range(n):
            for j in range(i, n):
                got = table.per_tile(i, j)
                fits = all(totals[(i, k)] <= limit for k in range(i, j + 1))
                assert (got is not None) == fits, (limit, i, j)
                if got is None:
                    continue
                ops = range_ops(engine, i, j)
                assert got[0].tolist() == stage_memory(engine, ops).total_per_tile.tolist(), (limit, i, j)
                assert got[1].tolist() == stash_entry_per_tile(engine, ops).tolist(), (limit, i, j)
        # Another set on the shared grid in between: the next table's rows put theirs back first.
        table.stage_memory(n // 2, n - 1)



@pytest.mark.parametrize("block", [1, 3, 32])
@pytest.mark.parametrize("fixture", ["tiny-training.json", "bert-tiny-training.json", "bert-base-training.json.gz"])
def test_grid_equals_the_event_list(fixture: str, block: int) -> None:
    """A growing set's peaks on the grid, over random windows, against the sorted event list and the sweep."""
    profile = _engine(fixture).profile
    rng = np.random.default_rng(block)
    grid = liveness.SegmentGrid.of(profile, block=block)
    events = EventList(profile)
    held = np.zeros(0, np.int64)
    n = profile.variables.count
    for round_ in range(8):
        var = np.setdiff1d(np.unique(rng.integers(0, n, int(rng.integers(1, n // 4 + 2)))), held)
        grid.add(grid.merged(var) if round_ % 2 else grid.events_of(var))
        events.add(var)
        held = np.union1d(held, var)
        for _ in range(4):
            lo, hi = sorted(rng.integers(-1, profile.num_steps + 1, 2).tolist())
            expect = events.peak(lo, hi)
            assert grid.peak(lo, hi).tolist() == expect.tolist(), (round_, lo, hi)
            assert sweep.window_peak(profile, held, lo, hi).tolist() == expect.tolist(), (round_, lo, hi)


def test_a_grid_past_the_cells_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiles x segments past POPLINER_MAX_GRID_CELLS: one line naming the file and the variable, before any buffer."""
    profile = _engine("bert-tiny-training.json").profile
    cells = profile.tiles * len(liveness.grid.segment_ends(profile))
    monkeypatch.setenv("POPLINER_MAX_GRID_CELLS", str(cells))
    assert liveness.SegmentGrid.of(profile).diff.size >= cells  # at the limit: built
    monkeypatch.setenv("POPLINER_MAX_GRID_CELLS", str(cells - 1))
    with pytest.raises(ProfileFormatError, match=f"{cells:,} liveness grid cells.*POPLINER_MAX_GRID_CELLS") as info:
        liveness.SegmentGrid.of(profile)
    assert "bert-tiny-training.json" in str(info.value)

"""The pod planner (issue 25): the step-time terms by hand, the model against the simulator, configs that pass check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from popliner.analysis import Analysis, analyse_profile, load_analysis, solve_split
from popliner.check import check_config
from popliner.cli import cli
from popliner.config.options import analysis_options
from popliner.pod.model import (
    PodConstants,
    allreduce_seconds,
    pipeline_cycles,
    step_time,
    streaming_seconds,
)
from popliner.pod.output import pipeline_config, pod_ipu_config
from popliner.pod.plan import PodPlan, PodRequest, plan_pod
from popliner.simulator.engine import SimStage, simulate
from popliner.simulator.inputs import inputs_from_analysis
from popliner.solvers.problem import SplitProblem
from tests.helpers import FIXTURES

PROFILES = sorted(p for p in FIXTURES.glob("*.json*"))
TINY = FIXTURES / "tiny-training.json"


def run(*args: Any) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args])


# -- the terms, computed by hand ------------------------------------------------------------------


def test_allreduce_by_hand() -> None:
    # 100 MB of gradients over a ring of 4 replicas: each sends 2 x 3/4 x 100 MB = 150 MB at 64 GB/s.
    assert allreduce_seconds(100e6, 4, 64e9) == pytest.approx(150e6 / 64e9, rel=1e-12)
    # Two replicas: 2 x 1/2 = once the gradients; one replica: nothing to reduce.
    assert allreduce_seconds(64e6, 2, 32e9) == pytest.approx(2e-3, rel=1e-12)
    assert allreduce_seconds(64e6, 1, 32e9) == 0.0


def test_streaming_by_hand() -> None:
    # 1 GB of Adam state loaded and stored back at 16 GB/s: 2 GB / 16 GB/s = 0.125 s.
    assert streaming_seconds(1e9, 16e9) == pytest.approx(0.125, rel=1e-12)
    assert streaming_seconds(0, 16e9) == 0.0


def test_pipeline_cycles_by_hand() -> None:
    # Two IPUs in training: PS0 forward (IPU 0, 10), PS1 forward+backward (IPU 1, 30), PS2 backward (IPU 0, 20).
    # G = 3: cycle 0 runs PS0 (10); cycle 1 PS0, PS1 (30); cycle 2 all, IPU 0 10+20 (30); cycle 3 PS1, PS2 (30);
    # cycle 4 PS2 (20). 120 in all; the busiest IPU's work per micro-batch is 30.
    assert pipeline_cycles([10, 30, 20], [0, 1, 0], 3) == (120.0, 30.0)
    # Each further micro-batch adds one main cycle of the busiest IPU.
    assert pipeline_cycles([10, 30, 20], [0, 1, 0], 5) == (180.0, 30.0)


def test_step_time_parts_add_up_and_name_the_bound() -> None:
    # One main cycle of 30 at 1 Hz over 3 micro-batches: compute 90, bubble 120 - 90 = 30; 5 cycles of
    # sync 2 and copies 4 (the slower IPU's) = 30; IPU 1's tail (5 + 100) ends last.
    step = step_time([10, 30, 20], [0, 1, 0], [1.0, 4.0], 3, clock_hz=1.0, sync_cycles=2.0,
                     tail=[(1.0, 2.0), (5.0, 100.0)])
    assert (step.compute, step.bubble, step.copies, step.allreduce, step.streaming) == (90, 30, 30, 5, 100)
    assert step.seconds == 255 and step.pipeline_cycles == 150
    assert step.bound == "streaming"


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.data())
def test_step_time_is_the_simulators_step(ipus: int, data: st.DataObject) -> None:
    """The closed form (fill + main + flush) against the simulator's cycle-by-cycle timeline."""
    p = 2 * ipus - 1
    on = [min(s, p - 1 - s) for s in range(p)]  # PopART's training placement: stage s and P-1-s share an IPU
    work = data.draw(st.lists(st.integers(0, 10**6), min_size=p, max_size=p))
    sends = data.draw(st.lists(st.integers(0, 10**7), min_size=p, max_size=p))
    g = data.draw(st.integers(p, 4 * p + 3))
    kinds = ["forward+backward" if s == ipus - 1 else "forward" if s < ipus - 1 else "backward" for s in range(p)]
    stages = [SimStage(s, on[s], kinds[s], work[s], sends[s]) for s in range(p)]
    sim = simulate(stages, g, clock_hz=1.33e9, link_bandwidth=64e9, sync_cycles=1000)
    send = [0.0] * ipus
    for s in stages:
        if s.index + 1 < p and stages[s.index + 1].ipu != s.ipu and s.send_bytes:
            send[s.ipu] += s.send_bytes / 64e9 * 1.33e9
    mine = step_time(work, on, send, g, clock_hz=1.33e9, sync_cycles=1000, tail=[])
    assert mine.pipeline_cycles == pytest.approx(sim.step_cycles, rel=1e-9, abs=1e-6)


def test_constants_are_checked() -> None:
    from popliner.errors import UsageProblem

    with pytest.raises(UsageProblem, match="--streaming-bandwidth"):
        PodConstants(streaming_bandwidth=0)
    with pytest.raises(UsageProblem, match="--ipus"):
        PodRequest(pod_ipus=0)


# -- every bundled fixture: the model against the simulator, and check on the emitted config -------------


@pytest.fixture(scope="module")
def fixture_plans() -> list[tuple[Path, Analysis, PodPlan]]:
    request = PodRequest(pod_ipus=4, recompute=("none", "every-layer"), head_placement=("first", "wrap"),
                         optimizer_state=("on-chip",))
    out = []
    for path in PROFILES:
        analysis = load_analysis(str(path), use_cache=False)
        out.append((path, analysis, plan_pod(analysis, request)))
    return out


def _as_check_reads_it(base: Analysis, cfg: Any) -> Analysis:
    """The profile analysed as ``popliner check`` and ``simulate --profile`` read it for this config."""
    return analyse_profile(base.profile, analysis_options(cfg.mode, cfg.options, cfg.layer_groups), ops=base.ops)


def test_every_fixture_plans_and_its_configs_check_and_simulate(
        fixture_plans: list[tuple[Path, Analysis, PodPlan]]) -> None:
    for path, base, plan in fixture_plans:
        assert plan.fitting, f"{path.name}: nothing fits a pod of 4"
        rates = [c.samples_per_second or 0.0 for c in plan.fitting]
        assert rates == sorted(rates, reverse=True)
        for config in plan.fitting:
            cfg = pipeline_config(plan, config)
            analysis = _as_check_reads_it(base, cfg)
            checked = check_config(analysis, cfg, "pod.yaml", budget=cfg.effective_budget)
            where = (f"{path.name} {config.ipus_per_replica}x{config.replicas} {config.recompute} "
                     f"{config.head_placement}")
            assert checked.fits, where
            assert max(i.worst_tile_bytes for i in checked.ipus) == config.fullest_bytes, where
            assert config.step is not None
            target = analysis.profile.target
            inputs = inputs_from_analysis(cfg, analysis, tiles_per_ipu=int(target.tiles_per_ipu),
                                          clock_hz=float(target.clock_hz))
            sim = simulate(inputs.stages, cfg.gradient_accumulation, clock_hz=inputs.clock_hz,
                           link_bandwidth=64e9, sync_cycles=1000)
            assert config.step.pipeline_cycles == pytest.approx(sim.step_cycles, rel=1e-9), where
            assert cfg.gradient_accumulation * config.replicas * config.micro_batch == plan.global_batch


def test_replicas_and_accumulation_follow_the_pod(fixture_plans: list[tuple[Path, Analysis, PodPlan]]) -> None:
    for _, _, plan in fixture_plans:
        for c in plan.configs:
            assert c.ipus_per_replica * c.replicas == 4
            if c.fits:
                assert c.gradient_accumulation is not None and c.gradient_accumulation >= c.pipeline_stages
                assert c.samples_per_second is None or c.samples_per_second == pytest.approx(
                    c.micro_batch * c.gradient_accumulation * c.replicas / c.step.seconds)  # type: ignore[union-attr]
            else:
                assert c.reason


def test_ipu_config_of_a_configuration(fixture_plans: list[tuple[Path, Analysis, PodPlan]]) -> None:
    path, _, plan = next(item for item in fixture_plans if item[0].name == "bert-base-training.json.gz")
    config = next(c for c in plan.fitting if c.replicas == 2 and c.head_placement == "wrap")
    document = pod_ipu_config(pipeline_config(plan, config), config)
    assert document["replication_factor"] == 2 and document["ipus_per_replica"] == 2
    assert document["gradient_accumulation_steps"] == config.gradient_accumulation


# -- the command --------------------------------------------------------------------------------------


def test_plan_command_writes_a_config_that_check_passes(tmp_path: Path) -> None:
    cfg, ipu = tmp_path / "pod.yaml", tmp_path / "ipu_config.json"
    result = run("plan", TINY, "--ipus", 4, "--global-batch", 64, "--config-out", cfg, "--ipu-config-out", ipu)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    first = document["configurations"][0]
    assert first["rank"] == 1 and first["fits"] and document["global_batch"] == 64
    assert all(c["fits"] for c in document["configurations"])
    assert run("check", cfg, "--profile", TINY).exit_code == 0
    assert json.loads(ipu.read_text())["replication_factor"] == first["replicas"]
    again = run("plan", TINY, "--ipus", 4, "--global-batch", 64)
    assert again.stdout == result.stdout  # byte-identical for the same inputs


def test_plan_config_records_the_layer_rule_it_was_made_with(tmp_path: Path) -> None:
    cfg = tmp_path / "pod.yaml"
    regex = r"^(layer\d)"  # tiny.json's layers named otherwise than by every preset
    result = run("plan", TINY, "--ipus", 2, "--layer-name-regex", regex, "--config-out", cfg)
    assert result.exit_code == 0, result.output
    assert "layer_options" in cfg.read_text()
    assert run("check", cfg, "--profile", TINY).exit_code == 0


def test_plan_all_lists_what_does_not_fit_with_why() -> None:
    result = run("plan", TINY, "--ipus", 16, "--global-batch", 16, "--all", "--recompute", "none",
                 "--head-placement", "first", "--optimizer-state", "on-chip")
    assert result.exit_code == 0, result.output
    configs = json.loads(result.stdout)["configurations"]
    unfit = [c for c in configs if not c["fits"]]
    assert unfit and all(c["reason"] for c in unfit)
    # 16 samples over 16 replicas of one IPU: G = 1 >= 1 stage fits; over 2 x 8, G = 2 < 3 stages does not.
    by_depth = {c["ipus_per_replica"]: c for c in configs}
    assert by_depth[2]["reason"].startswith("G = 2 micro-batches is fewer than the 3 pipeline stages")


@pytest.mark.parametrize("args, message", [
    (("--recompute", "sometimes"), "--recompute"),
    (("--pick", 999, "--config-out", "{tmp}/x.yaml"), "--pick 999"),
    (("--config-out", "{tmp}/x.txt"), "x.txt"),
    (("--link-bandwidth", "nan"), "--link-bandwidth"),
    (("--clock", "inf"), "--clock"),
    (("--global-batch", "1" + "0" * 22), "--global-batch"),
])
def test_plan_bad_options_are_one_line_exit_2(tmp_path: Path, args: tuple[Any, ...], message: str) -> None:
    args = tuple(str(a).replace("{tmp}", str(tmp_path)) for a in args)
    result = run("plan", TINY, "--ipus", 4, *args)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x.yaml").exists()


def test_plan_ipu_config_of_a_head_optimum_cannot_build_writes_nothing(tmp_path: Path) -> None:
    profile = PROFILES[0]  # bert-base-training: an embedding and a head
    cfg, ipu = tmp_path / "pod.yaml", tmp_path / "ipu_config.json"
    result = run("plan", profile, "--ipus", 4, "--recompute", "none", "--optimizer-state", "on-chip",
                 "--head-placement", "first", "--config-out", cfg, "--ipu-config-out", ipu)
    assert result.exit_code == 2 and "--head-placement wrap or last" in result.output
    assert result.stdout == "" and not cfg.exists() and not ipu.exists()


def test_plan_refuses_an_existing_config_before_any_work(tmp_path: Path) -> None:
    cfg = tmp_path / "pod.yaml"
    cfg.write_text("mine\n")
    result = run("plan", tmp_path / "missing.json", "--ipus", 4, "--config-out", cfg)
    assert result.exit_code == 2 and "--force" in result.output
    assert cfg.read_text() == "mine\n"


@pytest.mark.slow
def test_every_fixture_every_option_every_pod(tmp_path: Path) -> None:
    """All option sets (sharding too) for pods of 4, 16 and 64 on every fixture; each config checks and simulates."""
    for path in PROFILES:
        base = load_analysis(str(path), use_cache=False)
        for pod in (4, 16, 64):
            plan = plan_pod(base, PodRequest(pod_ipus=pod, sharded_optimizer_state=pod == 16))
            for config in plan.fitting[:6]:
                cfg = pipeline_config(plan, config)
                analysis = _as_check_reads_it(base, cfg)
                assert check_config(analysis, cfg, "pod.yaml", budget=cfg.effective_budget).fits
                target = analysis.profile.target
                inputs = inputs_from_analysis(cfg, analysis, tiles_per_ipu=int(target.tiles_per_ipu),
                                              clock_hz=float(target.clock_hz))
                sim = simulate(inputs.stages, cfg.gradient_accumulation, clock_hz=inputs.clock_hz,
                               link_bandwidth=64e9, sync_cycles=1000)
                assert config.step is not None
                assert config.step.pipeline_cycles == pytest.approx(sim.step_cycles, rel=1e-9)


def test_notebook_plan() -> None:
    import popliner

    model = popliner.load(str(TINY), use_cache=False)
    plan = model.plan_pod(4, global_batch=64, recompute=("none",), head_placement=("first",))
    frame = plan.to_frame()
    assert list(frame["fits"]) == [c.fits for c in plan.configs] and bool(frame["fits"].iloc[0])
    assert frame["samples_per_second"].iloc[0] == plan.fitting[0].samples_per_second


def test_sharded_state_halves_what_is_streamed_and_still_checks() -> None:
    path = PROFILES[0]  # bert-base-training: Adam state
    base = load_analysis(str(path), use_cache=False)
    asked = {"recompute": ("none",), "head_placement": ("first",), "optimizer_state": ("off-chip",)}
    plain = plan_pod(base, PodRequest(pod_ipus=4, **asked))  # type: ignore[arg-type]
    sharded = plan_pod(base, PodRequest(pod_ipus=4, sharded_optimizer_state=True, **asked))  # type: ignore[arg-type]
    halves = 0
    by_depth = {c.ipus_per_replica: c for c in plain.configs}
    for two in sharded.configs:
        one = by_depth[two.ipus_per_replica]
        if two.fits and one.fits and two.replicas == 2 and one.split_text == two.split_text:
            # Each variable's bytes divided by 2, rounded up: at most one byte more per variable than half.
            assert all(s1 / 2 <= s2 < s1 / 2 + s1 / 1000 for s1, s2 in zip(one.state_bytes, two.state_bytes))
            assert one.gradient_bytes == two.gradient_bytes
            halves += 1
    assert halves == 1
    config = next(c for c in sharded.fitting if c.replicas == 2)
    cfg = pipeline_config(sharded, config)
    assert cfg.options is not None and cfg.options.sharded_optimizer_state and cfg.options.replication_factor == 2
    analysis = _as_check_reads_it(base, cfg)
    checked = check_config(analysis, cfg, "pod.yaml", budget=cfg.effective_budget)
    assert checked.fits and max(i.worst_tile_bytes for i in checked.ipus) == config.fullest_bytes


def test_an_option_sets_engine_goes_once_searched() -> None:
    """plan_pod builds one engine per option set; none may stay alive (BERT-Large: gigabytes each)."""
    import gc
    import weakref

    from popliner.memory.facts import MemoryFacts

    built: list[weakref.ref[MemoryFacts]] = []
    original = MemoryFacts.__init__

    def watched(self: MemoryFacts, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        built.append(weakref.ref(self))

    base = load_analysis(str(PROFILES[0]), use_cache=False)
    MemoryFacts.__init__ = watched  # type: ignore[method-assign]
    try:
        plan = plan_pod(base, PodRequest(pod_ipus=4, recompute=("none", "pipeline"), head_placement=("first",),
                                         optimizer_state=("on-chip",)))
    finally:
        MemoryFacts.__init__ = original  # type: ignore[method-assign]
    gc.collect()
    assert len(built) == 2 and plan.fitting
    assert [ref() for ref in built] == [None, None]


def test_each_depth_is_the_split_solve_exact_ipus_gives(fixture_plans: list[tuple[Path, Analysis, PodPlan]]) -> None:
    # One door: plan's split over K IPUs is the exact solver's over exactly K, ties and all.
    for _, _, plan in fixture_plans:
        for config in plan.fitting:
            analysis = plan.analysis_of(config)
            problem = SplitProblem(num_ipus=config.ipus_per_replica, budget=config.budget, exact_ipus=True,
                                   training=analysis.mode == "training")
            solved = solve_split(analysis, problem, link_bytes_per_second=plan.request.constants.link_bandwidth)
            assert config.split is not None and solved.status == "OPTIMAL"
            assert [s.layers for s in solved.stages] == [s.layers for s in config.split.stages]


class _Positions:
    """What :meth:`TrafficTable.of_stages` reads of a range table: each operation's position, and how many."""

    def __init__(self, positions: Any, num_layers: int) -> None:
        self.positions, self.num_layers = positions, num_layers

    def op_positions(self) -> Any:
        return self.positions


def _traffic_oracle(table: Any, ops: Any, shard: int) -> tuple[int, int]:
    """Gradient and state bytes of a set of operations the plain way: every entry of the operations, each variable
    once (np.unique), gradients from weights, the state's share rounded up per variable."""
    import numpy as np

    entries = np.concatenate([np.arange(table.ptr[o], table.ptr[o + 1]) for o in ops] + [np.zeros(0, np.int64)])
    slots = np.unique(table.slot[entries])
    weights = slots[table.weight[slots]]
    state = slots[~table.weight[slots]]
    return (sum(int(table.nbytes[v]) for v in weights), sum(-(-int(table.nbytes[v]) // shard) for v in state))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_traffic_of_a_range_is_the_sum_over_its_distinct_variables(data: st.DataObject) -> None:
    """Random tables, many variables used at several positions (and several times at one): the range sums against
    the oracle, for every range."""
    import numpy as np

    from popliner.pod.search import TrafficTable

    layers = data.draw(st.integers(1, 6))
    rows = data.draw(st.lists(st.lists(st.integers(0, 7), max_size=5), min_size=1, max_size=12))
    positions = np.array(data.draw(st.lists(st.integers(0, layers - 1), min_size=len(rows), max_size=len(rows))))
    # The table's variables are those of its entries (TrafficTable.of), numbered in order.
    used, slot = np.unique(np.array([v for r in rows for v in r], np.int64), return_inverse=True)
    weight = np.array(data.draw(st.lists(st.booleans(), min_size=used.size, max_size=used.size)), bool)
    nbytes = np.array(data.draw(st.lists(st.integers(0, 2**40), min_size=used.size, max_size=used.size)), np.int64)
    ptr = np.concatenate(([0], np.cumsum([len(r) for r in rows]))).astype(np.int64)
    slot = slot.astype(np.int64)
    table = TrafficTable(ptr, slot, weight, nbytes)
    shard = data.draw(st.integers(1, 5))
    ranges = _Positions(positions, layers)
    for i in range(layers):
        for j in range(i, layers):
            ops = np.flatnonzero((positions >= i) & (positions <= j))
            (got,) = table.of_stages(ranges, ((i, j),), True, shard)  # type: ignore[arg-type]
            assert (got.gradient_bytes, got.state_bytes) == _traffic_oracle(table, ops, shard), (i, j)
            assert table.of_stages(ranges, ((i, j),), False, shard)[0].state_bytes == 0  # type: ignore[arg-type]


@pytest.mark.parametrize("placement", ["first", "last", "wrap"])
def test_traffic_of_a_stage_on_a_profile(placement: str) -> None:
    """One table for every option set, as a plan uses it: each range's IPU (its stage_ops, a wrapped head's with
    range 0..) against the oracle; and stage_ops is the layers' operations (the unlayered and a wrapped head's
    with range 0..)."""
    import numpy as np

    from popliner.analysis import scenario
    from popliner.memory.stages import range_ops
    from popliner.memory.training import TrainingOptions
    from popliner.pod.search import TrafficTable

    table = TrafficTable.of(scenario(_traffic_base(), TrainingOptions(optimizer_state="off-chip")))
    analysis = scenario(_traffic_base(), TrainingOptions(optimizer_state="off-chip", head_placement=placement))
    facts = analysis.facts
    ranges = analysis.range_table(2**40)
    n = ranges.num_layers
    assert table.of_stages(ranges, ((0, n - 1),), True, 1)[0].state_bytes > 0 and bool(table.weight.any())
    for i in range(n):
        for j in range(i, n):
            ops = range_ops(facts, i, j)
            if i == 0 and ranges.head_wraps:
                ops = np.union1d(ops, range_ops(facts, facts.head_layer, facts.head_layer))
            assert ranges.stage_ops(i, j).tolist() == ops.tolist()
            shard = 1 + (i + j) % 3
            (got,) = table.of_stages(ranges, ((i, j),), True, shard)
            assert (got.gradient_bytes, got.state_bytes) == _traffic_oracle(table, ops, shard), (i, j)


@pytest.mark.parametrize("compiled", ["on-chip", "off-chip"])
def test_the_traffic_table_keeps_each_operations_weights_and_state(compiled: str, tmp_path: Path) -> None:
    """TrafficTable.of against a loop over the operations: a weight is always live, no state, used by a forward
    operation and by an update; each operation keeps its weights' entries and (compiled off chip: only a remote
    load's or store's) its state's, in order, each variable under one slot of its own."""
    import numpy as np

    from popliner.analysis import scenario
    from popliner.memory.training import TrainingOptions
    from popliner.ops.remote import remote_update_operations, streamed_state_variables
    from popliner.pod.search import TrafficTable
    from popliner.synth import generate_document, preset_spec

    if compiled == "on-chip":
        base = _traffic_base()
    else:
        spec = preset_spec("bert-tiny", "training", layers=3, framework="poptorch", optimizer_state="off-chip")
        path = tmp_path / "off-chip.json"
        path.write_text(json.dumps(generate_document(spec)))
        base = load_analysis(str(path), use_cache=False).base
    assert base.state_off_chip == (compiled == "off-chip")
    analysis = scenario(base, TrainingOptions(optimizer_state="off-chip"))
    facts, ops = analysis.facts, analysis.facts.ops
    update, backward = facts.view.is_update, facts.is_backward
    rows = [ops.var_idx[ops.var_ptr[k]:ops.var_ptr[k + 1]].tolist() for k in range(ops.count)]
    by_update = {v for k, row in enumerate(rows) if update[k] for v in row}
    by_forward = {v for k, row in enumerate(rows) if not update[k] and not backward[k] for v in row}
    state = set(np.flatnonzero(facts.view.optimizer_state).tolist())
    users = set(range(ops.count))
    if base.state_off_chip:
        count = analysis.profile.variables.count
        state |= set(np.flatnonzero(streamed_state_variables(ops, analysis.is_backward, analysis.profile.contexts,
                                                             count)).tolist())
        users = set(np.flatnonzero(remote_update_operations(ops, analysis.is_backward,
                                                            analysis.profile.contexts)).tolist())
    live = facts.always_live_var
    weights = {v for v in by_update & by_forward if live[v] and v not in state}
    table = TrafficTable.of(analysis)
    slot_of: dict[int, int] = {}
    nbytes = analysis.profile.variables.bytes
    for k, row in enumerate(rows):
        kept = [v for v in row if v in weights or (v in state and k in users)]
        slots = table.slot[table.ptr[k]:table.ptr[k + 1]].tolist()
        assert len(slots) == len(kept), k
        for v, slot in zip(kept, slots, strict=True):
            assert slot_of.setdefault(v, slot) == slot
            assert (bool(table.weight[slot]), int(table.nbytes[slot])) == (v in weights, int(nbytes[v]))
    assert len(set(slot_of.values())) == len(slot_of) == table.nbytes.size and weights and state


_TRAFFIC_BASE: list[Any] = []


def _traffic_base() -> Any:
    if not _TRAFFIC_BASE:
        from popliner.base import AnalysisOptions

        _TRAFFIC_BASE.append(load_analysis(str(FIXTURES / "bert-base-training.json.gz"),
                                           AnalysisOptions(mode="training"), use_cache=False).base)
    return _TRAFFIC_BASE[0]

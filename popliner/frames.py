"""pandas DataFrames of an analysed profile, for notebooks.

An example session is the README's ('A typical session', "In a notebook").
Every frame has typed columns: ``string`` for names, ``int64`` for bytes,
counts and cycles, nullable ``Int64`` where a figure may be missing. The
frames hold the same figures as the CSV tables (``popliner PROFILE
--layer-breakdown`` and friends); column names are snake_case identifiers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from popliner.analysis import Analysis, AnalysisOptions, load_analysis
from popliner.dataframes import component_columns, typed
from popliner.errors import UsageProblem
from popliner.hardware import DEFAULT_LINK_BANDWIDTH
from popliner.memory.training import TrainingOptions
from popliner.memory.types import components

if TYPE_CHECKING:
    from popliner.breakdown import LayerMatrix
    from popliner.plan import SplitPlan
    from popliner.pod.plan import PodPlan
    from popliner.solvers.result import SplitResult

__all__ = ["Model", "analysis_options", "load"]

def load(path: str, *, use_cache: bool = True, cache_dir: str | None = None, num_ipus: int = 4,
         **options: Any) -> Model:
    """Load and analyse a profile; ``options`` are :class:`popliner.analysis.AnalysisOptions` fields and
    :class:`popliner.memory.training.TrainingOptions` fields.

    The tables (:meth:`Model.layers` and the others) read the training options a split over ``num_ipus``
    IPUs resolves to, as the command line's tables do for its ``--num-ipus`` (default 4 in both).

    For example ``layer_preset="gpt2"``, ``layer_name_regex=r"block(\\d+)"``,
    ``mode="training"``, ``layered_vars_only=False``, and the training options as the CLI spells them
    with underscores: ``recompute="every-layer"``, ``optimizer_state="off-chip"``,
    ``head_placement="wrap"``, ``replication_factor=4`` (or a whole ``training=TrainingOptions(...)``).
    """
    from popliner.scenario import TrainingRequest, tables_scenario

    given = _given_choices(options)
    analysis = load_analysis(str(path), analysis_options(options), use_cache=use_cache, cache_dir=cache_dir)
    request = TrainingRequest(given.get("recompute"), given.get("head_placement"), given.get("optimizer_state"),
                              analysis.options.training)
    return Model(tables_scenario(analysis, request, num_ipus), given)


#: The training choices a plan resolves when they are not given (popliner.scenario.resolve).
_CHOICES = ("recompute", "head_placement", "optimizer_state")


def _given_choices(options: dict[str, Any]) -> dict[str, Any]:
    """The recomputation, head placement and optimizer state given to :func:`load`, for its plans."""
    training = options.get("training")
    if isinstance(training, TrainingOptions):
        return {name: getattr(training, name) for name in _CHOICES}
    return {name: options[name] for name in _CHOICES if name in options}


def analysis_options(options: dict[str, Any]) -> AnalysisOptions:
    """:class:`AnalysisOptions` from keywords, the training options among them (one line on a bad name)."""
    names = {f.name for f in dataclasses.fields(AnalysisOptions)}
    training_names = {f.name for f in dataclasses.fields(TrainingOptions)}
    unknown = sorted(set(options) - names - training_names)
    if unknown:
        raise UsageProblem(f"unknown option(s) {', '.join(unknown)}; expected some of "
                           f"{', '.join(sorted(names | training_names))}")
    training = {k: options.pop(k) for k in sorted(training_names & set(options))}
    if training and "training" in options:
        raise UsageProblem(f"give the training options either as training=TrainingOptions(...) or as keywords "
                           f"({', '.join(training)}), not both")
    if training:
        options["training"] = TrainingOptions(**training)
    if isinstance(options.get("op_layers"), list):
        options["op_layers"] = tuple(options["op_layers"])
    return AnalysisOptions(**options)


@dataclass(frozen=True, eq=False)
class Model:
    """An analysed profile with DataFrame views. ``analysis`` is the full library object.

    ``given``: the recomputation, head placement and optimizer state given to
    :func:`load`; :meth:`plan` and :meth:`solve` resolve the others as the
    command line does (the framework's defaults, then the profile's compiled facts).
    """

    analysis: Analysis
    given: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __repr__(self) -> str:
        a = self.analysis
        return (f"<popliner.Model {a.profile.path}: {a.mode}, {a.ops.count:,} operations, "
                f"{len(a.layer_names)} layers, framework {a.framework.name}>")

    @property
    def layer_names(self) -> tuple[str, ...]:
        return self.analysis.layer_names

    @property
    def mode(self) -> str:
        return self.analysis.mode

    def layers(self) -> pd.DataFrame:
        """One row per layer (the layer as a stage of its own): components summed over tiles, worst tile, cycles."""
        from popliner.breakdown import layer_rows

        rows = layer_rows(self.analysis)
        return typed(pd.DataFrame({
            "layer": [r.layer for r in rows],
            "operations": [r.num_operations for r in rows],
            **component_columns([r.memory for r in rows]),
            "worst_tile": [r.worst_tile for r in rows],
            "worst_tile_bytes": [r.worst_tile_bytes for r in rows],
            "cycles": [r.cycles for r in rows],
        }), strings=("layer",))

    def operations(self) -> pd.DataFrame:
        """One row per operation in step order: its layer (``<NA>`` without one), how it got it, its memory alone."""
        from popliner.breakdown import operation_rows

        rows = operation_rows(self.analysis)
        frame = pd.DataFrame({
            "position": [r.position for r in rows],
            "layer": [r.layer for r in rows],
            "note": [r.note for r in rows],
            "name": [r.name for r in rows],
            "first_step": [r.first_step for r in rows],
            "last_step": [r.last_step for r in rows],
            **component_columns([r.memory for r in rows]),
            "cycles": [int(c) for c in self.analysis.op_cycles],
        })
        frame = typed(frame, strings=("layer", "name"))
        frame["note"] = frame["note"].astype("category")
        return frame

    def totals(self) -> pd.DataFrame:
        """Model totals per memory category beside the profile's own figures (``<NA>`` when it has none)."""
        from popliner.breakdown import profile_totals

        rows = profile_totals(self.analysis)
        # Machine keys for notebooks (the component names of the other frames), titles as in the Totals table.
        keys = (*components(self.analysis.model.has_other), "total_summed_over_tiles", "total_worst_tile",
                "total_least_covered_tile")
        return pd.DataFrame({
            "category": pd.array(keys[: len(rows)], dtype="string"),
            "title": pd.array([r.category for r in rows], dtype="string"),
            "model_bytes": pd.array([r.model for r in rows], dtype="int64"),
            "profile_bytes": pd.array([r.ground_truth for r in rows], dtype="Int64"),
        })

    def affinity(self) -> pd.DataFrame:
        """Layer x layer bytes of variables both layers use (the diagonal: all a layer uses)."""
        from popliner.breakdown import affinity_matrix

        return _matrix(affinity_matrix(self.analysis))

    def interlayer(self) -> pd.DataFrame:
        """Layer x layer bytes of variables that go live in the row's layer and die in the column's."""
        from popliner.breakdown import interlayer_matrix

        return _matrix(interlayer_matrix(self.analysis))

    def solve(self, num_ipus: int = 4, *, mem_per_tile: int | None = None, headroom: float | None = None,
              exact_ipus: bool = False, solver: str = "ilp", time_limit: float = 60.0, seed: int = 0,
              link_bytes_per_second: float = DEFAULT_LINK_BANDWIDTH, **constraints: Any) -> SplitResult:
        """Split the layers over at most ``num_ipus`` IPUs: the split of :meth:`plan` (the command line's
        ``--solve``), with ``constraints`` as :class:`popliner.plan.SplitRequest` names them
        (``min_layers``, ``split_after``, ``same_ipu``, ``keep_shared_together``) and ``headroom``
        defaulting as everywhere (:meth:`popliner.base.ProfileBase.budget`).
        """
        plan = self.plan(num_ipus=num_ipus, ipus="exactly" if exact_ipus else "at-most", mem_per_tile=mem_per_tile,
                         headroom=headroom, solver=solver, time_limit=time_limit, seed=seed,
                         link_bandwidth=link_bytes_per_second, fit_facts=False, suggest=False, **constraints)
        return plan.split

    def plan_pod(self, ipus: int, **request: Any) -> PodPlan:
        """Every configuration of a pod of ``ipus`` IPUs, ranked (``request``: :class:`popliner.pod.PodRequest`
        fields such as ``global_batch``, ``micro_batch``, ``recompute``; docs/pod-planner.md)."""
        from popliner.pod.plan import PodRequest, plan_pod

        return plan_pod(self.analysis, PodRequest(pod_ipus=ipus, **request))

    def plan(self, **request: Any) -> SplitPlan:
        """The command line's ``--solve`` workflow, with its defaults: ``request`` holds
        :class:`popliner.plan.SplitRequest` fields.

        For example ``plan(num_ipus=8, ipus="fewest", recompute="auto")``; the
        plan carries the split (``.split.to_frame()``), the training options
        applied (``.recompute_applied``, ``.training``), ``.facts`` (fewest IPUs)
        and, when nothing fits in training, ``.suggestion``.
        """
        from popliner.plan import SplitRequest, plan_split

        names = {f.name for f in dataclasses.fields(SplitRequest)}
        unknown = sorted(set(request) - names)
        if unknown:
            raise UsageProblem(f"unknown request field(s) {', '.join(unknown)}; expected some of "
                               f"{', '.join(sorted(names))}")
        for key in ("split_after", "same_ipu"):
            if isinstance(request.get(key), list):
                request[key] = tuple(tuple(x) if isinstance(x, list) else x for x in request[key])
        for name in _CHOICES:
            request.setdefault(name, self.given.get(name))
        return plan_split(self.analysis, SplitRequest(**request))


def _matrix(matrix: LayerMatrix) -> pd.DataFrame:
    index = pd.Index(list(matrix.layers), dtype="string", name="layer")
    frame = pd.DataFrame(matrix.values.astype("int64"), index=index, columns=index.copy())
    frame.attrs["title"] = matrix.title
    return frame

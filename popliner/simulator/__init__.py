"""The bundled pipeline simulator: PopART's pipeline schedule against a time and memory model."""

from popliner.simulator.engine import (
    DEFAULT_LINK_BANDWIDTH,
    DEFAULT_SYNC_CYCLES,
    CycleTiming,
    FragmentTiming,
    IpuSummary,
    SimResult,
    SimStage,
    simulate,
)
from popliner.simulator.schedule import (
    Fragment,
    num_cycles,
    phase_of_cycle,
    render_ipu_view,
    render_stage_view,
    schedule,
)

__all__ = [
    "DEFAULT_LINK_BANDWIDTH",
    "DEFAULT_SYNC_CYCLES",
    "CycleTiming",
    "Fragment",
    "FragmentTiming",
    "IpuSummary",
    "SimResult",
    "SimStage",
    "num_cycles",
    "phase_of_cycle",
    "render_ipu_view",
    "render_stage_view",
    "schedule",
    "simulate",
]

"""Near choices: a split engineers often pick instead of popliner's, and how far it is on the step model.

The split compared (an embedding-only IPU 0, as the TensorFlow 2 BERT
pretraining configs of graphcore/examples map ``[emb] [4 layers] [4 layers]
[4 layers] [heads]`` onto IPUs ``[0, 1, 2, 3, 0]``), solved by
:func:`popliner.plan.plan_split` over the same IPUs, the step model
(:func:`popliner.pod.plan.pipeline_step`) and when the summary says so
(:data:`NEAR_SHARE`, or the request's ``near_share``): docs/solvers.md ("Near choices"), with an example worked by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NEAR_SHARE", "NearChoice", "near_text"]

#: How close (a fraction of the pick's step) an alternative must be to be shown.
NEAR_SHARE = 0.05


@dataclass(frozen=True)
class NearChoice:
    """An alternative split and popliner's pick, each with its layers per IPU and its step in seconds."""

    what: str
    layers_per_ipu: tuple[int, ...]
    seconds: float
    pick_layers_per_ipu: tuple[int, ...]
    pick_seconds: float
    micro_batches: int

    @property
    def share(self) -> float:
        """How much longer the alternative's step is than the pick's (negative: shorter)."""
        return (self.seconds - self.pick_seconds) / self.pick_seconds if self.pick_seconds > 0 else 0.0

    def is_near(self, limit: float = NEAR_SHARE) -> bool:
        """Is it within ``limit`` of the pick (a fraction of its step), or faster, and so said?"""
        return self.share <= limit

    def line(self) -> str:
        """``within 1.8 %: [0,4,4,4] (an embedding-only IPU 0) at 12.3 ms per step; popliner's [1,4,4,3] at 12.1 ms``"""
        share = self.share
        head = f"within {share * 100:.1f} %" if share >= 0 else f"{-share * 100:.1f} % faster"
        return (f"{head}: {_counts(self.layers_per_ipu)} ({self.what}) at {near_text(self.seconds)} per step; "
                f"popliner's {_counts(self.pick_layers_per_ipu)} at {near_text(self.pick_seconds)} "
                f"(step model: one replica, G = {self.micro_batches})")


def _counts(counts: tuple[int, ...]) -> str:
    return "[" + ",".join(str(c) for c in counts) + "]"


def near_text(seconds: float) -> str:
    """A step in ms with four significant figures (µs below a millisecond)."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.4g} µs"
    return f"{seconds * 1e3:.4g} ms"

"""The pod planner: every configuration of a pod of IPUs, ranked by predicted throughput (docs/pod-planner.md)."""

from popliner.pod.model import PodConstants, StepTime
from popliner.pod.plan import PodConfig, PodPlan, PodRequest, plan_pod

__all__ = ["PodConfig", "PodConstants", "PodPlan", "PodRequest", "StepTime", "plan_pod"]

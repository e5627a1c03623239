"""Which framework compiled a profile: PopART, PopTorch, optimum-graphcore, TensorFlow or PopXL.

The framework decides what a pipeline config turns into (how blocks get
their pipeline stages, what it recomputes by itself, where a head goes), so
popliner records it in every output. Where the choice comes from, in order,
and where it is recorded: docs/frameworks.md ('Which framework').
:func:`framework_of_layers` is the debug-context step, which ``popliner
export`` also calls to write ``source.framework``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

from popliner.errors import UsageProblem
from popliner.profile.model import Profile

__all__ = ["FRAMEWORKS", "Framework", "FrameworkChoice", "choose_framework", "detect_framework",
           "framework_of_layers", "framework_title", "parse_framework"]

Framework = Literal["popart", "poptorch", "optimum", "tensorflow", "popxl"]
FRAMEWORKS: tuple[Framework, ...] = ("popart", "poptorch", "optimum", "tensorflow", "popxl")

#: Debug-context layer -> framework, strongest first (a PopTorch profile also has PopART's layers).
_BY_LAYER: tuple[tuple[str, Framework], ...] = (
    ("poptorch", "poptorch"),
    ("popxl", "popxl"),
    ("xla_op", "tensorflow"),
    ("tensorflow", "tensorflow"),
    ("popart", "popart"),
    ("popartbuilder", "popart"),
    ("onnx", "popart"),
)

#: ``source.framework`` spellings exporters use for a framework.
_ALIASES: dict[str, Framework] = {
    "optimum-graphcore": "optimum",
    "optimum_graphcore": "optimum",
    "tf": "tensorflow",
    "xla": "tensorflow",
}

_TITLES: dict[Framework, str] = {
    "popart": "PopART",
    "poptorch": "PopTorch",
    "optimum": "optimum-graphcore",
    "tensorflow": "TensorFlow",
    "popxl": "PopXL",
}


@dataclass(frozen=True)
class FrameworkChoice:
    """The framework and where popliner got it: ``option``, ``source``, ``contexts`` or ``default``."""

    name: Framework
    origin: Literal["option", "ipu-config-out", "source", "contexts", "default"]
    #: The debug-context layer that decided it (``origin == "contexts"``); with ``ipu-config-out`` (an optimum
    #: config asked for, no ``--framework``) what the profile itself says; else "".
    evidence: str = ""

    def describe(self) -> str:
        """``PopTorch (from the debug contexts: poptorch)`` and the like, for summaries and reports."""
        said = {"option": "--framework",
                "ipu-config-out": f"--ipu-config-out writes its IPUConfig; the profile says {self.evidence}",
                "source": "the profile's source.framework",
                "contexts": f"debug contexts of layer {self.evidence}",
                "default": "default: no framework named in the profile"}[self.origin]
        return f"{framework_title(self.name)} ({said})"

    def as_document(self) -> dict[str, str]:
        """The ``framework`` record of the JSON and YAML outputs."""
        out: dict[str, str] = {"name": self.name, "from": self.origin}
        if self.evidence:
            out["evidence"] = self.evidence
        return out


def framework_title(name: str) -> str:
    """The framework's own spelling (``PopTorch``), for people."""
    return _TITLES.get(cast(Framework, name), name)


def parse_framework(text: str, where: str = "--framework") -> Framework:
    """A framework name as the user or a file gives it; one-line error otherwise."""
    value = _known(text)
    if value is None:
        raise UsageProblem(f"{where}: unknown framework {text!r}; use one of {', '.join(FRAMEWORKS)}")
    return value


def _known(text: str) -> Framework | None:
    """The framework a name or alias stands for, else None."""
    key = text.strip().lower()
    return _ALIASES.get(key) or next((f for f in FRAMEWORKS if f == key), None)


def framework_of_layers(layers: set[str] | frozenset[str]) -> tuple[Framework, str] | None:
    """The framework the debug-context layers point at, with the deciding layer; None when none does."""
    for layer, name in _BY_LAYER:
        if layer in layers:
            return name, layer
    return None


def detect_framework(profile: Profile) -> FrameworkChoice:
    """The framework of a profile without an override: ``source.framework``, else its debug contexts."""
    named = profile.source.get("framework") if isinstance(profile.source, dict) else None
    value = _known(named) if isinstance(named, str) else None
    if value is not None:
        return FrameworkChoice(value, "source")
    found = framework_of_layers(frozenset(profile.contexts.layer))
    if found is not None:
        return FrameworkChoice(found[0], "contexts", found[1])
    return FrameworkChoice("popart", "default")


def choose_framework(profile: Profile, override: str | None = None, for_ipu_config: bool = False) -> FrameworkChoice:
    """``override`` (``--framework``) when given; else optimum-graphcore when an optimum config is asked for
    (``for_ipu_config``: its pipeline is the one to plan; the choice says what the profile itself names), else
    :func:`detect_framework`."""
    if override:
        return FrameworkChoice(parse_framework(override), "option")
    found = detect_framework(profile)
    if for_ipu_config and found.name != "optimum":
        return FrameworkChoice("optimum", "ipu-config-out", found.describe())
    return found

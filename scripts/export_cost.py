"""Time and peak memory of ``popliner export`` on a full-size report, through a libpva-like double.

Real libpva hands out pybind11 objects: every attribute read is a call, every
list read (``controlCodeByTile``, ``children``, ``vars``) builds a fresh
Python list, and ``allBriefVars`` yields a new object per variable. The
report built here does the same, lazily, so that the process holds what the
exporter holds and not a prebuilt copy of the report:

- ``--vars`` lowered variables (the measure: time and memory per million),
  spread over ``--tiles`` tiles, in ``--classes`` liveness classes;
- ``--programs`` programs under one Sequence, a third each OnTileExecute
  (four vertex types), DoExchange and Copy, each with a per-tile control-code
  list, ten variables and a debug context of its own under one of 64 layer
  contexts; one liveness step per program;
- ``pva.OperationAnalysis`` listing one operation per program, with an
  empty ``replacedDebugContext``, as real libpva has for most operations.

Run ``python scripts/export_cost.py --vars 1000000`` from the repository
root in a fresh process; it prints one JSON line: seconds for the export,
seconds inside ``OperationAnalysis`` (building and listing operations), and
the CPU seconds of the export (user + system: steadier than the wall
clock on a shared machine), and the peak resident memory (``ru_maxrss``)
with the resident memory before the export, both in MiB.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from popliner.export import export_report  # noqa: E402


class Enum:
    def __init__(self, name: str) -> None:
        self.name = name


ON_TILE, EXCHANGE, COPY, SEQUENCE = Enum("OnTileExecute"), Enum("DoExchange"), Enum("Copy"), Enum("Sequence")


class Interval:
    __slots__ = ("_s",)

    def __init__(self, s: int) -> None:
        self._s = s

    @property
    def start(self) -> int:
        return self._s

    @property
    def end(self) -> int:
        return self._s + 7


class EqClass:
    __slots__ = ("_k", "_steps")

    def __init__(self, k: int, steps: int) -> None:
        self._k = k
        self._steps = steps

    @property
    def id(self) -> int:
        return self._k

    @property
    def steps(self) -> list[Interval]:
        return [Interval((self._k * 13) % max(1, self._steps - 8))]


class BriefVar:
    __slots__ = ("_i", "_r")

    def __init__(self, i: int, report: Report) -> None:
        self._i = i
        self._r = report

    @property
    def id(self) -> int:
        return self._i

    @property
    def bytes(self) -> int:
        return 4 + (self._i * 37) % 4096

    @property
    def tileId(self) -> int:  # noqa: N802 - libpva's name
        return (self._i * 7) % self._r.tiles

    @property
    def equivalenceClass(self) -> EqClass:  # noqa: N802 - libpva's name
        return EqClass(self._i % self._r.classes, self._r.steps)


class BriefVars:
    """``loweredVariables.allBriefVars``: a sized sequence that makes each object when read."""

    def __init__(self, report: Report) -> None:
        self._r = report

    def __len__(self) -> int:
        return self._r.vars

    def __iter__(self) -> Iterator[BriefVar]:
        return (BriefVar(i, self._r) for i in range(self._r.vars))


class Ref:
    __slots__ = ("_id",)

    def __init__(self, i: int) -> None:
        self._id = i


class Context:
    __slots__ = ("_k",)

    def __init__(self, k: int) -> None:
        self._k = k

    @property
    def id(self) -> int:
        return self._k

    @property
    def layer(self) -> str:
        return json.dumps({"layer": "popart" if self._k < 64 else "poplibs"})

    @property
    def json(self) -> str:
        return json.dumps({"name": f"Layer{self._k % 64}/op{self._k}", "inputs": [f"t{self._k}"]})

    @property
    def parents(self) -> list[Context]:
        return [] if self._k < 64 else [Context(self._k % 64)]


class Program:
    __slots__ = ("_i", "_r")

    def __init__(self, i: int, report: Report) -> None:
        self._i = i
        self._r = report

    @property
    def _id(self) -> int:
        return self._i

    @property
    def name(self) -> str:
        return f"Layer{self._i % 64}/op{self._i}"

    @property
    def type(self) -> Enum:
        return SEQUENCE if self._i == 0 else (ON_TILE, EXCHANGE, COPY)[self._i % 3]

    @property
    def children(self) -> list[Program]:
        return [Program(i, self._r) for i in range(1, self._r.programs)] if self._i == 0 else []

    # A fresh list per read, as pybind11 converts a std::vector each time (copied from one of 16 patterns).
    @property
    def controlCodeByTile(self) -> list[int]:  # noqa: N802 - libpva's name
        return self._r.pattern(self._i, 97)[:]

    @property
    def codeBytesByTile(self) -> list[int]:  # noqa: N802 - libpva's name
        return self._r.pattern(self._i, 61)[:]

    @property
    def computeset(self) -> Any:
        if self.type is not ON_TILE:
            return None
        vertices = [types.SimpleNamespace(type=types.SimpleNamespace(name=f"V{k}", size=8 * (k + 1)),
                                          countByTile=self._r.pattern(self._i + k, 5)[:])
                    for k in range(4)]
        return types.SimpleNamespace(vertices=vertices, estimatedCyclesByTile=[])

    @property
    def vars(self) -> list[Ref]:
        return [Ref((self._i * 101 + k * 7919) % self._r.vars) for k in range(10)]

    @property
    def debugContext(self) -> Context:  # noqa: N802 - libpva's name
        return Context(64 + self._i)


class Report:
    def __init__(self, vars_: int, programs: int, tiles: int, classes: int) -> None:
        self.vars, self.programs, self.tiles, self.classes, self.steps = vars_, programs, tiles, classes, programs
        target = types.SimpleNamespace(tilesPerIpu=tiles, numTiles=tiles, numIPUs=1, bytesPerTile=638976,
                                       clockFrequency=1.33e9, numReplicas=1, type=Enum("Ipu"),
                                       architecture=Enum("Ipu2"))
        tile_list = [types.SimpleNamespace(memory=types.SimpleNamespace(
            vertices=[types.SimpleNamespace(type=types.SimpleNamespace(name=f"V{k}"), codeBytes=100 + k)
                      for k in range(4)],
            alwaysLiveBytes=1000, notAlwaysLiveBytes=2000, category=None)) for _ in range(tiles)]
        self.compilation = types.SimpleNamespace(
            target=target, tiles=tile_list,
            programs=_Programs(self),
            livenessProgramSteps=[types.SimpleNamespace(program=Program(1 + i % (programs - 1), self))
                                  for i in range(programs)],
            loweredVariables=types.SimpleNamespace(allBriefVars=BriefVars(self)))
        self.poplarVersion = types.SimpleNamespace(string="export_cost double")
        self._patterns: dict[tuple[int, int], list[int]] = {}

    def pattern(self, i: int, mod: int) -> list[int]:
        key = (i % 16, mod)
        if key not in self._patterns:
            self._patterns[key] = [(key[0] + t) % mod for t in range(self.tiles)]
        return self._patterns[key]


class _Programs:
    def __init__(self, report: Report) -> None:
        self._r = report

    def __len__(self) -> int:
        return self._r.programs

    def __iter__(self) -> Iterator[Program]:
        return (Program(i, self._r) for i in range(self._r.programs))


class Operation:
    __slots__ = ("_i", "_r")

    def __init__(self, i: int, report: Report) -> None:
        self._i = i
        self._r = report

    @property
    def name(self) -> str:
        return f"op{self._i}"

    @property
    def debugContext(self) -> Context:  # noqa: N802 - libpva's name
        return Context(64 + self._i)

    @property
    def replacedDebugContext(self) -> list[Context]:  # noqa: N802 - libpva's name
        return []

    def programs(self) -> list[Program]:
        return [Program(self._i, self._r)]


def make_module(report: Report, timer: list[float]) -> types.ModuleType:
    module = types.ModuleType("pva", "export_cost's libpva-like double")
    module.openReport = lambda profile, debug=None: report  # type: ignore[attr-defined]

    def operation_analysis(rep: Report) -> Any:
        t0 = time.perf_counter()
        ops = [Operation(i, rep) for i in range(1, rep.programs)]

        class Timed(list):  # type: ignore[type-arg]
            def __iter__(self) -> Iterator[Any]:
                start = time.perf_counter()
                yield from list.__iter__(self)
                timer[0] += time.perf_counter() - start

        timer[0] += time.perf_counter() - t0
        return types.SimpleNamespace(operations=Timed(ops))

    module.OperationAnalysis = operation_analysis  # type: ignore[attr-defined]
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vars", type=int, default=1_000_000)
    parser.add_argument("--programs", type=int, default=30_000)
    parser.add_argument("--tiles", type=int, default=1472)
    parser.add_argument("--classes", type=int, default=100_000)
    args = parser.parse_args()
    report = Report(args.vars, args.programs, args.tiles, args.classes)
    timer = [0.0]
    module = make_module(report, timer)
    with tempfile.TemporaryDirectory() as tmp:
        pop, cbor = Path(tmp, "profile.pop"), Path(tmp, "debug.cbor")
        pop.write_bytes(b"")
        cbor.write_bytes(b"")
        usage = resource.getrusage(resource.RUSAGE_SELF)
        before, cpu0 = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
        t0 = time.perf_counter()
        summary = export_report(pop, cbor, Path(tmp, "out.json.gz"), pva_module=module)
        seconds = time.perf_counter() - t0
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = usage.ru_utime + usage.ru_stime - cpu0
        size = Path(tmp, "out.json.gz").stat().st_size
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"vars": args.vars, "programs": args.programs, "tiles": args.tiles,
                      "seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2),
                      "operation_analysis_seconds": round(timer[0], 2),
                      "peak_rss_mib": round(peak / 1024), "rss_before_mib": round(before / 1024),
                      "written_variables": summary.variables, "gz_bytes": size}))


if __name__ == "__main__":
    main()

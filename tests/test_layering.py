"""The package's layers, checked from the source: each lower layer imports only what is below it.

profile/ -> ops/ -> memory/ -> pipeline.py -> solvers/: every package (or
module) here may import itself, the layers listed for it, and the leaf
utilities. Every import counts: at module level, inside functions (lazy
imports) and under ``TYPE_CHECKING``, because each of them is a dependency
a reader must follow.

Leaf utilities: ``popliner`` itself (only ``__version__``), ``errors``
(the exception hierarchy), ``fileio`` (atomic output files; the cache writes
through it), ``interrupts`` (signals deferred while a file is being made),
``arrays`` (numpy helpers), ``progress`` (stderr progress) and ``deadline``
(a solve's ``--time-limit``, read by the range tables and the solvers), ``regexes`` (users' regexes
with a time bound) and ``hardware`` (the link figures every layer assumes by default). They import
nothing else from popliner, which is checked too.

The upper half (base -> analysis -> scenario -> plan -> config -> check (its record, baseline and report) /simulate
-> writers -> cli, :data:`UPPER`) imports only down that flow, and no two parts of popliner import each other, however
indirectly.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "popliner"

LEAVES = frozenset({"", "errors", "fileio", "interrupts", "arrays", "progress", "deadline", "regexes", "hardware",
                    "allocator"})

#: Layer -> what it may import besides itself and the leaves.
ALLOWED: dict[str, frozenset[str]] = {
    "profile": frozenset(),
    # layout: where the embedding and the head go (names only; it imports nothing of popliner). The head
    # grouping (ops/head.py) names the two layers it makes after it.
    "ops": frozenset({"profile", "layout"}),
    "layout": frozenset(),
    "memory": frozenset({"profile", "ops", "layout"}),
    "pipeline": frozenset({"profile", "ops", "layout", "memory"}),
    # dataframes: typed pandas columns for SplitResult.to_frame (it imports only memory).
    "solvers": frozenset({"profile", "ops", "layout", "memory", "pipeline", "dataframes"}),
    "dataframes": frozenset({"memory"}),
}
#: Leaf -> the other leaves it may import.
LEAF_IMPORTS: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "arrays": frozenset(),
    "progress": frozenset(),
    "interrupts": frozenset(),
    "deadline": frozenset(),
    "hardware": frozenset(),
    "fileio": frozenset({"errors", "interrupts"}),
    "regexes": frozenset({"errors"}),
    # The loader gives the parsed text's pages back (give_back_freed_memory); numpy's huge-page switch is in arrays.
    "allocator": frozenset({"arrays"}),
}


def imported(path: Path, package: Path) -> list[tuple[int, str]]:
    """(line, top-level part of popliner it names) of every popliner import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    here = path.relative_to(package.parent).with_suffix("").parts  # ("popliner", "memory", "engine")
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = list(here[: len(here) - node.level])
                names = [".".join(base + ([node.module] if node.module else []))]
            elif node.module:
                names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == package.name:
                found.append((node.lineno, parts[1] if len(parts) > 1 else ""))
    return found


def layer_of(path: Path, package: Path) -> str:
    rel = path.relative_to(package)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def violations(package: Path) -> list[str]:
    out = []
    for path in sorted(package.rglob("*.py")):
        layer = layer_of(path, package)
        if layer in ALLOWED:
            allowed = ALLOWED[layer] | LEAVES | {layer}
        elif layer in LEAF_IMPORTS:
            allowed = LEAF_IMPORTS[layer] | {layer}
        else:
            continue
        for line, target in imported(path, package):
            if target not in allowed:
                where = path.relative_to(package.parent)
                out.append(f"{where}:{line}: {layer} imports popliner.{target or '__init__'}")
    return out


def test_layers_import_only_what_is_below_them() -> None:
    assert violations(PACKAGE) == []


def test_the_check_finds_a_violation(tmp_path: Path) -> None:
    # A small tree with one import of each kind that breaks a rule, and allowed ones beside them.
    pkg = tmp_path / "popliner"
    for sub in ("profile", "solvers", "memory"):
        (pkg / sub).mkdir(parents=True)
    (pkg / "profile" / "cache.py").write_text("from popliner.ops.operations import OperationTable\n"
                                              "from popliner.errors import ProfileFormatError\n")
    (pkg / "solvers" / "result.py").write_text("def f():\n    from popliner.frames import split_frame\n")
    (pkg / "memory" / "engine.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                              "    from ..cli import cli\nfrom . import model\n")
    (pkg / "errors.py").write_text("import popliner.fileio\n")
    assert violations(pkg) == [
        "popliner/errors.py:1: errors imports popliner.fileio",
        "popliner/memory/engine.py:3: memory imports popliner.cli",
        "popliner/profile/cache.py:1: profile imports popliner.ops",
        "popliner/solvers/result.py:2: solvers imports popliner.frames",
    ]


# ------------------------------------------------------------------ the upper half

#: The upper half, in the order the work flows: the library's analysis, the training options chosen and
#: recorded, the review tables, the plan, the pipeline config made from a plan, the commands that read a
#: config (check, simulate), the report's data, the writers of every output, the notebook API and the command
#: line on top. A part may import the parts before it (and the lower half), never one after it.
UPPER: tuple[str, ...] = ("base", "analysis", "training_choice", "training_record", "scenario", "breakdown", "plan",
                          "config", "check", "checkrecord", "baseline", "checkfile", "checkreport", "simulator",
                          "report", "writers", "frames", "cli")

#: Parts outside both flows, still held to "no cycle": the package's entry points, helpers the upper half
#: shares (framework names, defaults, near choices, terminal-safe text), the pod planner and the
#: commands of their own (synth, export).
PLACED_ELSEWHERE: frozenset[str] = frozenset({"__init__", "__main__", "defaults", "export", "framework",
                                              "near", "pod", "synth", "textsafe"})


def package_edges(package: Path) -> dict[str, set[str]]:
    """Part -> the other parts of popliner it imports (every import, lazy ones included)."""
    edges: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        layer = layer_of(path, package)
        edges.setdefault(layer, set()).update(t for _, t in imported(path, package) if t != layer)
    return edges


def back_edges(package: Path) -> set[tuple[str, str]]:
    rank = {name: k for k, name in enumerate(UPPER)}
    return {(a, t) for a, targets in package_edges(package).items() if a in rank
            for t in targets if t in rank and rank[t] > rank[a]}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one member (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for v in sorted(set(edges) | {t for ts in edges.values() for t in ts}):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_upper_half_imports_only_down_the_flow() -> None:
    assert back_edges(PACKAGE) == set()


def test_no_cycle_between_packages() -> None:
    # Every part of popliner, the lower half, the leaves, pod/, synth/ and export/ included.
    assert cycles(package_edges(PACKAGE)) == []


def test_every_upper_part_is_placed() -> None:
    # A new module or package at the top of popliner/ must take its place in the flow (or in the lower half).
    parts = set(package_edges(PACKAGE)) - set(UPPER) - set(ALLOWED) - LEAVES - set(LEAF_IMPORTS)
    assert parts == PLACED_ELSEWHERE


def test_the_cycle_check_finds_a_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "popliner"
    for sub in ("config", "writers"):
        (pkg / sub).mkdir(parents=True)
    (pkg / "config" / "model.py").write_text("from popliner.writers import x\n")
    (pkg / "writers" / "yaml.py").write_text("def f():\n    from popliner.config.model import y\n")
    (pkg / "plan.py").write_text("import popliner.config\n")
    assert cycles(package_edges(pkg)) == [["config", "writers"]]
    assert back_edges(pkg) == {("config", "writers"), ("plan", "config")}

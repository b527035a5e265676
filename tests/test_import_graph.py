"""The import graph of `worker/`: every import points down the layers and no modules import each other
in a circle. Read from the source (every import statement, also those inside functions; not those
under `if TYPE_CHECKING:`), so nothing needs to be importable to be checked."""

from __future__ import annotations

import ast
from pathlib import Path

import worker

PACKAGE = Path(worker.__file__).resolve().parent

# Bottom first. A unit (a top-level module or folder of worker/) may import only units of lower layers.
LAYERS: list[set[str]] = [
    {"_native", "messages", "settings", "control_chars"},  # types, settings, the compiled dispatcher, text safety
    {"dispatch", "facts", "model", "metrics"},
    {"engine", "ops", "inputs", "incidents", "alerting"},
    {"prompts", "probe", "kafka"},               # prompts own the sampling policy, so they sit above the engine
    {"summarizer", "samples"},                   # records in, summaries out; seeded telemetry with known facts
    {"commands"},                                # every `telesum` command and the runtime they start from
    {"benchmarks", "cli"},                       # `telesum bench`, the entry point
]
LAYER = {unit: n for n, units in enumerate(LAYERS) for unit in units}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def _runtime_nodes(tree: ast.AST):
    """Every node, skipping the bodies of `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def imports_of(name: str) -> set[str]:
    """The worker modules `name` imports (`from pkg import submodule` counts as the submodule)."""
    out = set()
    for node in _runtime_nodes(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "worker"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "worker":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in MODULES or alias.name == "_native" else node.module)
    return {m for m in out if m != name}


def unit(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "worker"


GRAPH = {name: imports_of(name) for name in MODULES}


def test_every_unit_has_a_layer():
    units = {unit(n) for n in MODULES} - {"worker"}
    assert units <= set(LAYER), f"place these in LAYERS: {sorted(units - set(LAYER))}"


def test_no_import_runs_up_or_across_the_layers():
    wrong = sorted(f"{src} -> {dst}" for src, dsts in GRAPH.items() for dst in dsts
                   if unit(src) != "worker" and unit(dst) != unit(src) and LAYER[unit(dst)] >= LAYER[unit(src)])
    assert not wrong, wrong


def test_no_modules_import_each_other_in_a_circle():
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for dst in sorted(GRAPH.get(name, ())):
            if state.get(dst) == 1:
                return path[path.index(dst):] + [dst]
            if dst not in state and (found := visit(dst)):
                return found
        path.pop()
        state[name] = 2
        return None

    for name in sorted(GRAPH):
        if name not in state:
            circle = visit(name)
            assert circle is None, " -> ".join(circle)


def test_the_checks_catch_an_upward_import_and_a_circle(monkeypatch):
    monkeypatch.setitem(GRAPH, "worker.messages", GRAPH["worker.messages"] | {"worker.facts.common"})
    try:
        test_no_import_runs_up_or_across_the_layers()
    except AssertionError as exc:
        assert "worker.messages -> worker.facts.common" in str(exc)
    else:
        raise AssertionError("an upward import was not caught")
    try:
        test_no_modules_import_each_other_in_a_circle()
    except AssertionError as exc:
        assert str(exc).split("\n")[0] in ("worker.messages -> worker.facts.common -> worker.messages",
                                             "worker.facts.common -> worker.messages -> worker.facts.common")
    else:
        raise AssertionError("a circle was not caught")

"""Every packing, window and sampling default has one home: a default written again elsewhere under
the same name (a parameter's default, a dataclass or Struct field, the stub, a `getattr` fallback)
either names the home's constant or says the home's value.

The homes: `worker/settings/budgets.py` (packing; `native/dispatcher.h` agrees, see test_budgets.py),
`native/window.h` (the accumulation window's tuning), `EngineSettings` (summary length and sampling).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import worker
from worker.settings import budgets
from worker.settings.sections import EngineSettings

PACKAGE = Path(worker.__file__).resolve().parent
NATIVE = PACKAGE.parent / "native"


def _window_defaults() -> dict[str, float]:
    """WindowConfig's tuning defaults from native/window.h (0 there means "given by the caller")."""
    body = re.search(r"struct WindowConfig \{(.*?)\};", (NATIVE / "window.h").read_text(), re.S).group(1)
    found = {name: float(value) for name, value in re.findall(r"\b(\w+) = ([0-9.]+);", body)}
    return {name: value for name, value in found.items() if value != 0}


_ENGINE = EngineSettings()
HOMES: dict[str, object] = {
    "token_budget": budgets.GPU_TOKEN_BUDGET,
    "max_seqs_per_bin": budgets.GPU_MAX_SEQS_PER_BIN,
    "alignment": budgets.ALIGNMENT,
    "latency_cap_s": budgets.LATENCY_CAP_S,
    "queue_capacity_tokens": budgets.QUEUE_CAPACITY_TOKENS,
    **_window_defaults(),
    "max_new_tokens": _ENGINE.max_new_tokens,
    "temperature": _ENGINE.temperature,
    "top_p": _ENGINE.top_p,
}
# Defaults that still differ from their home, each with what removes it. Keep this empty.
KNOWN: set[tuple[str, str]] = set()


def _restated(tree: ast.AST):
    """(name, default expression, line) for parameter defaults, class fields and getattr fallbacks."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            positional = a.posonlyargs + a.args
            pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults))
            pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
            yield from ((arg.arg, d, node.lineno) for arg, d in pairs)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            yield node.target.id, node.value, node.lineno
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
              and len(node.args) == 3 and isinstance(node.args[1], ast.Constant)):
            yield node.args[1].value, node.args[2], node.lineno


def _literal(expr: ast.expr):
    try:
        return ast.literal_eval(expr)
    except ValueError:
        return None  # a name or a call: it reads a home, or computes


def _second_homes(root: Path, files) -> list[str]:
    out = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        for name, expr, line in _restated(ast.parse(path.read_text())):
            if name not in HOMES or (rel, name) in KNOWN:
                continue
            value = _literal(expr)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value != HOMES[name]:
                out.append(f"{rel}:{line} {name} = {value!r} (home: {HOMES[name]!r})")
    return out


def test_defaults_once_no_second_home_with_another_value():
    files = [p for p in PACKAGE.rglob("*.py") if p.parent.name != "settings" or p.name != "sections.py"]
    wrong = _second_homes(PACKAGE, [*files, PACKAGE / "_native.pyi"])
    assert not wrong, wrong


def test_defaults_once_known_exceptions_still_exist():
    # an entry of KNOWN whose default is gone must leave the list, so the list only shrinks
    for rel, name in KNOWN:
        tree = ast.parse((PACKAGE / rel).read_text())
        assert any(n == name and _literal(e) not in (None, HOMES[name]) for n, e, _ in _restated(tree)), (rel, name)


def test_defaults_once_catches_a_restated_default(tmp_path):
    (tmp_path / "m.py").write_text("def f(latency_cap_s: float = 0.05, top_p=1.0,\n"
                                   "      n=getattr(s, 'max_seqs_per_bin', 64)):\n    pass\n")
    wrong = _second_homes(tmp_path, [tmp_path / "m.py"])
    assert [w.split(" (")[0] for w in wrong] == ["m.py:1 latency_cap_s = 0.05", "m.py:2 max_seqs_per_bin = 64"]


@pytest.mark.parametrize("name", ["rate_tau_s", "idle_fraction", "fixed_max_seqs", "fixed_max_wait_s"])
def test_defaults_once_window_tuning_read_from_window_h(name):
    assert name in HOMES

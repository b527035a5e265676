"""The .pyi stub lists exactly the compiled module's public names."""

from __future__ import annotations

import ast
from pathlib import Path

import worker
import worker.dispatch  # noqa: F401  (gives SequenceTooLong its `reason`)
from worker import _native

STUB = Path(worker.__file__).with_name("_native.pyi")


def _stub_names() -> tuple[set[str], dict[str, set[str]]]:
    tree = ast.parse(STUB.read_text())
    top: set[str] = set()
    members: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            top.add(node.name)
        if isinstance(node, ast.ClassDef):
            members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)
                                  and not n.name.startswith("_")}
            members[node.name] |= {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
    return top, members


def test_native_stub_public_names_match_module() -> None:
    top, members = _stub_names()
    assert top == {n for n in dir(_native) if not n.startswith("_")}
    for cls, names in members.items():
        actual = {n for n in dir(getattr(_native, cls)) if not n.startswith("_")}
        if issubclass(getattr(_native, cls), BaseException):
            actual -= set(dir(BaseException))
        assert names == actual, cls

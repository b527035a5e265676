"""The .pyi stub lists exactly the compiled module's public names, their parameters and defaults."""

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


def _module_parameters(func) -> list[tuple[str, object]]:
    """(name, default or NO_DEFAULT) of a compiled function, from the signature pybind11 writes first
    in its docstring (`name(self: T, a: T = 1) -> R`)."""
    line = func.__doc__.splitlines()[0]
    params = line[line.index("(") + 1:line.rindex(") -> ")]
    args = ast.parse(f"def f({params}): pass").body[0].args
    names = [a.arg for a in args.args if a.arg != "self"]
    defaults = [ast.literal_eval(d) for d in args.defaults]
    return list(zip(names, [NO_DEFAULT] * (len(names) - len(defaults)) + defaults))


NO_DEFAULT = object()


def _stub_functions():
    """(qualified name, the compiled function, the stub's FunctionDef) for every stubbed function."""
    for node in ast.parse(STUB.read_text()).body:
        if isinstance(node, ast.FunctionDef):
            yield node.name, getattr(_native, node.name), node
        elif isinstance(node, ast.ClassDef) and not issubclass(getattr(_native, node.name), BaseException):
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and not fn.decorator_list:
                    yield f"{node.name}.{fn.name}", getattr(getattr(_native, node.name), fn.name), fn


def test_native_stub_parameters_and_defaults_match_module() -> None:
    for name, func, stub in _stub_functions():
        args = stub.args
        names = [a.arg for a in args.args if a.arg != "self"]
        stub_defaults = [NO_DEFAULT] * (len(names) - len(args.defaults)) + [
            ... if isinstance(d, ast.Constant) and d.value is ... else ast.literal_eval(d) for d in args.defaults]
        module = _module_parameters(func)
        assert names == [n for n, _ in module], name
        for (param, given), (_, actual) in zip(zip(names, stub_defaults), module):
            # `...` in the stub: the module has a default, whose home the stub's comment names
            assert (actual is not NO_DEFAULT) if given is ... else given == actual or given is actual, \
                f"{name}({param}): stub {given!r}, module {actual!r}"

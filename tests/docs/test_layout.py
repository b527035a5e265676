"""The written layout is the built one: the README's layout table and docs/development.md's test layout
are read against the layers of tests/test_import_graph.py, so a room that is missing, out of order or
names a file that is gone fails here."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_import_graph import LAYER, LAYERS, PACKAGE

ROOT = Path(__file__).resolve().parents[2]
TICKED = re.compile(r"`([^`]+)`")


def layout_rows(readme: str) -> list[tuple[set[str], list[str]]]:
    """(the units of worker/ a row's path cell names, the files its second cell names) for each row
    of the README's layout table that names a unit, top of the table first."""
    section = readme.split("### Layout", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        units = set()
        for path in TICKED.findall(cells[0]):
            if path == "native/":
                units.add("_native")
            elif path.startswith("worker/"):
                units.add(path.removeprefix("worker/").removesuffix("/").removesuffix(".py"))
        files = [t for t in TICKED.findall(cells[1]) if re.fullmatch(r"[\w.]+\.(py|h|cpp)", t)]
        if units:
            rows.append((units, files))
    return rows


def misplaced(rows: list[tuple[set[str], list[str]]]) -> list[str]:
    """Units the table lacks or names twice, and rows not bottom to top (a row's lowest layer below the
    row before it's highest)."""
    named = [u for units, _ in rows for u in units]
    wrong = [f"missing: {u}" for u in sorted(set(LAYER) - set(named))]
    wrong += [f"not a unit: {u}" for u in sorted(set(named) - set(LAYER))]
    wrong += [f"twice: {u}" for u in sorted({u for u in named if named.count(u) > 1})]
    for (before, _), (after, _) in zip(rows, rows[1:]):
        if max(LAYER.get(u, 0) for u in before) > min(LAYER.get(u, 0) for u in after):
            wrong.append(f"out of order: {sorted(after)} after {sorted(before)}")
    return wrong


def test_readme_layout_names_every_unit_once_bottom_to_top():
    assert misplaced(layout_rows((ROOT / "README.md").read_text())) == []


def test_readme_layout_names_only_files_that_exist():
    gone = []
    for units, files in layout_rows((ROOT / "README.md").read_text()):
        folders = [ROOT / "native" if u == "_native" else PACKAGE / u for u in units]
        gone += [f"{name} (in {sorted(units)})" for name in files if not any((f / name).exists() for f in folders)]
    assert gone == []


def test_layout_check_catches_a_missing_unit_and_a_row_out_of_order():
    rows = [({"messages", "settings", "control_chars"}, []), ({"engine"}, []), ({"dispatch"}, [])]
    wrong = misplaced(rows)
    assert "missing: kafka" in wrong and "out of order: ['dispatch'] after ['engine']" in wrong
    assert all(u in LAYER for layer in LAYERS for u in layer)


def _development_test_folders() -> list[str]:
    text = " ".join((ROOT / "docs" / "development.md").read_text().split())
    listed = re.search(r"for each folder of `worker/` \(([^)]*)\)", text).group(1)
    return TICKED.findall(listed.split(":", 1)[1])


def test_development_test_layout_mirrors_every_folder_of_worker_bottom_to_top():
    folders = _development_test_folders()
    package_folders = {u for u in LAYER if (PACKAGE / u).is_dir()}
    assert sorted(folders) == sorted(package_folders)
    assert [LAYER[f] for f in folders] == sorted(LAYER[f] for f in folders), folders
    assert [f for f in folders if not (ROOT / "tests" / f / "__init__.py").exists()] == []


def test_development_names_every_test_folder():
    text = (ROOT / "docs" / "development.md").read_text()
    named = set(_development_test_folders()) | {"native"} | set(re.findall(r"`tests/(\w+)`", text))
    folders = {p.parent.name for p in (ROOT / "tests").glob("*/__init__.py")}
    assert folders - named == set()

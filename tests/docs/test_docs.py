"""The README and docs/ pages: every relative link resolves (file and heading), the settings page is
the one generated from the settings type, and the README stays a front door."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from worker.settings.reference import render

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = FENCE.sub("", page.read_text())
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", text, re.M)}


def relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+://|mailto:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target} (no such heading)")
    assert not broken, broken


def test_the_link_check_sees_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [gone](missing.md) [bad](#nowhere)\n```\n[in code](nope)\n```\n")
    assert relative_links(page) == ["#title", "missing.md", "#nowhere"]
    assert anchors(page) == {"title"}


def test_settings_page_is_the_generated_one():
    committed = (ROOT / "docs" / "settings.md").read_text()
    assert committed == render(), "run: python -m worker.settings.reference > docs/settings.md"


def test_settings_page_lists_every_setting_and_variable():
    from worker.settings.environment import VARIABLES
    from worker.settings.sections import all_fields

    page = render()
    for f in all_fields():
        assert f"| `{f.path}` |" in page and f"`{f.env}`" in page
    for name in VARIABLES:
        assert f"| `{name}` |" in page


def test_readme_is_a_front_door():
    assert len((ROOT / "README.md").read_text()) <= 12_000

"""The README is a first look that holds: its commands exist, its links lead to every page of the docs."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def test_every_make_command_the_readme_names_is_a_target() -> None:
    text = README.read_text()
    named = set(re.findall(r"`make ([a-z-]+)", text)) | set(re.findall(r"(?m)^make ([a-z-]+)", text))
    rules = re.findall(r"(?m)^([a-z-]+(?: [a-z-]+)*):", (REPO / "Makefile").read_text())  # a rule may name several
    targets = {target for rule in rules for target in rule.split()}
    assert {"demo", "test", "docs"} <= named
    assert sorted(named - targets) == []


def test_the_readme_links_every_docs_page_and_every_link_resolves() -> None:
    text = README.read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if not link.startswith(("http://", "https://"))]
    assert [link for link in local if not (REPO / link).exists()] == []
    # index.md is the site's own start page; changelog.md only includes CHANGELOG.md, which the README links.
    pages = {f"docs/{page.name}" for page in (REPO / "docs").glob("*.md")} - {"docs/index.md", "docs/changelog.md"}
    assert "CHANGELOG.md" in local
    assert sorted(pages - set(local)) == []

"""Every relative link in README.md and docs/*.md leads somewhere: the file exists, and an
``#anchor`` names a heading of the file it points into (as GitHub spells heading anchors).
The README was cut into docs/ pages that link back and forth; a renamed heading or a moved
section would otherwise leave a reader at a dead link with no test noticing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub makes for a page's headings: lower case, punctuation but ``-`` and
    ``_`` dropped, spaces as ``-``, a repeated one numbered ``-1``, ``-2``, …"""
    seen: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        heading = re.match(r"^#{1,6} +(.+?) *#* *$", line)
        if not heading:
            continue
        text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading[1])
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)
    return [m[1] or m[2] for m in LINK.finditer(text)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file.relative_to(ROOT)}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert broken == []


def test_the_checker_sees_a_broken_anchor_and_a_missing_file(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A `code` title, here\n\n## Twice\n\n## Twice\n")
    assert anchors(page) == {"a-code-title-here", "twice", "twice-1"}
    page.write_text("[a](other.md) [b](#nowhere) ![c](pic.png) `[d](#in-code)`\n")
    assert links(page) == ["other.md", "#nowhere", "pic.png"]


def test_the_readme_links_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text()
    unlinked = [p.name for p in PAGES[1:] if f"](docs/{p.name}" not in readme]
    assert unlinked == []

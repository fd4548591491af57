"""Every link into a section of a markdown page (``page.md#anchor``) in README.md and docs/ names a heading that page
has, by GitHub's rule for anchors: a split of docs/e2e.md found three that pointed at renamed sections."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), REPO / "tests" / "e2e" / "README.md"]
_LINK = re.compile(r"\]\(([^)\s#]*\.md)?#([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation other than - and _ dropped, spaces to -."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in _HEADING.findall(_FENCE.sub("", page.read_text(encoding="utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_the_slug_is_githubs() -> None:
    assert slug("Past position 2,048 (issue 59, item 1)") == "past-position-2048-issue-59-item-1"
    assert slug("The `ops` step: **what** runs") == "the-ops-step-what-runs"


def test_every_section_link_names_a_heading_of_its_page() -> None:
    broken = []
    for page in PAGES:
        text = _FENCE.sub("", page.read_text(encoding="utf-8"))
        for target, anchor in _LINK.findall(text):
            dest = (page.parent / target).resolve() if target else page
            if dest.is_file() and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(REPO)}: {target or page.name}#{anchor}")
    assert not broken, "\n".join(broken)

"""ROCm index pages as the hosts serve them: TheRock's generated page (the file list as JSON in a ``const files``
script) and a plain directory listing of ``<a href>`` links.

tests/unit/test_rocm_index.py keeps its own byte-faithful copies of each host's page, as the parser's reference."""

from __future__ import annotations

import json


def index_page(names: list[str]) -> str:
    """TheRock's index page listing ``names``, uploaded in that order (a second apart: the last is the newest)."""
    files = [{"name": n, "mtime": 1_764_300_000.0 + i} for i, n in enumerate(names)]
    return (
        "<html><head><title>Tarball index</title><script>\n"
        f"    const files = {json.dumps(files)};\n"
        "    function applyFilter(fileList, filter) {}\n</script></head></html>\n"
    )


def links_page(names: list[str]) -> str:
    """A directory listing: a link per name, the link's text the name."""
    links = "".join(f'<a href="{n}">{n}</a>\n' for n in names)
    return f"<html><body>{links}</body></html>"

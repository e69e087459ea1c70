"""Docs and bundled files that are generated from code must match it."""

from __future__ import annotations

import re
from pathlib import Path

from memstream.apps.cli import main
from memstream.apps.demo import SAMPLE
from memstream.apps.sample_conversations import generate
from memstream.schemas.export import stale

ROOT = Path(__file__).resolve().parents[1]


def test_settings_table_matches_the_settings_object(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["config", "--markdown"]) == 0
    table = capsys.readouterr().out
    page = (ROOT / "docs" / "configuration.md").read_text()
    block = re.search(r"<!-- settings-table:start -->\n(.*?)<!-- settings-table:end -->", page, re.S)
    assert block is not None
    assert block.group(1) == table, "docs/configuration.md's table is stale: run `make docs-settings`"


def test_committed_json_schemas_match_the_models() -> None:
    assert stale() == []


def test_bundled_sample_is_what_the_generator_writes() -> None:
    lines = SAMPLE.read_bytes().splitlines()
    assert lines == [t.to_bytes() for t in generate()]


def test_the_readme_and_docs_link_only_to_files_in_the_repository() -> None:
    """A fresh clone has every page the README and docs/ link to (no ../shared, no moved file)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    dead = [
        f"{page.relative_to(ROOT)}: {target}"
        for page in pages
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)", page.read_text())
        if not target.startswith(("http://", "https://"))
        and not ((page.parent / target).resolve().is_relative_to(ROOT) and (page.parent / target).exists())
    ]
    assert dead == []


def test_the_readme_stays_a_first_read() -> None:
    """Reference material lives in docs/: the README is the start, not the manual (issue 30)."""
    assert len((ROOT / "README.md").read_text()) < 20_000

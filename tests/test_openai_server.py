"""The test server's own measures: the time-weighted mean of chat requests in flight (the
consolidation bench's ``mean_in_flight``)."""

from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from memstream.testing.openai_server import OpenAIServer

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


def chat(server: OpenAIServer) -> None:
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions", data=BODY, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 200


def test_mean_in_flight_is_weighted_by_time_and_counts_idle_gaps() -> None:
    with OpenAIServer() as server:
        assert server.mean_in_flight == 0.0 and server.chat_span_s == 0.0
        # 4 requests of 0.2 s at once, an idle gap of 0.4 s, then 1 request of 1.0 s: 1.8 request-
        # seconds over about 1.6 s. Averaging the count per request instead (4, 4, 4, 4, 1) or
        # ignoring the gap (1.8 / 1.2) gives a figure well outside the bounds below.
        server.chat_delay_s = 0.2
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: chat(server), range(4)))
        time.sleep(0.4)
        server.chat_delay_s = 1.0
        chat(server)

        span = server.chat_span_s
        assert server.max_in_flight == 4
        assert 1.6 <= span < 2.2, span
        assert server.in_flight == 0
        assert 1.8 <= server.mean_in_flight * span < 2.0, server.mean_in_flight * span
        assert server.mean_in_flight == pytest.approx(1.8 / span, rel=0.1)

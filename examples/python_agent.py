"""A scripted agent with long-term memory through the Python client: no paid API needed.

It chats with a user over two days (the script plays both sides), stores each exchange with
``add``, waits until the memory has it, and before answering a later question it ``recall``s and
puts the dated context in the prompt it would send to its model (printed here).

    memstream up &                 # or any gateway; MEMSTREAM_GATEWAY_URL, MEMSTREAM_API_KEY
    python examples/python_agent.py
"""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime

from memstream.client import MemoryClient, NotFound

USER = os.environ.get("AGENT_USER", "agent-demo-user")
DAY_ONE = [
    ("I'm training for the Porto half marathon on 14 March.", "Great goal! How far do you run now?"),
    ("About 12 km on Sundays, and my knee hurts after 10.", "Let's plan shorter runs and strength work."),
]
QUESTION = "When is my race, and what did I say about my knee?"


def wait_stored(memory: MemoryClient, turn_ids: list[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    for turn_id in turn_ids:
        while True:
            try:
                memory.turn(USER, turn_id)
                break
            except NotFound:
                if time.monotonic() > deadline:
                    sys.exit(
                        f"turn {turn_id} not stored within {timeout_s:.0f} s: is `memstream up` running?"
                    )
                time.sleep(0.5)


def main() -> int:
    url = os.environ.get("MEMSTREAM_GATEWAY_URL", "http://127.0.0.1:8080")
    with MemoryClient(url, api_key=os.environ.get("MEMSTREAM_API_KEY")) as memory:
        said = datetime(2026, 2, 2, 19, 0, tzinfo=UTC)
        for said_text, reply in DAY_ONE:
            messages = [{"role": "user", "content": said_text}, {"role": "assistant", "content": reply}]
            accepted = memory.add(USER, messages, ts=said, session_id="day-one")
            wait_stored(memory, accepted.turn_ids)
        found = memory.recall(USER, QUESTION, budget_tokens=300)
        prompt = f"Memory of this user:\n{found.context}\n\nUser: {QUESTION}\nAssistant:"
        print(prompt)
        print(f"\n({len(found.items)} memories, {found.tokens} tokens)")
        return 0 if "14 March" in found.context and "knee" in found.context else 1


if __name__ == "__main__":
    sys.exit(main())

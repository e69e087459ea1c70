"""A small, real-HTTP OpenAI-compatible server for tests (stdlib only).

``with OpenAIServer() as server:`` serves on 127.0.0.1 (free port) in a thread; point a client at
``server.base_url``. Every request is recorded in ``server.requests``. Scripted failures are
queued with :meth:`OpenAIServer.fail` and consumed one per request, before the route runs:

    server.fail(Failure(429, retry_after_s=0.01), Failure(500), Failure(delay_s=1.0))

A time-based outage of the chat route instead: until ``deadline`` (``time.monotonic()``), each chat
request gets the next entry of a cycle (None: answered normally); phases run one after another:

    server.fail_until(time.monotonic() + 60, Failure(429, retry_after="1"), Failure(500), Failure(delay_s=3))

Routes live in ``OpenAIServer.routes`` (path -> handler of the JSON body):

* ``/v1/embeddings``: deterministic bag-of-words vectors (``embed``);
* ``/v1/chat/completions``: the content of each answer is the next string queued with
  :meth:`OpenAIServer.reply` (malformed JSON included: queue any string), else
  ``server.chat_responder(body)`` (default ``"{}"``). Usage is deterministic: prompt tokens = words
  across the request's messages, completion tokens = words of the content (each at least 1).
  ``server.usage_totals`` sums what the server actually answered (a request whose client timed out
  during a delay is not answered, so not counted); ``server.chat_delay_s`` delays every chat answer
  and ``server.max_in_flight`` is the most chat requests it was serving at once (a request whose
  client closed the connection, i.e. timed out, no longer counts: it is dropped from ``in_flight``
  as soon as that is seen, at the latest when the next chat request arrives).
  ``server.mean_in_flight`` is the time-weighted mean of chat requests in flight between the first
  chat request and the last one's end (``server.chat_span_s``, seconds; idle gaps count as 0).
  ``server.chat_tokens`` lists each answered chat call's prompt + completion tokens;
  ``server.failures_served`` counts the scripted failures by kind: ``"429"``, ``"500"``, ...,
  ``"timeout"`` (the client gave up during the delay) and ``"slow"`` (it waited and was answered).

Behaviours of real local servers (llama.cpp's), off by default: ``server.rejected_formats`` (the
``response_format`` types answered 500 naming the format, as llama.cpp does ``json_schema``),
``server.fence_json`` (each answer wrapped in a ```json code fence) and ``server.cut_at_max_tokens``
(an answer longer than the request's ``max_tokens`` words is cut there, ``finish_reason: "length"``).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import select
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt

Json = dict[str, Any]
Reply = tuple[int, Json, dict[str, str] | None]  # status, body, extra headers
CHAT_PATH = "/v1/chat/completions"
Route = Callable[[Json], Json]


@dataclass(frozen=True)
class Failure:
    """One scripted answer: wait ``delay_s``, then answer ``status`` with an error body
    (and ``Retry-After-Ms`` if given), or answer normally when ``status`` is None (a delay
    longer than the client's timeout makes the client time out)."""

    status: int | None = None
    retry_after_s: float | None = None
    delay_s: float = 0.0
    retry_after: str | None = None  # a ``Retry-After`` header, as sent (seconds or an HTTP date)


class ApiError(Exception):
    """Raised by a route: answered as an OpenAI-style error body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def bag_of_words(text: str, dim: int) -> npt.NDArray[np.float32]:
    """Deterministic stand-in embedding: signed hashed word counts, so shared words mean closeness."""
    vec = np.zeros(dim, dtype=np.float32)
    for word in re.findall(r"\w+", text.lower()) or [text]:
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
        vec[h % dim] += 1.0 if h >> 63 else -1.0
    return vec


class OpenAIServer:
    def __init__(self, dim: int = 32, embed: Callable[[str, int], npt.NDArray[np.float32]] = bag_of_words):
        self.dim = dim
        self.embed = embed
        self.requests: list[tuple[str, Json]] = []
        self.routes: dict[str, Route] = {
            "/v1/embeddings": self._embeddings,
            CHAT_PATH: self._chat,
        }
        self.chat_responder: Callable[[Json], str] = lambda body: "{}"
        self.chat_delay_s = 0.0
        self.rejected_formats: set[str] = set()
        self.fence_json = False
        self.cut_at_max_tokens = False
        self.usage_totals = {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0}
        self.in_flight = 0
        self.max_in_flight = 0
        self.first_chat_at: float | None = None  # time.monotonic() when the first chat request arrived
        self.last_chat_end_at: float | None = None  # ... when a chat request last stopped being served
        self._in_flight_area = 0.0  # in_flight integrated over time (request-seconds)
        self._in_flight_since = 0.0  # when in_flight last changed
        self.chat_tokens: list[int] = []
        self.failures_served: Counter[str] = Counter()
        self._chats: dict[int, socket.socket | None] = {}  # chat requests being served
        self._chat_ids = itertools.count()
        self._phases: deque[tuple[float, tuple[Failure | None, ...]]] = deque()
        self._phase_calls = 0
        self._failures: deque[Failure] = deque()
        self._replies: deque[str] = deque()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        # A short poll interval keeps shutdown (and so each test's teardown) fast.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_port}/v1"

    def fail(self, *failures: Failure) -> None:
        with self._lock:
            self._failures.extend(failures)

    def fail_until(self, deadline: float, *cycle: Failure | None) -> None:
        """Until ``deadline`` (``time.monotonic()``), answer each chat request with the next entry of
        ``cycle``, round and round (None: answer normally). Phases queue: the next one starts when
        this one's deadline passes. Queued :meth:`fail` failures go first."""
        if not cycle:
            raise ValueError("a phase needs at least one entry")
        with self._lock:
            self._phases.append((deadline, cycle))

    def reply(self, *contents: str) -> None:
        """Queue chat answer contents, consumed one per answered chat request."""
        with self._lock:
            self._replies.extend(contents)

    def __enter__(self) -> OpenAIServer:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def record(self, path: str, body: Json) -> Failure | None:
        """Record a request; the scripted failure to answer it with, if any."""
        with self._lock:
            self.requests.append((path, body))
            if self._failures:
                return self._failures.popleft()
            if path != CHAT_PATH:
                return None
            now = time.monotonic()
            while self._phases and self._phases[0][0] <= now:
                self._phases.popleft()
                self._phase_calls = 0
            if not self._phases:
                return None
            cycle = self._phases[0][1]
            self._phase_calls += 1
            return cycle[(self._phase_calls - 1) % len(cycle)]

    def enter_chat(self, connection: socket.socket | None = None) -> int:
        """A chat request starts being served; the id to pass to :meth:`exit_chat`. Requests whose
        client has closed its connection (timed out) are dropped first: the client may already have
        sent the request that replaces it."""
        with self._lock:
            now = time.monotonic()
            if self.first_chat_at is None:
                self.first_chat_at = self._in_flight_since = now
            for key, conn in list(self._chats.items()):
                if conn is not None and _closed_by_peer(conn):
                    del self._chats[key]
            key = next(self._chat_ids)
            self._chats[key] = connection
            self._count_in_flight(now)
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return key

    def exit_chat(self, key: int) -> None:
        with self._lock:
            now = time.monotonic()
            self._chats.pop(key, None)
            self._count_in_flight(now)
            self.last_chat_end_at = now

    def _count_in_flight(self, now: float) -> None:
        """Set ``in_flight`` from the requests being served, integrating the old value up to ``now``
        (the caller holds the lock)."""
        self._in_flight_area += self.in_flight * (now - self._in_flight_since)
        self._in_flight_since = now
        self.in_flight = len(self._chats)

    @property
    def chat_span_s(self) -> float:
        """Seconds from the first chat request to the end of the last one served (0 before any)."""
        with self._lock:
            if self.first_chat_at is None or self.last_chat_end_at is None:
                return 0.0
            return self.last_chat_end_at - self.first_chat_at

    @property
    def mean_in_flight(self) -> float:
        """Chat requests in flight, averaged over :attr:`chat_span_s` (read it once none is in flight:
        a request still being served counts only up to its start)."""
        span = self.chat_span_s
        with self._lock:
            return self._in_flight_area / span if span > 0 else 0.0

    def served(self, kind: str) -> None:
        with self._lock:
            self.failures_served[kind] += 1

    def _chat(self, body: Json) -> Json:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "'messages' must be a non-empty list")
        if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise ApiError(400, "every message needs a 'role'")
        if not isinstance(body.get("model"), str) or not body["model"]:
            raise ApiError(400, "'model' is required")
        fmt = body.get("response_format")
        fmt_type = fmt.get("type") if isinstance(fmt, dict) else None
        if fmt_type in self.rejected_formats:
            raise ApiError(500, f"unsupported response_format type: {fmt_type}")
        with self._lock:
            content = self._replies.popleft() if self._replies else None
        if content is None:
            content = self.chat_responder(body)
        content, finish_reason = self._shape(content, body.get("max_tokens"))
        prompt = max(1, sum(len(str(m.get("content") or "").split()) for m in messages))
        completion = max(1, len(content.split()))
        with self._lock:
            self.usage_totals["prompt_tokens"] += prompt
            self.usage_totals["completion_tokens"] += completion
            self.usage_totals["calls"] += 1
            self.chat_tokens.append(prompt + completion)
            n = self.usage_totals["calls"]
        return {
            "id": f"chatcmpl-test{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }

    def _shape(self, content: str, max_tokens: object) -> tuple[str, str]:
        """The answer as the configured server would send it, and its ``finish_reason``."""
        if self.fence_json:
            content = f"```json\n{content}\n```"
        words = content.split()  # a word is a token here, as in the usage counts
        if self.cut_at_max_tokens and isinstance(max_tokens, int) and len(words) > max_tokens:
            return " ".join(words[:max_tokens]), "length"
        return content, "stop"

    def _embeddings(self, body: Json) -> Json:
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not all(isinstance(t, str) and t for t in inputs):
            raise ApiError(400, "'input' must be a non-empty string or a list of non-empty strings")
        b64 = body.get("encoding_format") == "base64"
        data = []
        for i, text in enumerate(inputs):
            vec = self.embed(text, self.dim).astype("<f4")
            data.append(
                {
                    "object": "embedding",
                    "index": i,
                    "embedding": base64.b64encode(vec.tobytes()).decode() if b64 else vec.tolist(),
                }
            )
        tokens = sum(len(t.split()) for t in inputs)
        return {
            "object": "list",
            "data": data,
            "model": body.get("model", ""),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


def _handler_for(server: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like the real API

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                self._send(400, _error(400, "body is not JSON"))
                return
            failure = server.record(self.path, body)
            chat = self.path == CHAT_PATH
            key = server.enter_chat(self.connection) if chat else None
            try:
                reply = self._answer(body, failure, server.chat_delay_s if chat else 0.0)
            finally:
                # Ended before the answer is sent: a client that reads the server's measures right
                # after its response must find its own request counted.
                if key is not None:
                    server.exit_chat(key)
            if reply is not None:
                self._send(*reply)

        def _answer(self, body: Json, failure: Failure | None, delay_s: float) -> Reply | None:
            """The reply to send, or None when the client gave up waiting."""
            delay_s += failure.delay_s if failure is not None else 0.0
            if delay_s and self._wait(delay_s):
                self.close_connection = True  # it timed out: nothing is answered (or counted)
                if failure is not None:
                    server.served("timeout")
                return None
            if failure is not None and failure.status is not None:
                headers = {}
                if failure.retry_after_s is not None:
                    headers["Retry-After-Ms"] = str(round(failure.retry_after_s * 1000))
                if failure.retry_after is not None:
                    headers["Retry-After"] = failure.retry_after
                server.served(str(failure.status))
                return failure.status, _error(failure.status, "scripted failure"), headers
            if failure is not None:
                server.served("slow" if failure.delay_s else "ok")
            route = server.routes.get(self.path)
            try:
                if route is None:
                    raise ApiError(404, f"no route {self.path}")
                return 200, route(body), None
            except ApiError as exc:
                return exc.status, _error(exc.status, str(exc)), None

        def _wait(self, delay_s: float) -> bool:
            """Wait ``delay_s``; True as soon as the client closes the connection (it gave up)."""
            deadline = time.monotonic() + delay_s
            while (left := deadline - time.monotonic()) > 0:
                try:
                    readable, _, _ = select.select([self.connection], [], [], left)
                except OSError:
                    return True
                if readable:
                    if _closed_by_peer(self.connection):
                        return True
                    time.sleep(left)  # it sent more (not expected): just wait
                    break
            return _closed_by_peer(self.connection)

        def _send(self, status: int, payload: Json, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test): nothing left to answer

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler


def _closed_by_peer(connection: socket.socket) -> bool:
    """The client closed this connection (it gave up waiting); never blocks."""
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _error(status: int, message: str) -> Json:
    return {
        "error": {"message": message, "type": "server_error" if status >= 500 else "invalid_request_error"}
    }

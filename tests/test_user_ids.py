"""One id grammar: every user id POST /v1/turns accepts reaches every user route (recall takes the id
in its body), through the gateway's own router, as a client sends the percent-encoded id and the
server decodes the path; what the routes could not reach is refused at ingest with a reason."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote, unquote
from zoneinfo import ZoneInfo

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.routing import Match

from memstream.adapters.broker import free_port
from memstream.adapters.settings import Settings
from memstream.apps.cli import main
from memstream.apps.gateway.app import create_app
from memstream.apps.gateway.forget import split_key, unaddressable
from memstream.apps.gateway.gate import reachable
from memstream.core.validation import Rejection, limits_from, validate
from memstream.schemas.api import RecallRequest

APP = create_app(Settings())
USER_ROUTES = {
    ("DELETE", "/v1/users/{user_id}"): "",
    ("GET", "/v1/users/{user_id}/timeline"): "/timeline",
    ("GET", "/v1/users/{user_id}/updates"): "/updates",
    ("GET", "/v1/users/{user_id}/turns/{turn_id}"): "/turns/t1",
}
LIMITS = limits_from(1 << 20, "2000-01-01", 86_400, ZoneInfo("UTC"))
# Characters that URL handling treats specially, among any others.
IDS = st.text(
    alphabet=st.one_of(st.sampled_from("/.%?#\\ +&=;:@[]~"), st.characters(codec="utf-8")),
    min_size=1,
    max_size=24,
) | st.sampled_from([".", "..", "...", "x/y", "/", "%2F", "%2E%2E", "a/..", " ", "é"])


def accepted(user_id: str) -> bool:
    """Whether the gateway's POST /v1/turns (the ingest processor's own check) accepts the user id."""
    turn = {
        "tenant": "acme",
        "user_id": user_id,
        "session_id": "s1",
        "turn_id": "t1",
        "ts": "2024-05-01T10:00:00Z",
        "messages": [{"speaker": "Ana", "content": "hello"}],
    }
    checked = validate(orjson.dumps(turn), LIMITS, datetime.now(UTC))
    if isinstance(checked, Rejection):
        assert checked.reason in ("invalid_identifier", "too_long"), checked
        return False
    return True


def reached(method: str, template: str, user_id: str) -> bool:
    """Whether a request for ``user_id`` (percent-encoded by the client as one path segment, every
    reserved character escaped) reaches the route ``template`` with exactly that id: the URL as httpx
    sends it, the path decoded as uvicorn does, then the gateway's router and the route's own check."""
    suffix = USER_ROUTES[(method, template)]
    url = httpx.URL(f"http://gateway/v1/users/{quote(user_id, safe='')}{suffix}")
    scope = {"type": "http", "method": method, "path": unquote(url.raw_path.decode("ascii")), "root_path": ""}
    for route in reachable(APP.router.routes):  # through the included routers, in order
        match, child = route.matches(scope)
        if match == Match.FULL:  # the router takes the first full match
            if getattr(route, "path", None) != template or child["path_params"]["user_id"] != user_id:
                return False
            param = next(p for p in route.dependant.path_params if p.name == "user_id")  # type: ignore[attr-defined]
            _, errors = param.validate(user_id, {}, loc=("path", "user_id"))
            return not errors
    return False


@settings(max_examples=400, deadline=None)
@given(IDS)
def test_every_accepted_user_id_reaches_every_user_route(user_id: str) -> None:
    if not accepted(user_id):
        return
    for method, template in USER_ROUTES:
        assert reached(method, template, user_id), (method, template, user_id)
    assert RecallRequest(user_id=user_id, query="q").user_id == user_id  # recall: in the body


@pytest.mark.parametrize("user_id", ["x/y", "/", ".", "..", "a/.."])
def test_ids_the_routes_cannot_reach_are_refused_at_ingest(user_id: str) -> None:
    """The probe's ids: not reachable as one path segment (the check above can fail), so refused."""
    assert not any(reached(m, t, user_id) for m, t in USER_ROUTES)
    checked = validate(
        orjson.dumps(
            {
                "tenant": "acme",
                "user_id": user_id,
                "session_id": "s",
                "turn_id": "t",
                "ts": "2024-05-01T10:00:00Z",
                "messages": [{"speaker": "Ana", "content": "hi"}],
            }
        ),
        LIMITS,
        datetime.now(UTC),
    )
    assert isinstance(checked, Rejection) and checked.reason == "invalid_identifier"
    assert "one URL path segment" in checked.detail


def test_stored_ids_the_grammar_refuses_are_found() -> None:
    keys = ["acme/ana", "acme/x/y", "acme/..", "globex/.", "acme/x/y", "acme/%2F"]
    assert unaddressable(keys) == ["acme/..", "acme/x/y", "globex/."]
    assert split_key("acme/x/y") == ("acme", "x/y")
    with pytest.raises(ValueError, match="tenant/user_id"):
        split_key("no-user")


def test_forget_of_a_key_that_names_no_user_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["forget", "--user-key", "no-user"]) == 2
    assert "a user key is tenant/user_id" in capsys.readouterr().err


def test_users_without_a_pipeline_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTREAM_METRICS_PORT", str(free_port()))
    monkeypatch.setenv("MEMSTREAM_EMBEDDER", "hash")
    assert main(["users", "--invalid"]) == 1
    assert "is `memstream up` running" in capsys.readouterr().err

"""The dashboard's sessions under a flood, and sign-in throttled (B-512, B-513).

A real broker process and real `es-broker dashboard` processes, spoken to over HTTP
(urllib's Operator, and http.client on one kept-alive connection for the flood).
"""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from prometheus_client import CollectorRegistry

from es_broker.dashboard.security import (
    MAX_SESSIONS,
    MAX_SESSIONS_PER_ADDRESS,
    AnonymousTokens,
    SessionStore,
)
from es_broker.dashboard.throttle import ACCOUNT_FREE, ADDRESS_FREE, BASE, FORGET, LoginThrottle
from tests.dashboard_fixtures import Operator, dashboard
from tests.process_fixtures import ServedBroker, serve
from tests.test_dashboard_security import auth_file

pytest.importorskip("hypercorn")


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Iterator[ServedBroker]:
    with serve(tmp_path_factory.mktemp("dashboard-signin") / "data") as served:
        yield served


def anonymous_flood(url: str, n: int) -> set[str]:
    """`n` GET /api/session without a cookie, on one connection; the distinct CSRF tokens."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    tokens = set()
    try:
        for _ in range(n):
            conn.request("GET", "/api/session", headers={"Host": parts.netloc})
            answer = conn.getresponse()
            body = answer.read()
            assert answer.status == 200, body
            tokens.add(body.split(b'"csrfToken":"')[1].split(b'"')[0])
    finally:
        conn.close()
    return tokens


def test_b512_anonymous_requests_store_nothing_and_never_log_an_operator_out(plain, tmp_path):
    """B-512 (a defect: 10,050 anonymous GET /api/session filled the store of 10,000 sessions
    and the signed-in operator was logged out): after the flood alice is still signed in and
    writes; an anonymous browser still signs in with its own CSRF token, and a token made for
    another browser's cookie is refused."""
    operators = auth_file(tmp_path, "alice", "pw-alice")
    with dashboard(
        plain.namesrv, "--allow-writes", "--auth-file", str(operators), log=tmp_path / "d.log"
    ) as url:
        alice = Operator(url)
        assert alice.sign_in(name="alice", password="pw-alice").status == 200
        assert alice.get("/api/session").json()["signedIn"] is True
        tokens = anonymous_flood(url, MAX_SESSIONS + 50)
        assert len(tokens) == MAX_SESSIONS + 50  # each its own, none stored
        assert alice.get("/api/session").json()["signedIn"] is True
        created = alice.post("/api/topics", {"topic": "AfterTheFlood", "queues": "1"})
        assert created.status == 200, created.body
        bob, mallory = Operator(url), Operator(url)
        mallory_token = mallory.csrf()
        bob.csrf()  # bob's own anonymous cookie
        crossed = bob.post("/login", {"name": "alice", "password": "pw-alice"}, token=mallory_token)
        assert crossed.status == 403 and "CSRF" in crossed.body
        assert bob.sign_in(name="alice", password="pw-alice").status == 200
        assert bob.get("/api/session").json()["operator"] == "alice"
    assert "AfterTheFlood" in plain.admin_json("topicList")


def test_b512_an_address_keeps_at_most_its_share_of_sessions_and_never_takes_others():
    """B-512: the store evicts a client address's own least recently used session first."""
    store = SessionStore(idle_seconds=60, clock=lambda: 0.0)
    admin_token, _ = store.new("10.0.0.1", signed_in=True, operator="admin")
    tokens = [store.new("10.0.0.9", signed_in=True)[0] for _ in range(MAX_SESSIONS_PER_ADDRESS + 5)]
    assert store.get(admin_token) is not None
    assert len(store) == MAX_SESSIONS_PER_ADDRESS + 1
    assert [store.get(t) is not None for t in tokens[:5]] == [False] * 5
    assert all(store.get(t) is not None for t in tokens[5:])


def retry_after(answer) -> int:
    return int(answer.headers["retry-after"])


def test_b513_sign_in_is_throttled_per_account_and_per_address(plain, tmp_path):
    """B-513 (a defect: 300 wrong secrets in 1.4 s, none refused for it): after ACCOUNT_FREE
    refused sign-ins of alice, hers are answered 429 with Retry-After, even with the right
    password, without checking it; bob (another account, same address) still signs in; after
    ADDRESS_FREE refusals from the address every sign-in from it waits. The lock-outs are
    logged and counted in /metrics."""
    operators = tmp_path / "operators"
    alice_line = auth_file(tmp_path, "alice", "pw-alice").read_text()
    bob_line = auth_file(tmp_path, "bob", "pw-bob").read_text()
    operators.write_text(alice_line + bob_line.split("\n", 1)[1])
    log = tmp_path / "d.log"
    with dashboard(plain.namesrv, "--auth-file", str(operators), log=log) as url:
        mallory = Operator(url, follow=False)
        answers = [
            mallory.sign_in(name="alice", password=f"guess-{i}") for i in range(ACCOUNT_FREE + 20)
        ]
        statuses = [a.status for a in answers]
        assert statuses == [401] * ACCOUNT_FREE + [429] * 20, statuses
        assert 1 <= retry_after(answers[-1]) <= BASE
        locked = Operator(url, follow=False).sign_in(name="alice", password="pw-alice")
        assert locked.status == 429 and "try again in" in locked.body
        bob = Operator(url, follow=False)
        assert bob.sign_in(name="bob", password="pw-bob").status == 303
        names = [f"nobody-{i}" for i in range(ADDRESS_FREE - ACCOUNT_FREE)]
        assert [mallory.sign_in(name=n, password="x").status for n in names] == [401] * len(names)
        from_here = Operator(url, follow=False).sign_in(name="bob", password="pw-bob")
        assert from_here.status == 429 and retry_after(from_here) >= 1
        metrics = Operator(url).get("/metrics").body
        counted = dict(
            re.findall(
                r'^esbroker_dashboard_signin_refused_total\{reason="(\w+)"\} (\S+)$', metrics, re.M
            )
        )
        assert float(counted["wrong"]) == ADDRESS_FREE
        assert float(counted["locked"]) == 22
        assert re.search(r'esbroker_dashboard_signin_lockouts_total\{scope="address"\} 1', metrics)
    text = log.read_text()
    assert "account 'alice' locked out for 10 s after 5 refused sign-ins" in text
    assert "address '127.0.0.1' locked out" in text
    assert "pw-alice" not in text and "guess-" not in text


def test_b513_each_lock_out_doubles_and_refusals_are_forgotten():
    """B-513 on the dashboard's clock (moved by the test): BASE, 2 BASE, ...; FORGET later, free."""
    now = [1000.0]
    throttle = LoginThrottle(CollectorRegistry(), clock=lambda: now[0])
    for _ in range(ACCOUNT_FREE):
        assert throttle.retry_after("alice", "10.0.0.1") == 0
        throttle.failed("alice", "10.0.0.1")
    assert throttle.retry_after("alice", "10.0.0.2") == BASE  # the account, from anywhere
    now[0] += BASE
    assert throttle.retry_after("alice", "10.0.0.1") == 0
    throttle.failed("alice", "10.0.0.1")
    assert throttle.retry_after("alice", "10.0.0.1") == 2 * BASE
    now[0] += 2 * BASE + FORGET
    assert throttle.retry_after("alice", "10.0.0.1") == 0
    throttle.failed("alice", "10.0.0.1")  # counted from one again
    assert throttle.retry_after("alice", "10.0.0.1") == 0
    throttle.succeeded("alice")


def test_b512_an_anonymous_token_lives_idle_seconds_from_issue_and_matches_its_cookie_only():
    """B-512: the anonymous CSRF token is the HMAC of its own cookie; past its life it is gone,
    past half of it a page renews it; another process's cookie has no session here."""
    now = [500.0]
    tokens = AnonymousTokens(idle_seconds=60, clock=lambda: now[0])
    cookie, session = tokens.new()
    assert cookie.startswith("anon.") and not session.stored and not session.signed_in
    again = tokens.get(cookie)
    assert again is not None and again.csrf == session.csrf
    other_cookie, other = tokens.new()
    assert other.csrf != session.csrf
    assert AnonymousTokens(60, clock=lambda: now[0]).get(cookie).csrf != session.csrf
    assert tokens.get(cookie.replace("anon.500.0", "anon.530.0")) is None  # issued later than now
    assert tokens.get(cookie.replace("anon.500.0", "anon.490.0")).csrf != session.csrf
    now[0] += 31
    assert tokens.due(tokens.get(cookie)) and tokens.get(cookie, signed_in=True).signed_in
    now[0] += 30
    assert tokens.get(cookie) is None and tokens.get("anon.x.y") is None

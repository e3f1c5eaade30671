"""The dashboard without a browser: who may start it how, and operators of an --auth-file
(B-340, B-344). A real broker process and real dashboard processes; the browser's side of
the same rules is in tests/test_dashboard_e2e.py (B-340..B-343).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from es_broker.dashboard.security import (
    SessionStore,
    hash_password,
    load_auth_file,
    same_origin,
    verify_password,
)
from tests.dashboard_fixtures import Operator, dashboard, start_refused
from tests.process_fixtures import ServedBroker, _env, serve
from tests.tls_fixtures import Certs, certs  # noqa: F401 (a fixture)

pytest.importorskip("hypercorn")


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Iterator[ServedBroker]:
    """A broker without ACL."""
    with serve(tmp_path_factory.mktemp("dashboard-security") / "data") as served:
        yield served


def auth_file(tmp: Path, name: str, password: str) -> Path:
    """An --auth-file of one operator, its line made by `es-broker dashboard --hash-password`."""
    done = subprocess.run(
        [sys.executable, "-m", "es_broker.cli", "dashboard", "--hash-password", name],
        input=password + "\n",
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
        check=True,
    )
    line = done.stdout.strip()
    assert line.startswith(f"{name}:scrypt$") and password not in line
    path = tmp / "operators"
    path.write_text(f"# operators of the dashboard\n{line}\n")
    return path


def test_b344_writes_on_a_non_loopback_address_without_a_sign_in_are_refused_at_start(plain):
    """B-344: --allow-writes on a non-loopback address, brokers without ACL and no --auth-file:
    the dashboard does not start (exit 2) and says what to do; TLS alone is no sign-in."""
    for extra in ((), ("--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key")):
        done = start_refused(plain.namesrv, "--listen", "0.0.0.0:0", "--allow-writes", *extra)
        assert done.returncode == 2, done.stderr
        assert "refusing --allow-writes on 0.0.0.0" in done.stderr
        assert "the brokers do not have ACL on" in done.stderr
        assert "--auth-file" in done.stderr and "127.0.0.1" in done.stderr
        assert "dashboard listening" not in done.stdout


def test_b344_an_auth_file_line_that_is_not_a_hash_stops_the_dashboard_without_repeating_it(
    plain, tmp_path
):
    """B-344: a malformed --auth-file line is named by its number, never printed."""
    bad = tmp_path / "operators"
    bad.write_text("alice:sha1$5f4dcc3b5aa765d61d8327deb882cf99\n")
    done = start_refused(plain.namesrv, "--auth-file", str(bad))
    assert done.returncode == 2
    assert f"{bad}:1:" in done.stderr and "--hash-password" in done.stderr
    assert "5f4dcc3b" not in done.stderr


def test_b344_operators_of_an_auth_file_sign_in_and_then_may_write(plain, tmp_path):
    """B-344: with --auth-file the dashboard may allow writes on any address: every page asks
    for sign-in, a wrong password is refused, the right one gives a session that writes (with
    its CSRF token); sign-out ends it."""
    operators = auth_file(tmp_path, "alice", "correct horse battery")
    with dashboard(
        plain.namesrv,
        "--allow-writes",
        "--auth-file",
        str(operators),
        listen="0.0.0.0:0",
        log=tmp_path / "dashboard.log",
    ) as url:
        assert (
            "sign-in secrets cross the network in clear" in (tmp_path / "dashboard.log").read_text()
        )
        alice = Operator(url)
        page = alice.get("/topics")
        assert page.status == 200 and "/login?next=%2Ftopics" in page.url
        assert 'name="password"' in page.body
        assert alice.get("/api/topics").status == 401
        assert alice.post("/api/topics", {"topic": "AuthFileTopic"}).status == 401
        for elsewhere in ("//evil.example/", "/\\evil.example/", "https://evil.example/"):
            mallory = Operator(url, follow=False)
            away = mallory.sign_in(name="alice", password="correct horse battery", next=elsewhere)
            assert away.status == 303 and away.headers["location"] == "/", elsewhere
        for bad in (b'{"name": "alice"', b'["alice"]', b"\xff\xfe"):
            garbled = alice.request(
                "POST",
                "/login",
                headers={
                    "Content-Type": "application/json",
                    "Origin": alice.origin,
                    "X-CSRF-Token": alice.csrf(),
                },
                body=bad,
            )
            assert garbled.status == 400, (bad, garbled.body)
        refused = alice.sign_in(name="alice", password="wrong")
        assert refused.status == 401 and "sign-in refused" in refused.body
        assert alice.sign_in(name="mallory", password="correct horse battery").status == 401
        assert alice.get("/api/session").json()["signedIn"] is False
        signed = alice.sign_in(name="alice", password="correct horse battery", next="/topics")
        assert signed.status == 200 and signed.url == url + "/topics"
        assert 'id="operator">alice<' in signed.body and 'id="create-topic"' in signed.body
        assert alice.get("/api/session").json() == {
            "login": "file",
            "signedIn": True,
            "operator": "alice",
            "writes": True,
            "csrfToken": alice.csrf(),
        }
        created = alice.post("/api/topics", {"topic": "AuthFileTopic", "queues": "2"})
        assert created.status == 200, created.body
        assert "AuthFileTopic" in plain.admin_json("topicList")
        assert alice.post("/logout").status == 200  # to the sign-in page
        assert alice.get("/api/topics").status == 401
        assert alice.post("/api/topics", {"topic": "AfterLogout"}).status in (401, 403)
    assert "AfterLogout" not in plain.admin_json("topicList")
    assert "correct horse battery" not in (tmp_path / "dashboard.log").read_text()


def test_b340_a_session_idle_longer_than_session_idle_is_gone(plain, tmp_path):
    """B-340: with --session-idle 0 every session has expired by the next request: the
    sign-in form's session is gone when the form is posted, so the sign-in is refused."""
    operators = auth_file(tmp_path, "bob", "pw-bob")
    with dashboard(
        plain.namesrv, "--auth-file", str(operators), "--session-idle", "0", log=tmp_path / "d.log"
    ) as url:
        bob = Operator(url, follow=False)
        signed = bob.sign_in(name="bob", password="pw-bob")
        assert signed.status == 403 and "no session" in signed.body
        assert not signed.cookies
        assert bob.get("/api/session").json()["signedIn"] is False
        assert bob.get("/api/topics").status == 401


def test_b340_the_session_store_forgets_an_idle_session_and_keeps_a_used_one():
    """B-340: idle time counts from the last request; the store keys sessions by the token's hash."""
    now = [1000.0]
    store = SessionStore(idle_seconds=60, clock=lambda: now[0])
    token, session = store.new(signed_in=True, operator="alice")
    assert token not in repr(store.__dict__) and session.csrf != token
    now[0] += 59
    assert store.get(token) is session
    now[0] += 59  # 59 s after the last use: alive
    assert store.get(token) is session
    now[0] += 61
    assert store.get(token) is None and len(store) == 0
    assert store.get("not-a-token") is None


def test_b344_password_hashes_and_origins():
    """B-344/B-341: scrypt hashes verify only their password; Origin, else Referer, must match."""
    stored = hash_password("s3cret")
    assert stored.startswith("scrypt$") and "s3cret" not in stored
    assert verify_password(stored, "s3cret") and not verify_password(stored, "s3cret ")
    assert stored != hash_password("s3cret")  # a fresh salt each time
    assert not verify_password("scrypt$bad", "s3cret")
    own = "http://127.0.0.1:8080"
    assert same_origin(own, "http://127.0.0.1:8080", None)
    assert not same_origin(own, "http://127.0.0.1:8081", own + "/topics")
    assert not same_origin(own, "null", None)
    assert same_origin(own, None, own + "/topics")
    assert not same_origin(own, None, "http://127.0.0.1:8080.evil.example/")
    assert not same_origin(own, None, None)


def test_b344_the_dashboard_over_tls_sets_a_secure_cookie(plain, tmp_path, certs: Certs):  # noqa: F811
    """B-344: --tls-cert/--tls-key serve HTTPS; the session cookie is then Secure."""
    operators = auth_file(tmp_path, "carol", "pw-carol")
    with dashboard(
        plain.namesrv,
        "--allow-writes",
        "--auth-file",
        str(operators),
        "--tls-cert",
        str(certs.cert),
        "--tls-key",
        str(certs.key),
        log=tmp_path / "tls.log",
    ) as url:
        assert url.startswith("https://127.0.0.1:")
        carol = Operator(url, ca=certs.ca, follow=False)
        signed = carol.sign_in(name="carol", password="pw-carol")
        assert signed.status == 303, signed.body
        (cookie,) = signed.cookies
        assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert carol.get("/api/session").json()["signedIn"] is True
    assert load_auth_file(operators).keys() == {"carol"}

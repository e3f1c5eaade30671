"""Sign-in attempts, throttled per account and per client address (B-513).

After `free` refused sign-ins of one account (or from one address) a lock-out
begins: until it ends every sign-in of that account (from that address) is
answered 429 with Retry-After, its secret not even checked. Each further
refusal once a lock-out has ended doubles the next one (BASE, 2 BASE, 4 BASE ...
up to MAX). A key's refusals are forgotten FORGET seconds after its last; a
sign-in that holds forgets its account's (not its address's: an account of
one's own must not clear the way to guess others'). The lock-outs are logged
(WARNING: someone may be guessing) and counted for /metrics.

Time is the dashboard's clock (`time.monotonic`, or a test's), read per attempt;
nothing waits: a throttled request is answered at once.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

log = logging.getLogger(__name__)

ACCOUNT_FREE = 5  # refusals of one account before its first lock-out (Grafana's default)
ADDRESS_FREE = 20  # from one address (several operators may share it behind a NAT)
BASE = 10.0  # s: the first lock-out
MAX = 600.0  # s: the longest
FORGET = 900.0  # s after the last refusal its count starts again (> MAX)
KEYS_MAX = 10_000  # keys kept per table; the least recently refused goes first


@dataclass(slots=True)
class _Refusals:
    count: int
    last: float

    def locked_until(self, free: int) -> float:
        if self.count < free:
            return 0.0
        return self.last + min(BASE * 2.0 ** (self.count - free), MAX)


class LoginThrottle:
    """Refused sign-ins by account and by address; whether one may be tried now."""

    def __init__(
        self, registry: CollectorRegistry, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.clock = clock
        self._tables: dict[str, dict[str, _Refusals]] = {"account": {}, "address": {}}
        self._free = {"account": ACCOUNT_FREE, "address": ADDRESS_FREE}
        self.refused = Counter(
            "esbroker_dashboard_signin_refused",
            "Sign-ins refused: a wrong name or secret, or a lock-out in force (429)",
            ["reason"],
            registry=registry,
        )
        self.lockouts = Counter(
            "esbroker_dashboard_signin_lockouts",
            "Lock-outs begun after refused sign-ins, by what was locked",
            ["scope"],
            registry=registry,
        )

    def _get(self, scope: str, key: str, now: float) -> _Refusals | None:
        found = self._tables[scope].get(key)
        if found is not None and now - found.last > FORGET:
            del self._tables[scope][key]
            return None
        return found

    def retry_after(self, account: str, address: str) -> int:
        """Seconds until `account` may be tried from `address` (0: now); a refusal is counted."""
        now = self.clock()
        wait = 0.0
        for scope, key in (("account", account), ("address", address)):
            found = self._get(scope, key, now)
            if found is not None:
                wait = max(wait, found.locked_until(self._free[scope]) - now)
        if wait <= 0:
            return 0
        self.refused.labels("locked").inc()
        return max(1, math.ceil(wait))

    def failed(self, account: str, address: str) -> None:
        """A wrong name or secret: counted against both; a lock-out may begin."""
        now = self.clock()
        self.refused.labels("wrong").inc()
        for scope, key in (("account", account), ("address", address)):
            table = self._tables[scope]
            found = self._get(scope, key, now)
            if found is None:
                while len(table) >= KEYS_MAX:
                    del table[next(iter(table))]
                found = _Refusals(0, now)
            else:
                del table[key]  # re-inserted last: the most recently refused
            found.count += 1
            found.last = now
            table[key] = found
            free = self._free[scope]
            if found.count >= free:
                seconds = found.locked_until(free) - now
                self.lockouts.labels(scope).inc()
                log.warning(
                    "dashboard sign-in: %s %r locked out for %.0f s after %d refused sign-ins "
                    "(the last for account %r from %s)",
                    scope,
                    key,
                    seconds,
                    found.count,
                    account,
                    address,
                )

    def succeeded(self, account: str) -> None:
        self._tables["account"].pop(account, None)


def metrics_route(registry: CollectorRegistry) -> Route:
    """GET /metrics: the dashboard's own counters (sign-ins refused, lock-outs), for Prometheus."""

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return Route("/metrics", metrics, methods=["GET"])

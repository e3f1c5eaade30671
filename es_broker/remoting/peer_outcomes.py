"""What became of the requests a process sends on its own, peer by peer (B-315, B-316).

A broker registers with name servers, a slave fetches from its master, a
client sends heartbeats: nobody waits on the answers, so a refusal would go
unseen. `PeerRequests` keeps the outcome of one kind of request per peer:
the first refusal or failure is logged at ERROR with the peer, the code and
the remark, then at most once a minute while it lasts, and an INFO line says
when the peer answers again. `state()` is what GET_BROKER_RUNTIME_INFO shows:
`ok`, or each failing peer's `refused by HOST:PORT: CODE REMARK` (or `no
answer from HOST:PORT: ERROR`).

Log lines only: nothing here is recorded, so the clock it rate-limits with
(monotonic) does not touch replay.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from es_broker.remoting.codes import ResponseCode
from es_broker.remoting.command import RemotingCommand

REPEAT_PERIOD = 60.0  # s between two ERROR lines of one lasting failure
REMARK_MAX = 300  # characters of a peer's remark kept (a stack frame is enough)
PEERS_SHOWN = 4  # failing peers a state names; the rest are counted

# GET_BROKER_RUNTIME_INFO fields that carry a PeerRequests state, in the order they are shown
PEER_FIELDS = (
    "nameServerRegistration",
    "slaveFetch",
    "slaveOffsetMerge",
    "transactionCheck",
    "clientNotice",
)
NOT_YET = "not yet"  # nothing sent so far
NONE = "none"  # this process sends no such request (no name server, a master's slaveFetch, ...)


@dataclass(frozen=True, slots=True)
class Outcome:
    """A peer's last refusal (code and remark) or failure (no code: the request got no answer)."""

    peer: str
    code: int | None
    remark: str

    def __str__(self) -> str:
        if self.code is None:
            return f"no answer from {self.peer}: {self.remark}"
        return f"refused by {self.peer}: {self.code} {self.remark}"


@dataclass(slots=True)
class _Failing:
    outcome: Outcome
    since: float
    logged_at: float
    times: int = 1


class PeerRequests:
    """One kind of request (`what`, e.g. "registration with name server") and how each peer answered it."""

    def __init__(
        self,
        what: str,
        logger: logging.Logger,
        *,
        clock: Callable[[], float] = time.monotonic,
        repeat_period: float = REPEAT_PERIOD,
    ) -> None:
        self.what = what
        self.log = logger
        self.clock = clock
        self.repeat_period = repeat_period
        self.sent = 0  # answers and failures seen
        self._failing: dict[str, _Failing] = {}

    # ------------------------------------------------------------------ outcomes
    def answered(self, peer: str, response: RemotingCommand) -> bool:
        """The peer's answer: SUCCESS is ok, any other code a refusal. True when it was SUCCESS."""
        if response.code == ResponseCode.SUCCESS:
            self.ok(peer)
            return True
        self.refused(peer, response.code, response.remark or "")
        return False

    def ok(self, peer: str) -> None:
        self.sent += 1
        failing = self._failing.pop(peer, None)
        if failing is not None:
            self.log.info(
                "%s %s: ok again (%d failure(s) before, the last: %s)",
                self.what,
                peer,
                failing.times,
                failing.outcome,
            )

    def refused(self, peer: str, code: int, remark: str) -> None:
        self._failed(Outcome(peer, int(code), _short(remark)))

    def no_answer(self, peer: str, error: BaseException | str) -> None:
        """The request got no answer: the peer is unreachable, closed the connection, timed out."""
        self._failed(Outcome(peer, None, _short(str(error) or type(error).__name__)))

    def forget(self, peer: str) -> None:
        """The peer is gone (a client's connection closed): its failure no longer counts."""
        self._failing.pop(peer, None)

    def _failed(self, outcome: Outcome) -> None:
        self.sent += 1
        now = self.clock()
        failing = self._failing.get(outcome.peer)
        if failing is None:
            self._failing[outcome.peer] = _Failing(outcome, now, now)
            self.log.error("%s %s", self.what, outcome)
            return
        failing.outcome = outcome
        failing.times += 1
        if now - failing.logged_at >= self.repeat_period:
            failing.logged_at = now
            self.log.error(
                "%s %s (still failing: %d times in %.0f s)",
                self.what,
                outcome,
                failing.times,
                now - failing.since,
            )

    # ------------------------------------------------------------------ state
    def failing(self) -> list[Outcome]:
        """The last outcome of each peer that refused or failed and has not answered since."""
        return [f.outcome for f in self._failing.values()]

    def state(self) -> str:
        """`ok`, `not yet`, or the failing peers' outcomes joined by `; `."""
        failing = self.failing()
        if not failing:
            return "ok" if self.sent else NOT_YET
        shown = "; ".join(str(o) for o in failing[:PEERS_SHOWN])
        more = len(failing) - PEERS_SHOWN
        return shown if more <= 0 else f"{shown}; and {more} more peer(s)"


class LastingCondition:
    """A condition of this process that can last (not a peer's answer), logged as `PeerRequests` logs
    a failure: at ERROR the first time, then at most once a `repeat_period` while it lasts (with how
    often and how long), and at INFO when it ends."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        clock: Callable[[], float] = time.monotonic,
        repeat_period: float = REPEAT_PERIOD,
    ) -> None:
        self.log = logger
        self.clock = clock
        self.repeat_period = repeat_period
        self._since: float | None = None
        self._logged_at = 0.0
        self._times = 0
        self._last = ""

    @property
    def lasting(self) -> bool:
        return self._since is not None

    def holds(self, message: str) -> None:
        """The condition holds now; `message` says what it is."""
        now = self.clock()
        self._last = message
        if self._since is None:
            self._since, self._logged_at, self._times = now, now, 1
            self.log.error("%s", message)
            return
        self._times += 1
        if now - self._logged_at >= self.repeat_period:
            self._logged_at = now
            self.log.error(
                "%s (still so: %d times in %.0f s)", message, self._times, now - self._since
            )

    def ended(self, message: str) -> None:
        """The condition is over (nothing logged when it did not hold)."""
        if self._since is None:
            return
        self.log.info(
            "%s (after %d time(s) in %.0f s, the last: %s)",
            message,
            self._times,
            self.clock() - self._since,
            self._last,
        )
        self._since = None


def _short(remark: str) -> str:
    remark = " ".join(remark.split())  # one line
    return remark if len(remark) <= REMARK_MAX else remark[: REMARK_MAX - 1] + "…"


def peer_problems(runtime: Mapping[str, str]) -> list[str]:
    """The PEER_FIELDS of a GET_BROKER_RUNTIME_INFO answer that show a refusal or failure, as `field: state`."""
    return [
        f"{name}: {runtime[name]}"
        for name in PEER_FIELDS
        if runtime.get(name) not in (None, "", "ok", NOT_YET, NONE)
    ]

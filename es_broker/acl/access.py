"""The access check of a listener with ACL on: PlainPermissionManager#validate, request by request.

`AccessControl` holds the rules in force (a `PlainAcl`), reloads them when
the files change (`watch`, or `check_reload` to do one check now), counts the
requests it refused, and answers each request with None (go on) or a
`Refusal` carrying RocketMQ's code and remark: SYSTEM_ERROR (1) and
`RemotingHelper.exceptionSimpleDesc` of the AclException that 4.9.8 throws
from its RPC hook (`NettyRemotingAbstract#processRequestCommand` turns every
throwable of a hook into that answer).

The order is 4.9.8's: the global white list, then the accessKey (absent,
unknown), the account's whiteRemoteAddress (a match lets the request through
unsigned), the signature, the trace-topic exception, the admin-only codes,
then each resource's perm.

The signature is RocketMQ's or es-broker's bound one (es_broker/acl/signing.py,
docs/semantics.md B-345..B-349): a request carrying `esSignature` is checked as
the bound scheme (code, names, values, body, then its timestamp against the
window and its nonce against the account's replay cache); admin-only codes
take only the bound scheme, and with `strict` every code does. These checks
are decisions at the edge: refusals are counted with their reason, never
recorded, and replay re-decides nothing.
"""

from __future__ import annotations

import enum
import hashlib
import heapq
import logging
import os
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import trio

from es_broker.acl.addresses import IPAddress, parse_host
from es_broker.acl.plain import (
    Account,
    AclConfigError,
    Perm,
    PlainAcl,
    PlainAclFile,
    combine,
    describe_resource,
    parse_file,
)
from es_broker.acl.rules import TRACE_TOPIC, Rule
from es_broker.acl.signing import (
    ES_NONCE,
    ES_SIG_VERSION,
    ES_SIGNATURE,
    ES_TIMESTAMP,
    ES_VERSION_1,
    NONCE_CHARS,
    NONCE_MAX,
    NONCE_MIN,
    verify,
    verify_v1,
)
from es_broker.clock import SystemClock
from es_broker.remoting.codes import ResponseCode
from es_broker.remoting.command import ACCESS_KEY, RemotingCommand
from es_broker.remoting.requests import Refusal

log = logging.getLogger(__name__)

RELOAD_PERIOD = (
    0.5  # seconds between checks of the files (RocketMQ's AclFileWatchService polls every 500 ms)
)
DENIAL_KEYS_MAX = (
    4096  # distinct (accessKey, host, code) counted; later ones are counted under OVERFLOW
)
OVERFLOW = ("<overflow>", "<overflow>")
ANONYMOUS = "anonymous"
SIGNATURE_WINDOW_MS = (
    60_000  # aclSignatureWindowMs: how far esTimestamp may be from the broker's clock
)
NONCES_MAX = (
    65_536  # nonces remembered per account; a request beyond them is refused, none forgotten
)
REMARK_KEY_MAX = 128  # characters of a peer's accessKey repeated in a remark

_EXCEPTION = "org.apache.rocketmq.acl.common.AclException"
_AT = "org.apache.rocketmq.acl.plain.PlainPermissionManager"
# the top stack frame exceptionSimpleDesc appends, as 4.9.8 throws each refusal
_VALIDATE_NO_KEY = f"{_AT}.validate(PlainPermissionManager.java:664)"
_VALIDATE_UNKNOWN = f"{_AT}.validate(PlainPermissionManager.java:668)"
_VALIDATE_SIGNATURE = f"{_AT}.validate(PlainPermissionManager.java:684)"
_CHECK_ADMIN = f"{_AT}.checkPerm(PlainPermissionManager.java:581)"
_CHECK_DEFAULT = f"{_AT}.checkPerm(PlainPermissionManager.java:606)"
_CHECK_OWNED = f"{_AT}.checkPerm(PlainPermissionManager.java:611)"
_PARSE = "org.apache.rocketmq.acl.plain.PlainAccessValidator.parse(PlainAccessValidator.java:134)"
_ADDRESS = (
    "acl.address"  # Channel.attributes: the peer's parsed address, parsed once per connection
)


class LoadCause(enum.Enum):
    """Why the rules changed, as the on-change hook is told."""

    STARTUP = "startup"
    FILE_CHANGE = "file change"
    ADMIN = "admin request"  # an ACL admin code wrote the file (UPDATE_AND_CREATE_ACL_CONFIG, ...)


# the hook gets the rules now in force, why, and who asked (an admin request's account@address; else None)
OnChange = Callable[[PlainAcl, LoadCause, "str | None"], None]


@dataclass(frozen=True, slots=True)
class AclSources:
    """Where the rules come from: the default file and, optionally, a directory of more (conf/acl)."""

    default_file: Path
    directory: Path | None = None

    def files(self) -> list[Path]:
        """The files to read now: the directory's *.yml/*.yaml (sorted, recursive), then the default file."""
        found: list[Path] = []
        if self.directory is not None and self.directory.is_dir():
            found = sorted(
                p
                for p in self.directory.rglob("*")
                if p.suffix in (".yml", ".yaml") and p.is_file()
            )
        if self.default_file not in found:
            found.append(self.default_file)
        return found


class Reason(enum.Enum):
    """Why es-broker's signature checks refused a request (beyond 4.9.8's refusals, B-347)."""

    MALFORMED = "malformed"  # esSigVersion, esTimestamp or esNonce missing or not as B-345 says
    STALE = "stale"  # esTimestamp outside the window
    REPLAYED = "replayed"  # the account's nonce was seen within the window
    NONCES_FULL = "nonces-full"  # the account's replay cache is full: refused rather than forgotten
    SCHEME = "scheme"  # RocketMQ's signature on an admin-only code (or on any, aclStrictSignatures)
    READ = "read"  # a read of what the account may not SUB (B-350): refused by the handler
    # 4.9.8's own refusals, named for esbroker_acl_denied_total (their answer stays 4.9.8's)
    NO_KEY = "no-access-key"  # unsigned, from an address no global white list lets through
    NO_ACCOUNT = "no-account"  # an accessKey no rule names
    SIGNATURE = "bad-signature"  # the signature does not hold for the account's secret
    NOT_ADMIN = "not-admin"  # an admin-only request code from an account that is not admin
    NO_PERM = "no-perm"  # the account's perm on the topic or group does not allow it
    UNREADABLE = "unreadable"  # the request's fields could not be read to check them
    NO_RULE = "no-rule"  # a request code without an ACL rule (fail closed)


#: the reason counted for a 4.9.8 refusal, by the frame it is thrown from
_FRAME_REASONS = {
    _VALIDATE_NO_KEY: Reason.NO_KEY,
    _VALIDATE_UNKNOWN: Reason.NO_ACCOUNT,
    _VALIDATE_SIGNATURE: Reason.SIGNATURE,
    _CHECK_ADMIN: Reason.NOT_ADMIN,
    _CHECK_DEFAULT: Reason.NO_PERM,
    _CHECK_OWNED: Reason.NO_PERM,
    _PARSE: Reason.UNREADABLE,
}


class AccessDenied(Exception):
    """One refusal: the AclException message and the frame 4.9.8 throws it from.

    es-broker's own refusals (a `reason`) have no 4.9.8 frame and answer NO_PERMISSION (16).
    """

    def __init__(
        self,
        message: str,
        frame: str,
        access_key: str | None,
        reason: Reason | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.frame = frame
        self.access_key = access_key
        self.reason = reason

    @property
    def counted_as(self) -> Reason:
        """The reason it is counted under: es-broker's, else the 4.9.8 check that refused it."""
        if self.reason is not None:
            return self.reason
        if self.message.startswith("No acl rule for request code"):
            return Reason.NO_RULE
        return _FRAME_REASONS.get(self.frame, Reason.NO_PERM)

    def refusal(self) -> Refusal:
        if self.reason is not None:
            return Refusal(int(ResponseCode.NO_PERMISSION), f"{_EXCEPTION}: {self.message}")
        return Refusal(
            int(ResponseCode.SYSTEM_ERROR), f"{_EXCEPTION}: {self.message}, {self.frame}"
        )


class NonceCache:
    """The nonces one account used, each kept until its timestamp leaves the window.

    Bounded: when `limit` nonces are still within the window, the next request is refused
    (Reason.NONCES_FULL) rather than a remembered nonce forgotten (which would let it be replayed).
    """

    __slots__ = ("expiry", "limit", "seen")

    def __init__(self, limit: int = NONCES_MAX) -> None:
        self.seen: dict[str, int] = {}
        self.expiry: list[
            tuple[int, str]
        ] = []  # heap of (last ms the timestamp is accepted, nonce)
        self.limit = limit

    def add(self, nonce: str, until_ms: int, now_ms: int) -> Reason | None:
        """Remember `nonce` until `until_ms`; the reason to refuse if seen or full, else None."""
        while self.expiry and self.expiry[0][0] < now_ms:
            _, old = heapq.heappop(self.expiry)
            self.seen.pop(old, None)
        if nonce in self.seen:
            return Reason.REPLAYED
        if len(self.seen) >= self.limit:
            return Reason.NONCES_FULL
        self.seen[nonce] = until_ms
        heapq.heappush(self.expiry, (until_ms, nonce))
        return None

    def __len__(self) -> int:
        return len(self.seen)


@dataclass(frozen=True, slots=True)
class Scope:
    """What one caller may see under the rules in force: every resource, or those its perms name.

    `everything` with `reason` when a white list let the caller through or the
    account is an admin that lists no resource perms (it may do everything).
    """

    access_key: str | None
    admin: bool
    everything: bool
    reason: str
    account: Account | None = None

    def perm(self, resource: str) -> int | None:
        """The account's perm on a resource (topic, or group as its retry topic); None: everything."""
        if self.everything or self.account is None:
            return None
        return self.account.perm_for(resource)

    def may_see(self, resource: str) -> bool:
        """True if the caller may publish to or subscribe to the resource (Permission ANY)."""
        return self.everything or (
            self.account is not None and self.account.may(resource, Perm.ANY)
        )

    def may_read(self, resource: str) -> bool:
        """True if the caller may subscribe to the resource: read its messages and offsets (B-350)."""
        return self.everything or (
            self.account is not None and self.account.may(resource, Perm.SUB)
        )

    def may_publish(self, resource: str) -> bool:
        """True if the caller may publish to the resource (B-503: ending a transaction of it)."""
        return self.everything or (
            self.account is not None and self.account.may(resource, Perm.PUB)
        )

    @property
    def sees_all(self) -> bool:
        """True if lists and reads are not filtered for the caller: white-listed, or an admin (B-351)."""
        return self.everything or self.admin


class AccessControl:
    """A listener's plain ACL: the rules in force, their reloads, and the refusals counted."""

    def __init__(
        self,
        sources: AclSources,
        rules: Mapping[int, Rule],
        *,
        name: str = "broker",
        on_change: OnChange | None = None,
        window_ms: int = SIGNATURE_WINDOW_MS,
        strict: bool = False,
        admin_rocketmq: bool = False,
        now_ms: Callable[[], int] | None = None,
        nonces_max: int = NONCES_MAX,
    ) -> None:
        if window_ms <= 0:
            raise ValueError(f"aclSignatureWindowMs must be positive, got {window_ms}")
        if nonces_max <= 0:
            raise ValueError(f"aclNonceCacheSize must be positive, got {nonces_max}")
        self.sources = sources
        self.rules = rules
        self.name = name
        self.on_change = on_change
        self.window_ms = window_ms  # aclSignatureWindowMs
        self.strict = strict  # aclStrictSignatures: RocketMQ's signature refused for every code
        # aclAdminRocketmqSignatures: admin-only codes take RocketMQ's signature too (4.9.8's rule)
        self.admin_rocketmq = admin_rocketmq and not strict
        self.now_ms = (
            now_ms or SystemClock().now_ms
        )  # the edge's clock: never recorded, never replayed
        self.nonces_max = nonces_max
        self.nonces: dict[str, NonceCache] = {}  # per accessKey
        # every refusal by (who, host, code, reason); also counted in `denials`
        self.reasons: Counter[tuple[str, str, int, str]] = Counter()
        self.version = 0  # 1 after the startup load, +1 on every reload that changed the rules
        self.denials: Counter[tuple[str, str, int]] = Counter()
        self.reload_errors = 0  # reloads refused (the old rules stayed)
        self.last_error: str | None = None
        self._stamp: tuple[tuple[str, int, int], ...] | None = None
        self._digest = ""
        self.acl = self._load_now()
        self._changed(LoadCause.STARTUP)

    # -- loading -------------------------------------------------------------------------------
    def _stat(self) -> tuple[tuple[str, int, int], ...]:
        out = []
        for path in self.sources.files():
            try:
                st = path.stat()
                out.append((str(path), st.st_mtime_ns, st.st_size))
            except OSError:
                out.append((str(path), -1, -1))
        return tuple(out)

    def _read(self) -> tuple[list[tuple[Path, bytes]], str]:
        contents = []
        digest = hashlib.sha256()
        for path in self.sources.files():
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                raise AclConfigError(
                    f"{path}: the ACL file does not exist (aclEnable=true needs it; see "
                    "acl_plain_file in broker.conf)"
                ) from None
            except OSError as exc:
                raise AclConfigError(f"{path}: cannot be read: {exc.strerror}") from None
            contents.append((path, data))
            digest.update(str(path).encode() + b"\0" + hashlib.sha256(data).digest())
        return contents, digest.hexdigest()

    def _load_now(self) -> PlainAcl:
        self._stamp = self._stat()
        contents, digest = self._read()
        files: list[PlainAclFile] = [parse_file(path, data) for path, data in contents]
        acl = combine(files)
        self._digest = digest
        return acl

    def _changed(self, cause: LoadCause, requester: str | None = None) -> None:
        self.version += 1
        log.info(
            "%s: ACL rules version %d loaded (%s): %s",
            self.name,
            self.version,
            cause.value,
            self.acl.summary(),
        )
        if self.on_change is not None:
            try:
                self.on_change(self.acl, cause, requester)
            except Exception:  # a hook's bug must not stop the reloads
                log.exception("%s: ACL on-change hook failed", self.name)

    def check_reload(
        self, cause: LoadCause = LoadCause.FILE_CHANGE, requester: str | None = None
    ) -> bool:
        """Look at the files once; load them if they changed. True if new rules are in force.

        An invalid file is logged (once per change) and the old rules stay. An admin request
        that wrote the file calls this at once with its cause and requester.
        """
        stamp = self._stat()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            contents, digest = self._read()
            if digest == self._digest:  # touched, not changed
                return False
            acl = combine([parse_file(path, data) for path, data in contents])
        except AclConfigError as exc:
            self.reload_errors += 1
            self.last_error = str(exc)
            log.error(
                "%s: ACL reload refused, the previous rules (version %d) stay in force: %s",
                self.name,
                self.version,
                exc,
            )
            return False
        self._digest = digest
        self.acl = acl
        self.last_error = None
        self._changed(cause, requester)
        return True

    async def watch(self, period: float = RELOAD_PERIOD) -> None:
        """Check the files every `period` seconds, forever (RocketMQ's AclFileWatchService)."""
        while True:
            await trio.sleep(period)  # pacing the polls of the files; nothing waits on it
            self.check_reload()

    # -- checking ------------------------------------------------------------------------------
    def check(self, channel: Any, request: RemotingCommand) -> Refusal | None:
        """None if the request may run; else the refusal to answer (and it is counted)."""
        rule = self.rules.get(request.code)
        if rule is not None and rule.open:
            return None
        attributes = channel.attributes
        address = attributes.get(_ADDRESS, False)
        if address is False:
            address = attributes[_ADDRESS] = parse_host(channel.remote[0])
        try:
            # every served code has a rule (tests/test_acl_rules.py); fail closed anyway
            if rule is None:
                raise AccessDenied(
                    f"No acl rule for request code={request.code}",
                    _VALIDATE_UNKNOWN,
                    request.access_key,
                )
            self.validate(rule, request, address)
        except AccessDenied as denied:
            self._count(denied.access_key, channel.remote[0], request.code, denied.counted_as)
            refusal = denied.refusal()
            # at INFO (`serve -v`) only: refusals are counted (take_denials), a flood must not fill the log
            log.info(
                "%s: refused request code %d from %s: %s",
                self.name,
                request.code,
                channel.remote[0],
                refusal.remark,
            )
            return refusal
        return None

    def validate(self, rule: Rule, request: RemotingCommand, address: IPAddress | None) -> None:
        """PlainPermissionManager#validate for one request; raises AccessDenied."""
        acl = self.acl
        for pattern in acl.global_white_remote_addresses:
            if pattern.match(address):
                return
        fields = request.signature_fields()
        access_key = fields.get(ACCESS_KEY)
        if access_key is None:
            raise AccessDenied("No accessKey is configured", _VALIDATE_NO_KEY, None)
        account = acl.accounts.get(access_key)
        if account is None:
            raise AccessDenied(
                f"No acl config for {access_key[:REMARK_KEY_MAX]}", _VALIDATE_UNKNOWN, access_key
            )
        if account.white_remote_address.match(address):
            return
        bound = ES_SIGNATURE in fields
        if bound:
            if not verify_v1(request.code, fields, request.body, account.secret_key):
                raise AccessDenied(
                    f"Check signature failed for accessKey={access_key}",
                    _VALIDATE_SIGNATURE,
                    access_key,
                )
            self._fresh(fields, access_key)  # after the signature: only the account fills its cache
        elif self.strict:
            raise AccessDenied(
                f"RocketMQ's signature is refused by this broker (aclStrictSignatures=true): sign "
                f"request code={request.code} with es-broker's (esSignature, accessKey={access_key})",
                "",
                access_key,
                Reason.SCHEME,
            )
        elif not verify(fields, request.body, account.secret_key):
            raise AccessDenied(
                f"Check signature failed for accessKey={access_key}",
                _VALIDATE_SIGNATURE,
                access_key,
            )
        try:
            needs = rule.needs(request) if rule.needs is not None else []
            admin_only = rule.admin or (rule.admin_when is not None and rule.admin_when(request))
        except (
            Exception
        ) as exc:  # PlainAccessValidator#parse: whatever it cannot read is an AclException
            raise AccessDenied(f"{type(exc).__name__}: {exc}", _PARSE, access_key) from None
        if (TRACE_TOPIC, Perm.PUB) in needs:  # message traces may always be written (4.9.8)
            return
        if admin_only and not account.admin:
            raise AccessDenied(
                f"Need admin permission for request code={request.code}, but accessKey="
                f"{access_key} is not",
                _CHECK_ADMIN,
                access_key,
            )
        if admin_only and not bound and not self.admin_rocketmq:
            raise AccessDenied(
                f"Request code={request.code} is admin-only and takes es-broker's signature "
                f"(esSignature) only, not RocketMQ's (accessKey={access_key}; "
                f"aclAdminRocketmqSignatures=true admits it)",
                "",
                access_key,
                Reason.SCHEME,
            )
        if not needs or account.has_every_perm:
            return
        for resource, needed in needs:
            owned = account.resource_perms.get(resource)
            frame = _CHECK_OWNED
            if owned is None:
                owned = account.perm_for(resource)
                frame = _CHECK_DEFAULT
            if not Perm.check(needed, owned):
                raise AccessDenied(
                    f"No default permission for {describe_resource(resource)}", frame, access_key
                )

    def _fresh(self, fields: Mapping[str, str], access_key: str) -> None:
        """The bound signature's version, timestamp (within the window) and nonce (never seen)."""
        version = fields.get(ES_SIG_VERSION)
        stamp = fields.get(ES_TIMESTAMP, "")
        nonce = fields.get(ES_NONCE, "")
        if version != ES_VERSION_1:
            self._malformed(
                f"{ES_SIG_VERSION}={(version or '')[:16]!r} is not {ES_VERSION_1}", access_key
            )
        if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= 15):
            self._malformed(f"{ES_TIMESTAMP} is not milliseconds since the epoch", access_key)
        if not (NONCE_MIN <= len(nonce) <= NONCE_MAX and set(nonce) <= NONCE_CHARS):
            self._malformed(
                f"{ES_NONCE} is not {NONCE_MIN} to {NONCE_MAX} characters of [0-9A-Za-z_-]",
                access_key,
            )
        now = self.now_ms()
        sent = int(stamp)
        if abs(now - sent) > self.window_ms:
            raise AccessDenied(
                f"Stale request from accessKey={access_key}: esTimestamp is {now - sent} ms from "
                f"the broker's clock, beyond aclSignatureWindowMs={self.window_ms}",
                "",
                access_key,
                Reason.STALE,
            )
        cache = self.nonces.get(access_key)
        if cache is None:
            cache = self.nonces[access_key] = NonceCache(self.nonces_max)
        reason = cache.add(nonce, sent + self.window_ms, now)
        if reason is Reason.REPLAYED:
            raise AccessDenied(
                f"Replayed request from accessKey={access_key}: its esNonce was seen within "
                f"aclSignatureWindowMs={self.window_ms}",
                "",
                access_key,
                reason,
            )
        if reason is Reason.NONCES_FULL:
            raise AccessDenied(
                f"Too many requests from accessKey={access_key} within aclSignatureWindowMs="
                f"{self.window_ms}: {len(cache)} nonces remembered, the most the broker keeps",
                "",
                access_key,
                reason,
            )

    @staticmethod
    def _malformed(what: str, access_key: str) -> NoReturn:
        raise AccessDenied(
            f"Malformed es-broker signature from accessKey={access_key}: {what}",
            "",
            access_key,
            Reason.MALFORMED,
        )

    def scope(self, channel: Any, request: RemotingCommand) -> Scope:
        """What the caller of `request` may see, decided as `validate` decides each resource.

        Called by a handler, so the request already passed `check` (its
        signature, white lists); the order of the exceptions is validate's.
        """
        address = channel.attributes.get(_ADDRESS, False)
        if address is False:
            address = channel.attributes[_ADDRESS] = parse_host(channel.remote[0])
        acl = self.acl
        access_key = request.access_key
        account = acl.accounts.get(access_key) if access_key is not None else None
        admin = account is not None and account.admin
        if any(pattern.match(address) for pattern in acl.global_white_remote_addresses):
            return Scope(access_key, admin, True, "the global white list lets its address through")
        if account is None:  # cannot pass check; answered as nothing visible all the same
            return Scope(access_key, False, False, "no such account")
        if account.white_remote_address.match(address):
            return Scope(access_key, admin, True, "the account's whiteRemoteAddress matches")
        if account.has_every_perm:
            return Scope(access_key, True, True, "an admin account without resource perms")
        return Scope(access_key, admin, False, "the account's perms", account)

    def refuse_read(
        self,
        channel: Any,
        request: RemotingCommand,
        scope: Scope,
        what: str,
        *,
        action: str = "read",
        perm: str = "SUB",
    ) -> Refusal:
        """A handler's refusal of a read (or, `action`, another use of a stored message, B-502,
        B-503) outside the caller's perms (B-350): counted, NO_PERMISSION."""
        self._count(scope.access_key, channel.remote[0], request.code, Reason.READ)
        key = (scope.access_key or ANONYMOUS)[:REMARK_KEY_MAX]
        return Refusal(
            int(ResponseCode.NO_PERMISSION),
            f"{_EXCEPTION}: No permission to {action} {what}: accessKey={key} has no {perm} on it",
        )

    def _count(
        self, access_key: str | None, host: str, code: int, reason: Reason | None = None
    ) -> None:
        if access_key is None:
            who = ANONYMOUS
        elif access_key in self.acl.accounts:
            who = access_key
        else:  # a peer's invented key: counted, but bounded
            who = f"unknown:{access_key[:64]}"
        key = (who, host, code)
        if key not in self.denials and len(self.denials) >= DENIAL_KEYS_MAX:
            key = (*OVERFLOW, code)
        self.denials[key] += 1
        if reason is not None:
            self.reasons[(*key, reason.value)] += 1

    def take_denials(self) -> Counter[tuple[str, str, int]]:
        """The refusals counted since the last call, by (accessKey or 'anonymous', host, code); resets them."""
        taken, self.denials = self.denials, Counter()
        return taken

    def take_reasons(self) -> Counter[tuple[str, str, int, str]]:
        """The same refusals by (who, host, code, reason): every refusal has a reason; resets them."""
        taken, self.reasons = self.reasons, Counter()
        return taken

    def __repr__(self) -> str:
        return (
            f"AccessControl({self.name}, version={self.version}, accounts={len(self.acl.accounts)}, "
            f"denials={sum(self.denials.values())})"
        )


def default_acl_sources(
    plain_file: str, data_dir: str, environ: Mapping[str, str] | None = None
) -> AclSources:
    """Where the broker reads its rules (docs/semantics.md B-160).

    With ROCKETMQ_HOME set, as RocketMQ 4.9.8: ROCKETMQ_HOME/conf/plain_acl.yml
    and every *.yml under ROCKETMQ_HOME/conf/acl. Without it, the data
    directory plays ROCKETMQ_HOME's part. `acl_plain_file` (broker.conf, in
    place of the Java property rocketmq.acl.plain.file) names the default
    file instead; a relative path is taken from that home.
    """
    environ = os.environ if environ is None else environ
    home = Path(environ.get("ROCKETMQ_HOME") or data_dir)
    default_file = Path(plain_file) if plain_file else Path("conf") / "plain_acl.yml"
    if not default_file.is_absolute():
        default_file = home / default_file
    return AclSources(default_file.resolve(), (home / "conf" / "acl").resolve())

"""Blocking remoting connections for the blocking client: a plain (or TLS) socket per request in flight.

The calling thread writes the request and reads until the answer with the
same opaque arrives, with the same sans-IO `Connection` the async channels
use, so a blocking send costs one write and one read, no hand-off to another
thread. A connection serves one request at a time; threads sending at once
each take an idle connection of the address or open another.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import ssl
import time

from es_broker.acl.signing import Credentials
from es_broker.net.channel import READ_SIZE, next_opaque
from es_broker.net.remoting_client import DEFAULT_TIMEOUT, RemotingError, split_addr
from es_broker.net.tls import TlsClientSettings
from es_broker.remoting.codes import ResponseCode
from es_broker.remoting.command import RemotingCommand, response_to
from es_broker.remoting.connection import CLOSED, NEED_DATA, Connection
from es_broker.remoting.errors import ProtocolError


class BlockingChannel:
    """One connection to a broker or name server, used by one thread at a time."""

    def __init__(self, addr: str, sock: socket.socket) -> None:
        self.addr = addr
        self.sock = sock
        self.conn = Connection()
        self.closed = False

    def invoke(self, command: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and read until its answer; RemotingError (connection closed) on any failure."""
        opaque = next_opaque()
        data = self.conn.send(dataclasses.replace(command, opaque=opaque))
        deadline = time.monotonic() + timeout
        try:
            self.sock.settimeout(timeout)
            self.sock.sendall(data)
            while True:
                event = self.conn.next_event()
                if event is NEED_DATA:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError
                    self.sock.settimeout(remaining)
                    self.conn.receive_data(self.sock.recv(READ_SIZE))
                elif event is CLOSED:
                    raise RemotingError(f"connection to {self.addr} closed")
                elif event.is_response:
                    if event.opaque == opaque:
                        return event
                    # an answer to an earlier request of this connection that timed out: dropped
                elif not event.is_oneway:
                    self.sock.sendall(
                        self.conn.send(
                            response_to(
                                event,
                                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                f"The request code {event.code} is not supported by this client",
                            )
                        )
                    )
        except TimeoutError:
            self.close()
            raise RemotingError(
                f"no answer from {self.addr} within {timeout} s (code {command.code})"
            ) from None
        except (OSError, ProtocolError) as exc:
            self.close()
            raise RemotingError(f"connection to {self.addr} failed: {exc}") from None
        except BaseException:
            self.close()  # e.g. KeyboardInterrupt mid-frame: the stream's framing is lost
            raise

    def invoke_oneway(self, command: RemotingCommand, timeout: float) -> None:
        """Write a oneway request; returns once it is written."""
        try:
            self.sock.settimeout(timeout)
            self.sock.sendall(self.conn.send(dataclasses.replace(command, opaque=next_opaque())))
        except OSError as exc:
            self.close()
            raise RemotingError(f"connection to {self.addr} failed: {exc}") from None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.close()


class BlockingRemoting:
    """Blocking requests by address, signed with `credentials`, over TLS with `tls` (as RemotingClient)."""

    def __init__(
        self,
        *,
        credentials: Credentials | None = None,
        tls: TlsClientSettings | None = None,
        connect_timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.credentials = credentials
        self.tls = tls
        self._tls_context = tls.context() if tls is not None else None
        self.connect_timeout = connect_timeout
        self._idle: dict[str, list[BlockingChannel]] = {}
        self._closed = False

    def signed(self, command: RemotingCommand) -> RemotingCommand:
        if self.credentials is None:
            return command
        return command.signed_with(
            self.credentials.sign_request(command.code, command.signature_fields(), command.body)
        )

    def invoke(
        self, addr: str, command: RemotingCommand, timeout: float = DEFAULT_TIMEOUT
    ) -> RemotingCommand:
        """Send a request and wait for its answer; raises RemotingError."""
        channel = self._take(addr, timeout)
        response = channel.invoke(self.signed(command), timeout)
        self._give_back(channel)
        return response

    def invoke_oneway(
        self, addr: str, command: RemotingCommand, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        channel = self._take(addr, timeout)
        channel.invoke_oneway(self.signed(command), timeout)
        self._give_back(channel)

    def _take(self, addr: str, timeout: float) -> BlockingChannel:
        if self._closed:
            raise RemotingError("the client is closed")
        idle = self._idle.get(addr)
        while idle:
            try:
                channel = idle.pop()
            except IndexError:  # another thread took the last one meanwhile
                break
            if not channel.closed:
                return channel
        return self._connect(addr, min(timeout, self.connect_timeout))

    def _give_back(self, channel: BlockingChannel) -> None:
        if self._closed:
            channel.close()
        elif not channel.closed:
            self._idle.setdefault(channel.addr, []).append(channel)

    def _connect(self, addr: str, timeout: float) -> BlockingChannel:
        host, port = split_addr(addr)
        try:
            sock = socket.create_connection((host, port), timeout=max(timeout, 0.001))
        except OSError as exc:
            raise RemotingError(f"connect to {addr} failed: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls_context is not None:
            assert self.tls is not None
            sock.settimeout(self.tls.handshake_timeout)
            try:
                sock = self._tls_context.wrap_socket(sock, server_hostname=host)
            except ssl.SSLError as exc:
                sock.close()
                raise RemotingError(f"TLS handshake with {addr} failed: {exc}") from None
            except TimeoutError:
                sock.close()
                raise RemotingError(
                    f"TLS handshake with {addr} failed: no answer within "
                    f"{self.tls.handshake_timeout:g} s"
                ) from None
            except OSError as exc:
                sock.close()
                raise RemotingError(f"TLS handshake with {addr} failed: {exc}") from None
        return BlockingChannel(addr, sock)

    def close(self) -> None:
        """Close every idle connection; connections in use close when their request ends."""
        self._closed = True
        for channels in list(self._idle.values()):
            while channels:
                channels.pop().close()
        self._idle.clear()

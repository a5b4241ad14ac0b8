"""The HTTP layer to one BMC: where its requests may go, how long they may take, how much
of an answer is read, and how its certificate is trusted.

A `Transport` is made per BMC session and hands out `requests` sessions (`Transport.http`)
that sushy's connector uses in place of its own, so that every request sushy makes (the
session login, every link a BMC returns, task monitors, registries) and fleetspec's own
(the firmware push, the reset probe) passes one gate, `BmcHttp.send`, which no code path
goes around (requests follows a redirect through ``send`` too):

- **Origin** (#41 item 1): a request goes only to the endpoint's scheme, host and port. A
  BMC is trusted to describe itself, not to send fleetspec elsewhere: a link, an
  ``@odata.id``, a ``MultipartHttpPushUri``, a task monitor or a ``Location`` naming
  another origin is refused before a byte leaves, so the Basic credential, the session token
  (``X-Auth-Token``, which requests would carry across a redirect) and a firmware image are
  sent to the BMC and nowhere else. A URL with a user part is refused too.
- **Deadlines** (#41 item 6): the read timeout a caller gives is the request's total time,
  answer included (a per-read timeout alone lets a BMC that trickles a byte every 2 s
  hold a request for ever); a BMC as a whole has its own deadline where the caller gives
  one. A watchdog shuts the request's socket at its deadline, wherever the request is
  (TLS handshake, headers, body).
- **Answer size** (#41 item 10): at most `MAX_ANSWER_BYTES` of an answer are read
  (counted as it arrives, after any decompression); a larger one is refused.
- **TLS** (#40 item 4): verification is never off. `Tls` says how the certificate is
  trusted: the CA bundle (``ca_file``, else the bundle requests ships), checked against the
  endpoint's host name, or against ``server_name`` where the certificate carries another
  name (a vendor default such as ``CN=AMI`` with no subjectAltName, reached by address: the
  common name is accepted only when the certificate has no subjectAltName, RFC 6125
  section 6.4.4); or pinned SHA-256 fingerprints of the certificate itself (then neither
  chain nor name is checked: the exact certificate is).

Each refusal is recorded (`Transport.problems`): a caller that swallowed the request's
error still learns that the BMC broke a rule, and makes the node an error (never "matches").
"""

from __future__ import annotations

import hashlib
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

# The largest answer in the four real BMCs' Redfish trees in NVIDIA/libredfish tests/mockups is the
# Dell R750 iDRAC9's BIOS attribute registry (Systems/System.Embedded.1/Bios/BiosRegistry,
# 1.16 MB; Supermicro HGX H100's is 0.92 MB): 16 MiB leaves room for larger registries and
# keeps a hostile answer from taking the controller's memory.
MAX_ANSWER_BYTES = 16 << 20
CHUNK = 64 << 10
DEFAULT_PORTS = {"http": 80, "https": 443}


class Refused(requests.exceptions.RequestException):
    """The transport refused a request or an answer (origin, deadline, size, certificate)."""


@dataclass(frozen=True)
class Tls:
    """How a BMC's certificate is trusted. ``fingerprints``: lowercase hex SHA-256 of the
    certificate (DER), any one of which is accepted; else ``ca_file`` (a path; None: the
    bundle requests ships) and the name checked (``server_name``; None: the endpoint's host)."""

    ca_file: str | None = None
    server_name: str | None = None
    fingerprints: tuple[str, ...] = ()

    def context(self) -> ssl.SSLContext:
        if self.fingerprints:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE  # the pin is checked on the certificate itself (PinnedHTTPS.connect)
            return ctx
        ctx = ssl.create_default_context(cafile=self.ca_file or requests.utils.DEFAULT_CA_BUNDLE_PATH)
        # a name only from subjectAltName, except where the site names the certificate's
        # name itself (server_name): then urllib3 matches it, its CN only without any SAN
        ctx.hostname_checks_common_name = self.server_name is not None
        return ctx

    def pool_kwargs(self, ctx: ssl.SSLContext) -> dict[str, Any]:
        if self.fingerprints:
            return {"ssl_context": ctx, "cert_reqs": "CERT_NONE", "assert_hostname": False}
        kwargs: dict[str, Any] = {"ssl_context": ctx, "cert_reqs": "CERT_REQUIRED"}
        if self.server_name:
            kwargs.update(server_hostname=self.server_name, assert_hostname=self.server_name)
        return kwargs


def origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an absolute http(s) URL without a user part; None otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or parts.username is not None or "@" in parts.netloc:
        return None
    return scheme, parts.hostname.lower().rstrip("."), port or DEFAULT_PORTS[scheme]


def fingerprint(der: bytes) -> str:
    return hashlib.sha256(der).hexdigest()


def colons(hex_digest: str) -> str:
    """As ``openssl x509 -fingerprint -sha256`` prints it."""
    return ":".join(hex_digest[i:i + 2] for i in range(0, len(hex_digest), 2)).upper()


class Transport:
    """The rules for one BMC's traffic; ``http()`` makes a requests session that keeps them."""

    def __init__(self, endpoint: str, tls: Tls, deadline_s: float | None = None,
                 max_answer: int = MAX_ANSWER_BYTES) -> None:
        home = origin(endpoint)
        if home is None:
            raise ValueError(f"not an http(s) origin: {endpoint}")
        self.endpoint = endpoint
        self.home = home
        self.tls = tls
        self.deadline_s = deadline_s
        self.deadline = None if deadline_s is None else time.monotonic() + deadline_s
        self.max_answer = max_answer
        self.problems: list[str] = []
        self._context = tls.context() if home[0] == "https" else None

    def refuse(self, problem: str) -> Refused:
        if problem not in self.problems:
            self.problems.append(problem)
        return Refused(problem)

    def http(self) -> BmcHttp:
        return BmcHttp(self)

    def check_origin(self, url: str, what: str = "a request") -> None:
        if origin(url) != self.home:
            raise self.refuse(f"the BMC named {_clip(url)} for {what}, off its own origin "
                              f"{self.home[0]}://{self.home[1]}:{self.home[2]}: refused, nothing was sent there "
                              "(a BMC's links must stay on the BMC)")


def _clip(text: str, limit: int = 160) -> str:
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= limit else text[:limit] + "..."


class BmcHttp(requests.Session):
    """A requests session bound to one `Transport`: every request passes `send`."""

    def __init__(self, transport: Transport) -> None:
        super().__init__()
        self.transport = transport
        self.trust_env = False  # no proxy, netrc or CA bundle from the environment: the BMC directly, as the spec says
        self._live: list[socket.socket] = []  # duplicates of the sockets of the request in flight
        self._lock = threading.Lock()
        self._depth = 0
        self._expired = False
        adapter = _Adapter(self)
        self.mount("https://", adapter)
        self.mount("http://", adapter)

    def track(self, sock: socket.socket) -> None:
        with self._lock:
            self._live.append(sock.dup())
            if self._expired:
                self._shut()

    def _shut(self) -> None:
        for sock in self._live:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _expire(self) -> None:
        with self._lock:
            self._expired = True
            self._shut()

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        t = self.transport
        what = f"{request.method} {urlsplit(request.url or '').path or '/'}"
        if sys.is_finalizing():  # a library's __del__ at exit: no watchdog thread can start now
            raise Refused(f"{what} at the interpreter's exit: not sent")
        t.check_origin(request.url or "", what)
        now = time.monotonic()
        timeout = kwargs.get("timeout")
        total = float(timeout[1] if isinstance(timeout, tuple) else timeout or 60)
        until, why = now + total, f"the {total:g} s deadline of one request"
        if t.deadline is not None and t.deadline < until:
            until, why = t.deadline, f"the BMC's deadline ({t.deadline_s:g} s for all its requests)"
        if until <= now:
            raise t.refuse(f"unreachable: {why} was spent before {_clip(what)}")
        kwargs["stream"] = True
        outer = self._depth == 0
        self._depth += 1
        watchdog = threading.Timer(until - now, self._expire)
        watchdog.daemon = True
        watchdog.start()
        recorded = len(t.problems)
        try:
            response = super().send(request, **kwargs)
            body = self._read(response, what)
        except Refused:
            raise
        except Exception as exc:
            if len(t.problems) > recorded:  # refused inside the connection (a certificate not pinned)
                raise Refused(t.problems[-1]) from None
            if self._expired:
                raise t.refuse(f"unreachable: the BMC had not finished answering {_clip(what)} within {why}") from None
            if isinstance(exc, requests.exceptions.SSLError):
                raise t.refuse(_tls_problem(t, exc)) from None
            raise
        finally:
            watchdog.cancel()
            self._depth -= 1
            if outer:
                with self._lock:
                    for sock in self._live:
                        sock.close()
                    self._live.clear()
                    self._expired = False
        response._content = body
        response._content_consumed = True  # type: ignore[attr-defined]
        return response

    def _read(self, response: requests.Response, what: str) -> bytes:
        limit = self.transport.max_answer
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > limit:
            response.close()
            raise self.transport.refuse(f"the BMC's answer to {_clip(what)} is {declared} bytes, over the "
                                        f"{limit} bytes fleetspec reads of one answer: refused")
        parts: list[bytes] = []
        size = 0
        try:
            for chunk in response.iter_content(CHUNK):
                size += len(chunk)
                if size > limit:
                    raise self.transport.refuse(f"the BMC's answer to {_clip(what)} is over the {limit} bytes "
                                                "fleetspec reads of one answer: refused")
                parts.append(chunk)
        finally:
            response.close()
        return b"".join(parts)


def _tls_problem(t: Transport, exc: Exception) -> str:
    """What failed in the TLS handshake and what the spec may set, with the certificate's
    fingerprint (read without trusting it) so the site can compare it with the BMC's own."""
    reason = str(exc)
    for marker in ("Fingerprint", "certificate verify failed", "doesn't match", "hostname", "SSL"):
        at = reason.find(marker)
        if at >= 0:
            reason = reason[at:].rstrip("')\"")
            break
    seen = ""
    try:
        with socket.create_connection((t.home[1], t.home[2]), timeout=5) as raw:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            with ctx.wrap_socket(raw, server_hostname=t.tls.server_name or t.home[1]) as tls:
                der = tls.getpeercert(binary_form=True)
        if der:
            seen = f"; the certificate it presents has SHA-256 fingerprint {colons(fingerprint(der))}"
    except (OSError, ValueError):
        pass
    pin = "or pin it with bmc.fingerprint after checking that value on the BMC's console"
    if t.tls.fingerprints:
        hint = "bmc.fingerprint pins other certificates: compare with the BMC's own (its console or web UI)"
    elif "mismatch" in reason or "match" in reason:
        hint = (f"It is not issued for {t.home[1]}: set bmc.server_name to the name it carries (a vendor default "
                f"such as CN=AMI reached by address), {pin}")
    else:
        hint = (f"Set bmc.ca_file to the CA (or the certificate itself) that signed it, with bmc.server_name where "
                f"it names another host, {pin}")
    return f"TLS: the BMC's certificate was refused ({_clip(reason, 160)}){seen}. {hint}. Verification is never off"


class _Adapter(HTTPAdapter):
    """Pools whose connections report their sockets to the session's watchdog, and TLS as
    the `Tls` says, whatever ``verify`` a caller passes."""

    def __init__(self, owner: BmcHttp) -> None:
        self.owner = owner
        super().__init__(max_retries=0)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        owner = self.owner
        plain = type("TrackedHTTP", (HTTPConnection,), {"_owner": owner, "_new_conn": _tracked_new_conn})
        secure = type("TrackedHTTPS", (HTTPSConnection,), {"_owner": owner, "_new_conn": _tracked_new_conn,
                                                             "connect": _pinned_connect})
        self.poolmanager.pool_classes_by_scheme = {
            "http": type("TrackedHTTPPool", (HTTPConnectionPool,), {"ConnectionCls": plain}),
            "https": type("TrackedHTTPSPool", (HTTPSConnectionPool,), {"ConnectionCls": secure})}

    def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
        """Nothing: requests would set the pool's trust from ``verify`` here, over the `Tls`."""

    def build_connection_pool_key_attributes(self, request: requests.PreparedRequest, verify: Any,
                                             cert: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        host_params, _ = super().build_connection_pool_key_attributes(request, True, None)
        t = self.owner.transport
        if host_params.get("scheme") != "https" or t._context is None:
            return host_params, {}
        return host_params, t.tls.pool_kwargs(t._context)


def _tracked_new_conn(self: Any) -> socket.socket:
    sock = HTTPConnection._new_conn(self)
    self._owner.track(sock)
    return sock


def _pinned_connect(self: Any) -> None:
    HTTPSConnection.connect(self)
    pins = self._owner.transport.tls.fingerprints
    if not pins:
        return
    der = self.sock.getpeercert(binary_form=True) or b""
    got = fingerprint(der)
    if got not in pins:
        self.sock.close()
        t = self._owner.transport
        t.refuse(f"TLS: the BMC presented a certificate with SHA-256 fingerprint {colons(got)}; bmc.fingerprint pins "
                 f"{', '.join(colons(p) for p in pins)}: refused before anything was sent. If the BMC's certificate "
                 "was replaced, compare the new one with the BMC's console and pin it")
        raise ssl.SSLCertVerificationError("certificate fingerprint not pinned")
    self.is_verified = True  # by its pin (urllib3 counts only a CA chain, and would warn)

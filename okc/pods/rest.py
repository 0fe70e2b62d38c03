"""One HTTP call to Runpod's REST API under one total deadline. Standard library only.

Both sides use it: okc.pods.runpod on the laptop and the idle-stop watchdog on the pod
(which runs from the synced copy of okc with the standard library alone).

Why not urllib's ``timeout``: it bounds each socket read, so a server trickling one byte
every few seconds keeps a call alive for ever. Here the whole call (name lookup, connect,
TLS, request, headers, body) runs in a worker thread that the caller waits for at most
``deadline_s``; at the deadline its socket is shut, so the worker ends too. http.client
never follows a redirect, so the key in the Authorization header can never be forwarded
to another host, and an answer is read up to ``MAX_ANSWER_BYTES`` only.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import socket
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

DEFAULT_API_URL = "https://api.runpod.io/v2"
API_URL_ENV = "OKC_RUNPOD_API_URL"  # another base URL (a proxy; the tests' fake API)
MAX_ANSWER_BYTES = 4 << 20  # a pod list of hundreds of pods is well under this
READ_CHUNK = 65536


class CallFailed(Exception):
    """No complete answer: unreachable, refused connection, deadline passed, answer too large."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: dict = field(default_factory=dict)  # names in lower case

    def json(self):
        """The body as JSON; None when empty; ValueError when it is not JSON."""
        return json.loads(self.body) if self.body.strip() else None


def call(method: str, url: str, key: str, body: dict | None = None, deadline_s: float = 20.0) -> Answer:
    """``method url`` with the key as a Bearer token; every HTTP status is an Answer."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CallFailed(f"not an http(s) URL: {url!r}")
    try:
        conn, target = _connection(parts, deadline_s)
    except ValueError as exc:  # a port that is not a number
        raise CallFailed(str(exc)) from None
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, application/problem+json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    outcome: dict = {}

    def work() -> None:
        try:
            conn.request(method, target, body=data, headers=headers)
            response = conn.getresponse()
            chunks, size = [], 0
            while chunk := response.read1(READ_CHUNK):
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise CallFailed(f"the answer is larger than {MAX_ANSWER_BYTES >> 20} MiB")
                chunks.append(chunk)
            outcome["answer"] = Answer(response.status, b"".join(chunks),
                                       {k.lower(): v for k, v in response.getheaders()})
        except CallFailed as exc:
            outcome["error"] = str(exc)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            outcome["error"] = str(getattr(exc, "reason", None) or exc) or type(exc).__name__

    worker = threading.Thread(target=work, daemon=True, name="okc-rest-call")
    worker.start()
    worker.join(deadline_s)
    if worker.is_alive():
        _cut(conn)
        raise CallFailed(f"no complete answer within {deadline_s:g} s")
    conn.close()
    if "answer" not in outcome:
        raise CallFailed(outcome.get("error", "no answer"))
    return outcome["answer"]


def _connection(parts: urllib.parse.SplitResult, deadline_s: float) -> tuple:
    """The connection, and the request target, honouring $https_proxy/$http_proxy and $no_proxy
    as urllib did (HTTPS through a CONNECT tunnel, so the proxy never sees the key)."""
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.netloc):
        return kind(parts.hostname, parts.port, timeout=deadline_s), path
    via = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if parts.scheme == "https":
        conn = kind(via.hostname, via.port or 8080, timeout=deadline_s)
        conn.set_tunnel(parts.hostname, parts.port or 443)
        return conn, path
    return http.client.HTTPConnection(via.hostname, via.port or 8080, timeout=deadline_s), parts.geturl()


def _cut(conn: http.client.HTTPConnection) -> None:
    """Shut the worker's socket so its blocked read returns (socket.socket's own shutdown:
    an SSLSocket's would also drop its TLS state under the reading thread)."""
    sock = conn.sock
    if sock is not None:
        try:
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:
            pass


def retry_after_s(answer: Answer, now: float | None = None) -> float | None:
    """The ``Retry-After`` of a 429/503: seconds, or an HTTP date; None when absent or unreadable."""
    value = (answer.headers.get("retry-after") or "").strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def problem(answer: Answer) -> str:
    """An error answer's own words on one line: RFC 9457 ``detail`` (and ``errors``), else the body."""
    try:
        parsed = answer.json()
    except ValueError:
        parsed = answer.body[:400].decode("utf-8", "replace")
    if isinstance(parsed, dict):
        words = [str(parsed.get("detail") or parsed.get("title") or parsed.get("message") or parsed.get("error") or "")]
        if isinstance(parsed.get("errors"), list):
            words += [str(e) for e in parsed["errors"][:5]]
        text = "; ".join(w for w in words if w)
    else:
        text = str(parsed or "")
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text[:300]

"""A fake of Runpod's REST API v2 on 127.0.0.1, whose pods' SSH is the tests' real sshd.

A real HTTP server (http.server in a thread) that implements the endpoints okc calls, in
the shapes of Runpod's v2 reference (docs.runpod.io/api-reference-v2, its openapi.json):
``GET /v2/pods`` answers ``{"pods": [...]}``; a pod has ``status`` (PROVISIONING, STARTING,
RUNNING, EXITED, ERROR, TERMINATED), ``actions``, ``cost`` ($/h, 0 when stopped),
``ssh.direct`` {host, port} (null unless 22/tcp is in ``ports`` and the pod runs),
``startedAt``, ``mounts``; ``POST /v2/pods/{id}/action`` {"action": ...} answers the pod,
or 409 for an action its status does not allow; create takes the nested body (``name``,
``image``, ``gpu: {id, count}``, ``mounts``) and rejects unknown fields with 422; errors are
RFC 9457 problems (application/problem+json: title, status, detail); a 429 carries
Retry-After. It checks the Bearer key like Runpod does. Starting a pod opens a TCP relay
on a new port to the real sshd, so each start maps port 22 to a different public port, as
Runpod's does; stopping it closes the relay and every connection through it, as a stopped
pod would. Hostile modes: every answer trickled a byte at a time, rate limits, a fixed
status for every call, a conflict on every action, a key revoked or hung up on after a while.
Nothing leaves this machine.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RELAY_CHUNK = 65536


class Relay:
    """127.0.0.1:<new port> -> 127.0.0.1:<sshd port>, until closed."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            self.sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(RELAY_CHUNK):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        for sock in self.sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


CREATE_FIELDS = {"args", "disk", "env", "image", "ports", "registry", "name", "cloud", "cpu", "dataCenterIds",
                 "globalNetworking", "gpu", "mounts", "startJupyter", "startSsh", "templateId"}  # CreatePodRequest
ACTIONS = {"RUNNING": ["stop", "restart", "terminate"], "EXITED": ["start", "terminate"], "ERROR": ["start", "terminate"],
           "PROVISIONING": ["stop", "terminate"], "STARTING": ["stop", "terminate"], "TERMINATED": []}
TITLES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 409: "Conflict",
          422: "Unprocessable Entity", 429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass
class FakePod:
    id: str
    name: str
    status: str = "EXITED"
    cost: float = 3.59  # what the account pays per hour while it runs
    gpu: str = "NVIDIA H200"
    gpu_count: int = 1
    image: str = "runpod/pytorch:test"
    started_at: str | None = None
    relay: Relay | None = None
    initializing: int = 0  # GETs that still show STARTING without an address after a start, as Runpod's do
    ports: list = field(default_factory=lambda: ["22/tcp"])
    public_ip: bool = True  # False: ssh.direct never appears (no public IP for 22/tcp)
    mounts: dict = field(default_factory=lambda: {"persistent": {"size": 50, "path": "/workspace"}})
    created_with: dict = field(default_factory=dict)

    def as_api(self, hide_address: bool) -> dict:
        status = "STARTING" if hide_address and self.status == "RUNNING" else self.status
        direct = None
        if status == "RUNNING" and self.relay is not None and "22/tcp" in self.ports and self.public_ip:
            direct = {"host": "127.0.0.1", "port": self.relay.port, "username": "root",
                      "command": f"ssh root@127.0.0.1 -p {self.relay.port}"}
        proxy = {"host": "ssh.runpod.io", "port": 22, "username": f"{self.id}-64411eb2", "command": f"ssh {self.id}-64411eb2@ssh.runpod.io"}
        return {
            "id": self.id, "name": self.name, "image": self.image, "args": "", "disk": 30, "ports": list(self.ports),
            "env": {}, "registry": None, "status": status, "actions": ACTIONS.get(status, []), "mounts": self.mounts,
            "gpu": {"id": self.gpu, "count": self.gpu_count}, "cloud": "SECURE", "dataCenterId": "US-KS-2",
            "cudaVersion": "12.8", "ssh": {"proxy": proxy if self.status != "TERMINATED" else None, "direct": direct},
            "template": None, "cost": self.cost if status in ("RUNNING", "STARTING", "PROVISIONING") else 0.0,
            "locked": False, "globalNetworking": {"enabled": False},
            "runtime": {"uptime": 1, "ports": []} if status == "RUNNING" else None,
            "createdAt": "2026-06-01T12:00:00Z", "startedAt": self.started_at,
        }


class FakeRunpod:
    def __init__(self, ssh_port: int, key: str):
        self.ssh_port = ssh_port
        self.key = key
        self.pods: dict[str, FakePod] = {}
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, authorization)
        self.bodies: list = []  # the JSON body of each request, in order
        self.fail_with: int | None = None  # answer every call with this HTTP status
        self.rate_limited = 0  # answer this many next calls 429 ...
        self.retry_after: str | None = "1"  # ... with this Retry-After (None: without one)
        self.trickle_s: float | None = None  # send every answer a byte at a time, this far apart
        self.conflict = False  # every action is refused with 409, as for a pod already changing state
        self.more_keys: set[str] = set()  # other keys it takes (a pod-scoped key beside the user's)
        self.revoked: set[str] = set()  # keys it refuses from now on (401)
        self.hang_up: set[str] = set()  # keys whose every call it closes without a word
        self.boot_reads = 1  # after a start action, this many GETs show STARTING without an address
        self.ports_seen: list[int] = []
        self._lock = threading.Lock()
        self._created = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        # A call the client gave up on mid-request (a deadline, a hang-up under load) ends its handler in an
        # OSError; socketserver would print that traceback to stderr, into the output of whatever okc
        # command a test is running in this process. Kept here instead.
        self.handler_errors: list[str] = []
        self.server.handle_error = lambda request, address: self.handler_errors.append(
            "".join(traceback.format_exception_only(*sys.exc_info()[:2])).strip())
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v2"

    def add_pod(self, pod_id: str, name: str = "okc-test", status: str = "EXITED", **extra) -> FakePod:
        pod = FakePod(pod_id, name, **extra)
        self.pods[pod_id] = pod
        if status == "RUNNING":
            self.start(pod)
        else:
            pod.status = status
        return pod

    def start(self, pod: FakePod, initializing: int = 0) -> None:
        if pod.relay is not None:
            return
        pod.relay = Relay(self.ssh_port)
        self.ports_seen.append(pod.relay.port)
        pod.status = "RUNNING"
        pod.initializing = initializing
        pod.started_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def halt(self, pod: FakePod, status: str) -> None:
        if pod.relay is not None:
            pod.relay.close()
            pod.relay = None
        pod.status = status

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        for pod in self.pods.values():
            if pod.relay is not None:
                pod.relay.close()

    def calls(self, method: str, suffix: str = "") -> list[tuple[str, str, str | None]]:
        return [r for r in self.requests if r[0] == method and r[1].endswith(suffix)]

    def actions(self, action: str) -> list[tuple[str, str, str | None]]:
        """The action calls asking for ``action``."""
        return [r for r, body in zip(self.requests, self.bodies)
                if r[0] == "POST" and r[1].endswith("/action") and isinstance(body, dict) and body.get("action") == action]

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _send(self, status: int, body=None, headers: dict | None = None) -> None:
                data = b"" if body is None else json.dumps(body).encode()
                kind = "application/problem+json" if status >= 400 else "application/json"
                head = [f"HTTP/1.1 {status} {TITLES.get(status, 'OK' if status < 300 else 'Status')}",
                        f"Content-Type: {kind}", f"Content-Length: {len(data)}", "Connection: close",
                        'RateLimit-Policy: "minute";q=60;w=60, "hour";q=3000;w=3600, "day";q=50000;w=86400',
                        'RateLimit: "minute";r=59;t=60, "hour";r=2999;t=3600, "day";r=49999;t=86400']
                head += [f"{name}: {value}" for name, value in (headers or {}).items()]
                raw = ("\r\n".join(head) + "\r\n\r\n").encode() + data
                self.close_connection = True
                try:
                    if fake.trickle_s is None:
                        self.wfile.write(raw)
                        return
                    for index in range(len(raw)):
                        self.wfile.write(raw[index:index + 1])
                        self.wfile.flush()
                        time.sleep(fake.trickle_s)
                except OSError:
                    pass  # the client gave up (a deadline), as it should

            def _problem(self, status: int, detail: str, headers: dict | None = None, errors: list | None = None) -> None:
                body = {"title": TITLES.get(status, "Error"), "status": status, "detail": detail}
                if errors:
                    body["errors"] = errors
                self._send(status, body, headers)

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                auth = self.headers.get("Authorization")
                fake.requests.append((method, self.path, auth))
                fake.bodies.append(body)
                if fake.fail_with is not None:
                    return self._problem(fake.fail_with, "service unavailable" if fake.fail_with >= 500 else "access denied"
                                         if fake.fail_with == 403 else "resource not found")
                key = (auth or "").removeprefix("Bearer ")
                if key in fake.hang_up:
                    self.close_connection = True
                    return
                if key not in {fake.key, *fake.more_keys} or key in fake.revoked:
                    return self._problem(401, "invalid bearer token")
                if fake.rate_limited > 0:
                    fake.rate_limited -= 1
                    headers = {"Retry-After": fake.retry_after} if fake.retry_after is not None else {}
                    return self._problem(429, "rate limit exceeded for the minute window", headers)
                parts = self.path.split("?")[0].strip("/").split("/")
                if parts[0] != "v2" or len(parts) < 2 or parts[1] != "pods":
                    return self._problem(404, "no such endpoint")
                with fake._lock:
                    return self._route(method, parts[2:], body)

            def _route(self, method: str, rest: list[str], body) -> None:
                if not rest:
                    if method == "GET":
                        return self._send(200, {"pods": [p.as_api(False) for p in fake.pods.values()
                                                         if p.status != "TERMINATED"]})
                    if method == "POST":
                        return self._create(body)
                if rest[:1] == ["redirect"]:  # a redirect elsewhere: a client must not follow it with the key
                    return self._send(302, {}, {"Location": f"{fake.url}/pods/leak"})
                pod = fake.pods.get(rest[0])
                if pod is None or pod.status == "TERMINATED":
                    return self._problem(404, "pod not found")
                action = rest[1] if len(rest) > 1 else None
                if method == "GET" and action is None:
                    hide = pod.initializing > 0
                    pod.initializing = max(0, pod.initializing - 1)
                    return self._send(200, pod.as_api(hide))
                if method == "DELETE" and action is None:
                    fake.halt(pod, "TERMINATED")
                    return self._send(204)
                if method == "POST" and action == "action":
                    return self._action(pod, body)
                return self._problem(405, f"{method} is not allowed here")

            def _action(self, pod: FakePod, body) -> None:
                if not isinstance(body, dict) or set(body) != {"action"} or body["action"] not in ("start", "stop", "restart", "terminate"):
                    return self._problem(422, "Request validation failed.", errors=["$.action: must be start, stop, restart or terminate"])
                wanted = body["action"]
                if fake.conflict or wanted not in ACTIONS.get(pod.as_api(False)["status"], []):
                    return self._problem(409, f"cannot {wanted} a pod that is {'STOPPING' if fake.conflict else pod.status}")
                if wanted == "start":
                    fake.start(pod, initializing=fake.boot_reads)
                elif wanted == "stop":
                    fake.halt(pod, "EXITED")
                elif wanted == "terminate":
                    fake.halt(pod, "TERMINATED")
                    return self._send(204)
                return self._send(200, pod.as_api(False))

            def _create(self, body) -> None:
                if not isinstance(body, dict):
                    return self._problem(422, "Request validation failed.", errors=["$: must be an object"])
                unknown = sorted(set(body) - CREATE_FIELDS)
                if unknown:
                    return self._problem(422, "Request validation failed.",
                                         errors=[f"$: additional properties '{name}' not allowed" for name in unknown])
                if not body.get("name") or not body.get("image"):
                    return self._problem(422, "Request validation failed.", errors=["$: name and image are required"])
                if ("gpu" in body) == ("cpu" in body) or not isinstance(body.get("gpu", {}), dict) or not body.get("gpu", {}).get("id"):
                    return self._problem(400, "exactly one of gpu or cpu must be set, and gpu needs an id")
                fake._created += 1
                gpu = body["gpu"]
                pod = fake.add_pod(f"created{fake._created}", name=body["name"], status="RUNNING", gpu=gpu["id"],
                                   gpu_count=gpu.get("count", 1), image=body["image"], ports=body.get("ports", []),
                                   mounts=body.get("mounts", {}), created_with=body)
                return self._send(201, pod.as_api(False))

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_DELETE(self) -> None:
                self._handle("DELETE")

        return Handler

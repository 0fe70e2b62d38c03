"""A fake of Runpod's REST API (v1) on 127.0.0.1, whose pods' SSH is the tests' real sshd.

A real HTTP server (http.server in a thread) that implements the endpoints okc calls,
checks the Bearer key like Runpod does, and keeps pods in the states RUNNING, EXITED and
TERMINATED. Starting a pod opens a TCP relay on a new port to the real sshd, so each
start maps port 22 to a different public port, as Runpod's does; stopping it closes the
relay and every connection through it, as a stopped pod would. Nothing leaves this machine.
"""

from __future__ import annotations

import json
import socket
import threading
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


@dataclass
class FakePod:
    id: str
    name: str
    status: str = "EXITED"
    cost_per_hr: float = 3.59
    gpu: str = "NVIDIA H200"
    gpu_count: int = 1
    image: str = "runpod/pytorch:test"
    last_started_at: str | None = None
    relay: Relay | None = None
    initializing: int = 0  # GETs that still show no address after a start, as Runpod's do
    created_with: dict = field(default_factory=dict)

    def as_api(self, hide_address: bool) -> dict:
        mapped = self.relay is not None and not hide_address
        return {
            "id": self.id, "name": self.name, "desiredStatus": self.status,
            "costPerHr": str(self.cost_per_hr),  # Runpod's own example sends a string
            "adjustedCostPerHr": self.cost_per_hr, "image": self.image,
            "gpu": {"id": self.gpu, "displayName": self.gpu, "count": self.gpu_count},
            "lastStartedAt": self.last_started_at, "publicIp": "127.0.0.1" if mapped else None,
            "portMappings": {"22": self.relay.port} if mapped else {}, "ports": ["22/tcp"],
            "volumeMountPath": "/workspace", "volumeInGb": 50, "containerDiskInGb": 30,
        }


class FakeRunpod:
    def __init__(self, ssh_port: int, key: str):
        self.ssh_port = ssh_port
        self.key = key
        self.pods: dict[str, FakePod] = {}
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, authorization)
        self.fail_with: int | None = None  # answer every call with this HTTP status
        self.ports_seen: list[int] = []
        self._lock = threading.Lock()
        self._created = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def add_pod(self, pod_id: str, name: str = "okc-test", status: str = "EXITED", **extra) -> FakePod:
        pod = FakePod(pod_id, name, **extra)
        self.pods[pod_id] = pod
        if status == "RUNNING":
            self.start(pod)
        return pod

    def start(self, pod: FakePod, initializing: int = 0) -> None:
        if pod.relay is not None:
            return
        pod.relay = Relay(self.ssh_port)
        self.ports_seen.append(pod.relay.port)
        pod.status = "RUNNING"
        pod.initializing = initializing
        pod.last_started_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")

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

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, status: int, body=None, headers: dict | None = None) -> None:
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                auth = self.headers.get("Authorization")
                fake.requests.append((method, self.path, auth))
                if fake.fail_with is not None:
                    return self._send(fake.fail_with, {"error": "service unavailable"})
                if auth != f"Bearer {fake.key}":
                    return self._send(401, {"error": "invalid api key"})
                parts = self.path.split("?")[0].strip("/").split("/")
                if parts[0] != "v1" or len(parts) < 2 or parts[1] != "pods":
                    return self._send(404, {"error": "no such endpoint"})
                with fake._lock:
                    return self._route(method, parts[2:], body)

            def _route(self, method: str, rest: list[str], body) -> None:
                if not rest:
                    if method == "GET":
                        return self._send(200, [p.as_api(False) for p in fake.pods.values()])
                    if method == "POST":
                        return self._create(body)
                if rest[:1] == ["redirect"]:  # a redirect elsewhere: a client must not follow it with the key
                    return self._send(302, {}, {"Location": f"{fake.url}/pods/leak"})
                pod = fake.pods.get(rest[0])
                if pod is None:
                    return self._send(404, {"error": "pod not found"})
                action = rest[1] if len(rest) > 1 else None
                if method == "GET" and action is None:
                    hide = pod.initializing > 0
                    pod.initializing = max(0, pod.initializing - 1)
                    return self._send(200, pod.as_api(hide))
                if method == "POST" and action == "start" and pod.status != "TERMINATED":
                    fake.start(pod, initializing=1)
                    return self._send(200, {})
                if method == "POST" and action == "stop" and pod.status == "RUNNING":
                    fake.halt(pod, "EXITED")
                    return self._send(200, {})
                if method == "DELETE" and action is None:
                    fake.halt(pod, "TERMINATED")
                    return self._send(204)
                return self._send(400, {"error": f"cannot {action or method} a pod that is {pod.status}"})

            def _create(self, body) -> None:
                if not isinstance(body, dict) or not body.get("imageName") or not body.get("gpuTypeIds"):
                    return self._send(400, {"error": "imageName and gpuTypeIds are required"})
                fake._created += 1
                pod = fake.add_pod(f"created{fake._created}", name=body.get("name", ""), status="RUNNING",
                                   gpu=body["gpuTypeIds"][0], image=body["imageName"], created_with=body)
                return self._send(201, pod.as_api(False))

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_DELETE(self) -> None:
                self._handle("DELETE")

        return Handler

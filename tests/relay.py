"""A ProxyCommand for the tests: relay stdin/stdout to HOST PORT (what `nc HOST PORT` does)."""

import socket
import sys
import threading

sock = socket.create_connection((sys.argv[1], int(sys.argv[2])))


def pump():
    while data := sock.recv(65536):
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


threading.Thread(target=pump, daemon=True).start()
while data := sys.stdin.buffer.read1(65536):
    sock.sendall(data)

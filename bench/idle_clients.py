#!/usr/bin/env python3
"""Idle WebSocket clients for embedded-server/tests/idle_bytes.rs (bench/idle-bytes.sh): opens
N connections to 127.0.0.1:PORT with a plain upgrade each (no extensions), prints "open N" once
every 101 is read, then holds them silently until a line (or EOF) on stdin, and closes them.
Raw sockets: nothing here buffers, pings or compresses. Usage: idle_clients.py PORT N"""
import base64, os, socket, sys

def main():
    port, n = int(sys.argv[1]), int(sys.argv[2])
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall(("GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                   "Sec-WebSocket-Version: 13\r\n\r\n" % (port, key)).encode())
        socks.append(s)
        # Read answers in batches so the server's accept queue never overflows.
        if len(socks) % 500 == 0 or i == n - 1:
            for t in socks[len(socks) - (len(socks) % 500 or 500):]:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = t.recv(4096)
                    if not chunk:
                        sys.exit("connection closed during the upgrade")
                    head += chunk
                if not head.startswith(b"HTTP/1.1 101"):
                    sys.exit("upgrade refused: %r" % head[:80])
    print("open %d" % n, flush=True)
    sys.stdin.readline()
    for s in socks:
        s.close()

main()

#!/usr/bin/env python3
"""Hold N loopback TCP connections open (both ends in this process: 2N sockets), for
bench/watch-cost.sh: `watch_sockets.py N SRC_ADDR PORT`. Prints "ready N" once every connection
is up, then sleeps until killed (or for --hold seconds at most)."""
import os, selectors, socket, sys, time

n, src, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
hold = float(sys.argv[4]) if len(sys.argv) > 4 else 1800.0
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", port))
ls.listen(4096)
ls.setblocking(False)
clients, served = [], []
deadline = time.monotonic() + 120
while len(served) < n and time.monotonic() < deadline:
    # Keep at most 512 handshakes in flight so the accept queue never overflows.
    while len(clients) < n and len(clients) - len(served) < 512:
        c = socket.socket()
        c.bind((src, 0))
        c.setblocking(False)
        try:
            c.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        clients.append(c)
    try:
        while True:
            s, _ = ls.accept()
            served.append(s)
    except BlockingIOError:
        time.sleep(0.001)
print(f"ready {len(served)}", flush=True)
end = time.monotonic() + hold
while time.monotonic() < end:
    time.sleep(1)

#!/usr/bin/env python3
"""Hostile clients against a running `wstune serve`, each beside a well-behaved probe.

Every attack is what one client machine can do on its own to make a server hold memory or
spend CPU; the probe is an ordinary client echoing a small message every 20 ms on its own
connection. While the attack runs, the server's RSS is sampled from /proc (the server must be
a single process on this host: `--processes 1`) and its /metrics scraped once a second.
Printed at the end, as one JSON object: RSS at the start and at its peak, the probe's echo
round-trip percentiles, how many scrapes answered, the close codes the attackers saw, and the
server's own counters after the attack.

    python3 bench/hostile.py amplify   --port P --admin A --pid PID [--conns 300] [--secs 30]
    python3 bench/hostile.py offload   ...   (compressed zero bombs to an offloading handler)
    python3 bench/hostile.py reassembly ...  (three 4 MiB fragments of a message, then a pause)
    python3 bench/hostile.py drip      ...   (a 4 MiB frame and the next frame's first bytes,
                                              then a byte now and then)
    python3 bench/hostile.py inflate-cpu ... (one client sending 100 KB that inflate to 16 MiB,
                                              as fast as the server takes them)

Compressed payloads come from Python's zlib (raw deflate, window 15, sync flush), so the
server's inflater meets bytes it did not make.
"""

import argparse
import base64
import json
import multiprocessing
import os
import random
import socket
import struct
import sys
import threading
import time
import urllib.request
import zlib

MIB = 1 << 20


def upgrade(port, deflate, rcvbuf=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    ext = "Sec-WebSocket-Extensions: permessage-deflate\r\n" if deflate else ""
    s.sendall(
        (
            f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            f"Sec-WebSocket-Version: 13\r\n{ext}\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            raise OSError("closed during the upgrade")
        head += chunk
    status = head.split(b"\r\n", 1)[0]
    if b" 101 " not in status:
        raise OSError(f"upgrade refused: {status!r}")
    if deflate and b"permessage-deflate" not in head.lower():
        raise OSError("permessage-deflate was not agreed")
    s.settimeout(None)
    return s, head.split(b"\r\n\r\n", 1)[1]


def frame(opcode, payload, fin=True, rsv1=False):
    b0 = (0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", b0, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", b0, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", b0, 0x80 | 127, n)
    mask = os.urandom(4)
    # The mask is applied with one big-integer XOR: fast enough for 16 MiB in Python.
    reps = (n + 3) // 4
    m = int.from_bytes((mask * reps)[:n], "big") if n else 0
    p = int.from_bytes(payload, "big") if n else 0
    body = (p ^ m).to_bytes(n, "big") if n else b""
    return head + mask + body


def deflate(data):
    c = zlib.compressobj(9, zlib.DEFLATED, -15, 9)
    z = c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
    assert z.endswith(b"\x00\x00\xff\xff")
    return z[:-4]


class Reader:
    """Reads frames from a socket on a thread: answers pings, records the close code."""

    def __init__(self, sock, buf=b"", answer_pings=True, keep=False):
        self.s, self.buf, self.answer, self.keep = sock, bytearray(buf), answer_pings, keep
        self.close_code, self.eof, self.messages = None, False, []
        self.lock = threading.Lock()
        threading.Thread(target=self.run, daemon=True).start()

    def need(self, n):
        while len(self.buf) < n:
            chunk = self.s.recv(1 << 16)
            if not chunk:
                raise EOFError
            self.buf += chunk

    def run(self):
        try:
            while True:
                self.need(2)
                b0, b1 = self.buf[0], self.buf[1]
                n, off = b1 & 0x7F, 2
                if n == 126:
                    self.need(4)
                    n, off = struct.unpack("!H", self.buf[2:4])[0], 4
                elif n == 127:
                    self.need(10)
                    n, off = struct.unpack("!Q", self.buf[2:10])[0], 10
                self.need(off + n)
                payload = bytes(self.buf[off : off + n])
                del self.buf[: off + n]
                op = b0 & 0x0F
                if op == 9 and self.answer:
                    with self.lock:
                        self.s.sendall(frame(10, payload))
                elif op == 8:
                    self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                elif self.keep:
                    self.messages.append((time.monotonic(), payload))
        except (OSError, EOFError):
            self.eof = True

    def send(self, data):
        with self.lock:
            self.s.sendall(data)


class Probe:
    """A well-behaved client: a 64-byte text message every 20 ms, its echo timed. It runs in
    its own process, so the attack's threads (hundreds, under one GIL) do not delay its
    reads: what it measures is the server."""

    def __init__(self, port):
        self.q, self.halt = multiprocessing.Queue(), multiprocessing.Event()
        self.p = multiprocessing.Process(target=_probe, args=(port, self.halt, self.q), daemon=True)
        self.p.start()

    def summary(self):
        self.halt.set()
        try:
            rtts, errors = self.q.get(timeout=10)
        except Exception:
            rtts, errors = [], 1
        self.p.join(5)
        r = sorted(rtts)
        pct = lambda q: round(r[min(len(r) - 1, int(q * len(r)))], 2) if r else None
        return {"echoes": len(r), "errors": errors, "p50_ms": pct(0.5), "p99_ms": pct(0.99), "max_ms": round(r[-1], 2) if r else None}


def _probe(port, halt, q):
    rtts, errors = [], 0
    try:
        s, rest = upgrade(port, False)
        s.settimeout(5)
        buf = rest
        while not halt.is_set():
            msg = os.urandom(32).hex().encode()
            t0 = time.monotonic()
            s.sendall(frame(1, msg))
            while True:
                while len(buf) < 2:
                    buf += s.recv(65536)
                n = buf[1] & 0x7F
                while len(buf) < 2 + n:
                    buf += s.recv(65536)
                op, payload, buf = buf[0] & 0x0F, buf[2 : 2 + n], buf[2 + n :]
                if op == 9:
                    s.sendall(frame(10, payload))
                    continue
                break
            if payload == msg:
                rtts.append((time.monotonic() - t0) * 1000)
            else:
                errors += 1
            time.sleep(0.02)
    except (OSError, socket.timeout):
        errors += 1
    q.put((rtts, errors))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_secs(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape(admin):
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=2) as r:
        out = {}
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                name, _, v = line.rpartition(" ")
                out[name] = float(v)
        return out


class Watch:
    """Samples RSS every 100 ms and scrapes /metrics every second, on a thread."""

    def __init__(self, pid, admin):
        self.pid, self.admin = pid, admin
        self.rss0, self.peak, self.scrapes, self.scrape_fail, self.stop = rss_kib(pid), 0, 0, 0, False
        self.cpu0, self.t0 = cpu_secs(pid), time.monotonic()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        last = 0
        while not self.stop:
            self.peak = max(self.peak, rss_kib(self.pid))
            if time.monotonic() - last >= 1:
                last = time.monotonic()
                try:
                    scrape(self.admin)
                    self.scrapes += 1
                except OSError:
                    self.scrape_fail += 1
            time.sleep(0.1)

    def summary(self):
        self.stop = True
        self.t.join(3)
        wall = time.monotonic() - self.t0
        return {
            "rss_start_mib": round(self.rss0 / 1024, 1),
            "rss_peak_mib": round(self.peak / 1024, 1),
            "rss_end_mib": round(rss_kib(self.pid) / 1024, 1),
            "server_cpu_pct": round(100 * (cpu_secs(self.pid) - self.cpu0) / wall, 1),
            "scrapes_ok": self.scrapes,
            "scrapes_failed": self.scrape_fail,
        }


def amplify(a, readers):
    """Deflate amplification: each connection sends one ~100 KB message that inflates to
    16 MiB (random bytes repeating every 3,000), never reads, and sends an unsolicited pong
    every few seconds (which used to count as life and keep the heartbeat from tripping)."""
    block = random.Random(1).randbytes(3000)
    data = (block * (a.size // 3000 + 1))[: a.size]
    wire = frame(2, deflate(data), rsv1=True)
    socks = []
    for _ in range(a.conns):
        s, rest = upgrade(a.port, True, rcvbuf=4096)
        socks.append(s)
    for s in socks:
        threading.Thread(target=lambda s=s: _send_quiet(s, wire), daemon=True).start()
    end = time.monotonic() + a.secs
    while time.monotonic() < end:
        time.sleep(min(a.pong_every, max(0, end - time.monotonic())))
        for s in socks:
            _send_quiet(s, frame(10, b"alive"))
    # Now read what is left, to see the close each was sent (if the server sent one).
    for s in socks:
        readers.append(Reader(s, answer_pings=False))
    return {"compressed_bytes": len(wire)}


def _send_quiet(s, data):
    try:
        s.sendall(data)
    except OSError:
        pass


def offload(a, readers):
    """Compressed zero bombs to an offloading handler: 16 KB that each inflate to 16 MiB."""
    s, rest = upgrade(a.port, True)
    r = Reader(s, rest)
    readers.append(r)
    bomb = frame(2, deflate(bytes(a.size)), rsv1=True)
    end = time.monotonic() + a.secs
    sent = 0
    while time.monotonic() < end and not r.eof and sent < a.count:
        try:
            r.send(bomb)
            sent += 1
        except OSError:
            break
    while time.monotonic() < end and not r.eof:
        time.sleep(0.2)
    return {"bombs_sent": sent, "bomb_bytes": len(bomb)}


def reassembly(a, readers):
    """Three 4 MiB fragments of a message on each connection, then a pause (pings answered)."""
    frag = frame(2, bytes(4 * MIB), fin=False)
    cont = bytearray(frame(0, bytes(4 * MIB), fin=False))
    cont[0] = 0x00  # continuation, not final
    for _ in range(a.conns):
        s, rest = upgrade(a.port, False)
        r = Reader(s, rest)
        readers.append(r)
        try:
            r.send(frag + bytes(cont) + bytes(cont))
        except OSError:
            pass
    time.sleep(a.secs)
    return {}


def drip(a, readers):
    """A whole 4 MiB frame and, in the same write, the first bytes of the next; then one more
    byte of it every few seconds (pings answered)."""
    whole = frame(2, bytes(4 * MIB))
    nxt = frame(2, bytes(4 * MIB))
    for _ in range(a.conns):
        s, rest = upgrade(a.port, False)
        r = Reader(s, rest)
        readers.append(r)
        try:
            r.send(whole + nxt[:20])
        except OSError:
            pass
    end, i = time.monotonic() + a.secs, 20
    while time.monotonic() < end:
        time.sleep(a.pong_every)
        for r in readers:
            if not r.eof:
                try:
                    r.send(nxt[i : i + 1])
                except OSError:
                    pass
        i += 1
    return {}


def inflate_cpu(a, readers):
    """One client sending ~100 KB messages that inflate to 16 MiB as fast as it can write
    them, reading (and dropping) its echoes."""
    block = random.Random(2).randbytes(3000)
    data = (block * (a.size // 3000 + 1))[: a.size]
    wire = frame(2, deflate(data), rsv1=True)
    s, rest = upgrade(a.port, True)
    r = Reader(s, rest)
    readers.append(r)
    end, sent = time.monotonic() + a.secs, 0
    while time.monotonic() < end and not r.eof:
        try:
            r.send(wire)
            sent += 1
        except OSError:
            break
    return {"messages_sent": sent, "compressed_bytes": len(wire)}


ATTACKS = {"amplify": amplify, "offload": offload, "reassembly": reassembly, "drip": drip, "inflate-cpu": inflate_cpu}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("attack", choices=sorted(ATTACKS))
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--admin", type=int, required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--conns", type=int, default=300)
    p.add_argument("--secs", type=float, default=30)
    p.add_argument("--size", type=int, default=16 * MIB, help="plaintext bytes per message")
    p.add_argument("--count", type=int, default=350, help="bombs (offload)")
    p.add_argument("--pong-every", type=float, default=15, help="seconds between pongs/drips")
    p.add_argument("--settle", type=float, default=3, help="seconds to wait after the attack")
    a = p.parse_args()
    # The probe's process first: forked before this one starts any thread.
    probe = Probe(a.port)
    watch = Watch(a.pid, a.admin)
    time.sleep(0.5)
    readers = []
    extra = ATTACKS[a.attack](a, readers)
    time.sleep(a.settle)
    out = {"attack": a.attack, **extra, **watch.summary(), "probe": probe.summary()}
    codes = {}
    for r in readers:
        k = str(r.close_code) if r.close_code else ("eof" if r.eof else "open")
        codes[k] = codes.get(k, 0) + 1
    out["attacker_closes"] = codes
    try:
        m = scrape(a.admin)
        out["metrics"] = {k: v for k, v in m.items() if any(w in k for w in ("budget", "timeouts", "ratio", "rate_pauses", "skipped", "closes_sent", "backpressure", "send_queue", "offload_queue"))}
    except OSError as e:
        out["metrics_error"] = str(e)
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()

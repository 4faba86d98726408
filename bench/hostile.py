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
    python3 bench/hostile.py burst     ...   (one publisher pipelining --count messages of
                                              --size bytes to --subs readers that keep up and
                                              --stopped ones that never read, --runs times;
                                              --app broadcast|channels as the server runs)

`amplify --good N` runs N well-behaved clients beside the attack: each sends a 256 KiB message
every 200 ms and reads its echo whole; what each got and how it was closed is reported.

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
    every few seconds (which used to count as life and keep the heartbeat from tripping).
    With --good N, N well-behaved clients run beside it (see `_good`); with --fill, smaller
    messages follow until the budget is nearly exactly full."""
    good, good_q = None, None
    if a.good:
        # Started (forked) before this process starts the attackers' threads, and before the
        # attack, so they are there when the budget fills.
        good_q = multiprocessing.Queue()
        good = multiprocessing.Process(target=_good, args=(a.port, a.good, a.secs, a.good_size, good_q), daemon=True)
        good.start()
        time.sleep(0.5)
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
    if a.fill:
        # Then plain messages, one at a time, each a third of what the budget has left (an
        # echo briefly holds the message read and its copy in the queue): the budget ends a
        # few hundred KiB short of its limit, as a long attack leaves it.
        time.sleep(1)
        for _ in range(20):
            m = scrape(a.admin)
            left = m["ws_memory_budget_bytes"] - m["ws_memory_budget_used_bytes"]
            if left < 400 << 10:
                break
            s, _ = upgrade(a.port, False, rcvbuf=4096)
            socks.append(s)
            _send_quiet(s, frame(2, bytes(int(min(a.size, left // 3)))))
            time.sleep(0.3)
    while time.monotonic() < end:
        time.sleep(min(a.pong_every, max(0, end - time.monotonic())))
        for s in socks:
            _send_quiet(s, frame(10, b"alive"))
    # Now read what is left, to see the close each was sent (if the server sent one).
    for s in socks:
        readers.append(Reader(s, answer_pings=False))
    out = {"compressed_bytes": len(wire)}
    if good is not None:
        good.join(a.secs + 40)
        out["good"] = good_q.get(timeout=5)
    return out


def _good(port, n, secs, size, q):
    """N well-behaved clients, one thread each, with permessage-deflate: a `size` message of
    JSON-like text (it compresses about 4x, so the server inflates it) every 200 ms, its echo
    read whole and inflated."""
    words = [b"alpha", b"beta", b"gamma", b"delta", b"omega", b"sigma", b"kappa", b"theta"]
    out = [None] * n

    def one(i):
        r = {"echoes": 0, "wrong": 0, "close": None, "error": None}
        rng = random.Random(i)
        text = b" ".join(rng.choice(words) + b"%d" % rng.randrange(100) for _ in range(size // 7))[:size]
        try:
            s, buf = upgrade(port, True)
            s.settimeout(10)
            buf, inflater = bytearray(buf), zlib.decompressobj(-15)
            end, seq = time.monotonic() + secs, 0
            while time.monotonic() < end and r["close"] is None:
                seq += 1
                msg = b"%08d" % seq + text[8:]
                s.sendall(zero_masked(1, deflate(msg), rsv1=True))
                op, payload, buf = read_message(s, buf, inflater)
                if op == 8:
                    r["close"] = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                elif payload == msg:
                    r["echoes"] += 1
                else:
                    r["wrong"] += 1
                time.sleep(0.2)
        except (OSError, EOFError) as e:
            r["error"] = repr(e)
        out[i] = r

    ts = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(secs + 30)
    q.put(out)


def zero_masked(opcode, payload, rsv1=False):
    """A final client frame with an all-zero mask key (legal, and no masking to compute)."""
    n = len(payload)
    b0 = 0x80 | (0x40 if rsv1 else 0) | opcode
    if n < 126:
        head = struct.pack("!BB", b0, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", b0, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", b0, 0x80 | 127, n)
    return head + b"\0\0\0\0" + payload


def read_message(s, buf, inflater=None):
    """One server message from `s` (bytes already read in `buf`), its fragments joined (and
    inflated with `inflater` when compressed), pings answered on the way: (opcode, payload,
    the rest of `buf`); a close is returned as one."""
    op, parts, compressed = None, [], False
    while True:
        fin, fop, payload, buf = _read_frame(s, buf)
        if fop == 9:
            s.sendall(zero_masked(10, payload))
            continue
        if fop & 0x0F >= 8:
            return fop & 0x0F, payload, buf
        if fop != 0:
            op, compressed = fop & 0x0F, bool(fop & 0x40)
        parts.append(payload)
        if fin:
            whole = b"".join(parts)
            if compressed and inflater is not None:
                whole = inflater.decompress(whole + b"\x00\x00\xff\xff")
            return op, whole, buf


def _read_frame(s, buf):
    while True:
        if len(buf) >= 2:
            n, off = buf[1] & 0x7F, 2
            if n == 126 and len(buf) >= 4:
                n, off = struct.unpack("!H", buf[2:4])[0], 4
            elif n == 127 and len(buf) >= 10:
                n, off = struct.unpack("!Q", buf[2:10])[0], 10
            if (n < 126 or off > 2) and len(buf) >= off + n:
                # The opcode with RSV1 (0x40) kept: control frames are 8 and up either way.
                return bool(buf[0] & 0x80), buf[0] & 0x4F, bytes(buf[off : off + n]), buf[off + n :]
        chunk = s.recv(1 << 20)
        if not chunk:
            raise EOFError
        buf += chunk


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


def _subscriber(port, app, count, deadline, chunk_size, hiccup, rcvbuf, ready, q):
    """A reader that keeps up: reads `chunk_size` bytes at a time, as fast as they arrive, as a
    client library does, takes each message's payload out (a copy) and checks the messages
    come in order (their index first); stops after `count`, a close or the deadline.
    `hiccup` (every N messages, M ms): the pause a client's garbage collector or scheduler
    makes now and then, after which it reads at full speed again."""
    every, pause = hiccup
    # With a small receive buffer (`rcvbuf`, 0: the system's) the kernel holds little of a
    # burst while the reader pauses, so the server's send queue does.
    r = {"got": 0, "in_order": True, "close": None, "eof": False}
    try:
        s, buf = upgrade(port, False, rcvbuf=rcvbuf or None)
        s.settimeout(deadline)
        buf = bytearray(buf)
        if app == "channels":
            s.sendall(zero_masked(1, b'{"op":"subscribe","channel":"burst"}'))
            op, payload, buf = read_message(s, buf)
            assert b"subscribed" in payload, payload
        ready.put(1)
        pos = 0
        while r["got"] < count and r["close"] is None:
            # Every whole frame in the buffer, then one more read.
            while len(buf) - pos >= 2:
                n, off = buf[pos + 1] & 0x7F, 2
                if n == 126:
                    if len(buf) - pos < 4:
                        break
                    n, off = struct.unpack_from("!H", buf, pos + 2)[0], 4
                elif n == 127:
                    if len(buf) - pos < 10:
                        break
                    n, off = struct.unpack_from("!Q", buf, pos + 2)[0], 10
                if len(buf) - pos < off + n:
                    break
                op, start = buf[pos] & 0x0F, pos + off
                pos = start + n
                if op == 8:
                    r["close"] = struct.unpack_from("!H", buf, start)[0] if n >= 2 else 1005
                    break
                if op == 9:
                    s.sendall(zero_masked(10, bytes(buf[start : start + n])))
                    continue
                if op != (1 if app == "channels" else 2):
                    continue
                payload = bytes(buf[start : start + n])
                if app == "channels":
                    at = payload.find(b'"data":"', 0, 200) + 8
                    idx = int(payload[at : payload.index(b":", at)])
                else:
                    idx = struct.unpack_from("!I", payload)[0]
                if idx != r["got"]:
                    r["in_order"] = False
                r["got"] += 1
                if every and r["got"] % every == 0:
                    time.sleep(pause / 1000)
            del buf[:pos]
            pos = 0
            if r["got"] >= count or r["close"] is not None:
                break
            chunk = s.recv(chunk_size)
            if not chunk:
                r["eof"] = True
                break
            buf += chunk
    except (OSError, EOFError, ValueError, AssertionError) as e:
        r["error"] = repr(e)
    q.put(r)


def _drain(s):
    """Read and drop everything until the socket ends (a publisher's own copies)."""
    try:
        while s.recv(1 << 20):
            pass
    except OSError:
        pass


def burst(a, readers):
    """One publisher pipelines --count messages of --size bytes, written in one go (broadcast:
    binary frames, its own copies read on a thread; channels: publishes to one channel).
    --subs readers keep up (each in its own process); --stopped ones subscribe and never read
    (a 4 KiB receive buffer). Repeated --runs times on fresh connections. Reported per run: what
    each reader got, whether in order, how it was closed, and how long after the last message
    was written the server had closed every stopped reader (ws_backpressure_closes_total)."""
    runs = []
    for run in range(a.runs):
        ready, q = multiprocessing.Queue(), multiprocessing.Queue()
        subs = [
            multiprocessing.Process(target=_subscriber, args=(a.port, a.app, a.count, 60, a.chunk, (a.hiccup_every, a.hiccup_ms), a.rcvbuf, ready, q), daemon=True)
            for _ in range(a.subs)
        ]
        for p in subs:
            p.start()
        for _ in subs:
            ready.get(timeout=20)
        stopped = []
        for _ in range(a.stopped):
            s, rest = upgrade(a.port, False, rcvbuf=4096)
            if a.app == "channels":
                s.sendall(zero_masked(1, b'{"op":"subscribe","channel":"burst"}'))
                _, payload, rest = read_message(s, bytearray(rest))
            stopped.append((s, rest))
        pub, _ = upgrade(a.port, False)
        if a.app == "broadcast":
            threading.Thread(target=_drain, args=(pub,), daemon=True).start()
        time.sleep(0.3)
        pad = a.size - 64
        if a.app == "channels":
            msgs = [zero_masked(1, b'{"op":"publish","channel":"burst","data":"%d:%s"}' % (i, b"z" * pad)) for i in range(a.count)]
        else:
            msgs = [zero_masked(2, struct.pack("!I", i) + bytes(pad)) for i in range(a.count)]
        closes0 = scrape(a.admin).get("ws_backpressure_closes_total", 0)
        pub.sendall(b"".join(msgs))
        sent_at = time.monotonic()
        closed_after = None
        if stopped:
            while time.monotonic() - sent_at < a.stopped_wait:
                if scrape(a.admin).get("ws_backpressure_closes_total", 0) - closes0 >= a.stopped:
                    closed_after = round(time.monotonic() - sent_at, 2)
                    break
                time.sleep(0.1)
        got = [q.get(timeout=90) for _ in subs]
        for p in subs:
            p.join(5)
        stopped_codes = []
        for s, rest in stopped:
            r = Reader(s, rest, answer_pings=False)
            deadline = time.monotonic() + 5
            while r.close_code is None and not r.eof and time.monotonic() < deadline:
                time.sleep(0.05)
            stopped_codes.append(r.close_code or ("eof" if r.eof else "open"))
            s.close()
        pub.close()
        runs.append({"readers": got, "stopped_closed_after_s": closed_after, "stopped_closes": stopped_codes})
        time.sleep(0.5)
    return {"runs": runs}


ATTACKS = {"amplify": amplify, "offload": offload, "reassembly": reassembly, "drip": drip, "inflate-cpu": inflate_cpu, "burst": burst}


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
    p.add_argument("--no-probe", action="store_true", help="no probe (burst: it would read the burst)")
    p.add_argument("--good", type=int, default=0, help="well-behaved clients beside the attack (amplify)")
    p.add_argument("--good-size", type=int, default=256 << 10, help="amplify: a good client's message")
    p.add_argument("--fill", action="store_true", help="amplify: smaller messages after, to fill the budget")
    p.add_argument("--app", default="broadcast", choices=["broadcast", "channels"], help="burst: the server's app")
    p.add_argument("--subs", type=int, default=1, help="burst: readers that keep up")
    p.add_argument("--stopped", type=int, default=0, help="burst: readers that never read")
    p.add_argument("--chunk", type=int, default=65536, help="burst: bytes a reader asks for per read")
    p.add_argument("--hiccup-every", type=int, default=0, help="burst: a reader pauses every N messages")
    p.add_argument("--hiccup-ms", type=float, default=20, help="burst: for this long")
    p.add_argument("--rcvbuf", type=int, default=0, help="burst: readers' SO_RCVBUF (0: the system's)")
    p.add_argument("--runs", type=int, default=1, help="burst: repetitions")
    p.add_argument("--stopped-wait", type=float, default=40, help="burst: seconds to wait for the stopped readers' close")
    a = p.parse_args()
    # The probe's process first: forked before this one starts any thread.
    probe = None if a.no_probe else Probe(a.port)
    watch = Watch(a.pid, a.admin)
    time.sleep(0.5)
    readers = []
    extra = ATTACKS[a.attack](a, readers)
    time.sleep(a.settle)
    out = {"attack": a.attack, **extra, **watch.summary(), "probe": probe.summary() if probe else None}
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

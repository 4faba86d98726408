#!/usr/bin/env python3
"""Clients for the network-fault tests (tests/heavy/faults.rs, tests/scripts/faults.sh), against a
`wstune serve --app channels`. Every mode is bounded by --secs and prints one JSON line.

hold      N connections subscribed to "all"; writes READY once all are open, then reads until
          --secs and counts how each connection ended (close code, or "reset"/"eof").
probe     one connection; every 50 ms publishes to its own channel and times the echo.
listen    N connections subscribed to "all"; times each broadcast from its send timestamp.
publish   publishes to "all" at --rate messages/s of --size bytes.
rst       an RST storm: --conc loops that connect, upgrade (or not), and reset (SO_LINGER 0).
connflood opens --n TCP connections as fast as possible and sends nothing (a backlog flood).
"""
import argparse
import asyncio
import json
import os
import socket
import struct
import time

from websockets.asyncio.client import connect

p = argparse.ArgumentParser()
p.add_argument("mode")
p.add_argument("--url", required=True)
p.add_argument("--n", type=int, default=1)
p.add_argument("--secs", type=float, default=10)
p.add_argument("--ready", default=None)
p.add_argument("--rate", type=float, default=10)
p.add_argument("--size", type=int, default=100)
p.add_argument("--conc", type=int, default=20)
a = p.parse_args()
deadline = time.monotonic() + a.secs
host, port = a.url.split("//")[1].rstrip("/").split(":")
port = int(port)


def done(d):
    print(json.dumps(d), flush=True)


async def sub(ws, ch):
    await ws.send(json.dumps({"op": "subscribe", "channel": ch}))


async def hold():
    ends = {}
    opened = 0

    async def one(i):
        nonlocal opened
        try:
            ws = await connect(a.url, compression=None, ping_interval=None, open_timeout=30,
                               close_timeout=2)
        except Exception as e:
            ends["connect_failed"] = ends.get("connect_failed", 0) + 1
            return None
        await sub(ws, "all")
        opened += 1
        return ws

    conns = []
    for start in range(0, a.n, 100):
        conns += await asyncio.gather(*(one(i) for i in range(start, min(a.n, start + 100))))
    if a.ready:
        open(a.ready, "w").write(str(opened))

    async def read(ws):
        try:
            async for _ in ws:
                pass
            code = ws.close_code
            key = str(code) if code is not None else "eof"
        except Exception as e:
            key = str(ws.close_code) if ws.close_code is not None else type(e).__name__
        ends[key] = ends.get(key, 0) + 1

    tasks = [asyncio.create_task(read(ws)) for ws in conns if ws is not None]
    await asyncio.wait(tasks, timeout=max(0, deadline - time.monotonic()))
    still = sum(1 for t in tasks if not t.done())
    for t in tasks:
        t.cancel()
    done({"opened": opened, "still_open": still, "ends": ends})


async def probe():
    ws = await connect(a.url, compression=None, ping_interval=None, open_timeout=30)
    me = f"probe-{os.getpid()}"
    await sub(ws, me)
    await ws.recv()  # subscribed
    rtts, fails = [], 0
    while time.monotonic() < deadline:
        t = time.monotonic()
        try:
            await ws.send(json.dumps({"op": "publish", "channel": me, "data": t}))
            while True:
                m = json.loads(await asyncio.wait_for(ws.recv(), 5))
                if m.get("channel") == me:
                    break
            rtts.append(time.monotonic() - t)
        except Exception:
            fails += 1
            break
        await asyncio.sleep(0.05)
    rtts.sort()
    done({"echoes": len(rtts), "fails": fails,
          "p50_ms": round(rtts[len(rtts) // 2] * 1000, 2) if rtts else None,
          "p99_ms": round(rtts[int(len(rtts) * 0.99)] * 1000, 2) if rtts else None,
          "max_ms": round(rtts[-1] * 1000, 2) if rtts else None})


async def listen():
    lat, ends = [], {}

    async def one():
        ws = await connect(a.url, compression=None, ping_interval=None, open_timeout=30,
                           max_size=None, max_queue=None)
        await sub(ws, "all")
        return ws

    conns = await asyncio.gather(*(one() for _ in range(a.n)))
    if a.ready:
        open(a.ready, "w").write(str(len(conns)))

    async def read(ws):
        try:
            async for msg in ws:
                m = json.loads(msg)
                if "data" in m:
                    lat.append(time.time() - m["data"]["at"])
            key = str(ws.close_code)
        except Exception as e:
            key = str(ws.close_code) if ws.close_code is not None else type(e).__name__
        ends[key] = ends.get(key, 0) + 1

    tasks = [asyncio.create_task(read(ws)) for ws in conns]
    await asyncio.wait(tasks, timeout=max(0, deadline - time.monotonic()))
    still = sum(1 for t in tasks if not t.done())
    lat.sort()
    done({"received": len(lat), "still_open": still, "ends": ends,
          "p50_ms": round(lat[len(lat) // 2] * 1000, 2) if lat else None,
          "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 2) if lat else None,
          "max_ms": round(lat[-1] * 1000, 2) if lat else None})


async def publish():
    ws = await connect(a.url, compression=None, ping_interval=None, open_timeout=30)
    sent = 0
    pad = "p" * a.size
    while time.monotonic() < deadline:
        await ws.send(json.dumps({"op": "publish", "channel": "all",
                                  "data": {"at": time.time(), "pad": pad}}))
        sent += 1
        await asyncio.sleep(1 / a.rate)
    await ws.close()
    done({"published": sent})


async def rst():
    counts = {"reset_after_upgrade": 0, "reset_mid_handshake": 0, "errors": 0}

    def reset(sock):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    async def loop(k):
        i = 0
        while time.monotonic() < deadline:
            i += 1
            try:
                if i % 2:
                    ws = await connect(a.url, compression=None, ping_interval=None,
                                       open_timeout=10)
                    reset(ws.transport.get_extra_info("socket"))
                    ws.transport.abort()
                    counts["reset_after_upgrade"] += 1
                else:
                    r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
                    w.write(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n")
                    await w.drain()
                    reset(w.get_extra_info("socket"))
                    w.transport.abort()
                    counts["reset_mid_handshake"] += 1
            except Exception:
                counts["errors"] += 1
                await asyncio.sleep(0.05)

    await asyncio.gather(*(loop(k) for k in range(a.conc)))
    done(counts)


def connflood():
    socks, failed = [], 0
    for _ in range(a.n):
        if time.monotonic() > deadline:
            break
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect((host, port))
        except BlockingIOError:
            pass
        except OSError:
            failed += 1
            s.close()
            continue
        socks.append(s)
    time.sleep(max(0, min(2, deadline - time.monotonic())))
    for s in socks:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    done({"attempted": len(socks), "failed": failed})


if a.mode == "connflood":
    connflood()
else:
    asyncio.run({"hold": hold, "probe": probe, "listen": listen, "publish": publish,
                 "rst": rst}[a.mode]())

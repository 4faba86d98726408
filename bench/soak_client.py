#!/usr/bin/env python3
"""One load process of bench/soak.sh: holds CONNS WebSocket connections to a `wstune serve
--app channels` server and churns them for SECS seconds, then closes them all and prints one
JSON line of counts.

Every connection subscribes to the channel "all" (broadcasts) and to its own channel (its echo:
a publish there comes back to it alone). Per second the process closes CHURN random connections
and opens a new one for each: a third with a close frame, a third with a TCP reset
(SO_LINGER 0), a third with a FIN and no close frame. Half the connections (by index) negotiate
permessage-deflate. The process with index 0 also publishes one broadcast per second.

While the file PAUSE exists, no churn or echo starts and the process writes QUIET once every
connection is either open and idle or gone: soak.sh then compares the server's `ws_connections`
gauge with the kernel's count of established sockets, which must be equal.

Bounded: every wait has a timeout and the run stops by itself after SECS.
"""
import argparse
import asyncio
import json
import os
import random
import socket
import struct
import sys
import time

from websockets.asyncio.client import connect

p = argparse.ArgumentParser()
p.add_argument("--url", required=True)
p.add_argument("--conns", type=int, required=True)
p.add_argument("--churn", type=float, required=True, help="closes (and reconnects) per second")
p.add_argument("--secs", type=float, required=True)
p.add_argument("--index", type=int, default=0)
p.add_argument("--pause", required=True, help="file whose presence pauses churn")
p.add_argument("--quiet", required=True, help="file written while paused and settled")
p.add_argument("--ready", required=True, help="file written once every connection is open")
p.add_argument("--no-deflate", action="store_true", help="no permessage-deflate on any connection")
a = p.parse_args()

stats = {
    "opened": 0,
    "closed_frame": 0,
    "closed_rst": 0,
    "closed_fin": 0,
    "connect_failed": 0,
    "lost": 0,  # closed by the server or the network without being asked
    "echo_ok": 0,
    "echo_late": 0,
    "broadcasts_received": 0,
    "deflate_conns": 0,
}
errors = []
busy = 0  # connects, closes and echoes in flight
conns = {}  # slot -> websocket
waiting = {}  # slot -> future of its own echo
deadline = time.monotonic() + a.secs


def source(slot):
    # Spread the client side over 127.0.0.2.. so 10,000 connections plus churn never run out
    # of ephemeral ports on one source address.
    n = a.index * 1000 + slot
    return (f"127.0.{(n // 250) % 250}.{2 + n % 250}", 0)


async def reader(slot, ws):
    try:
        async for msg in ws:
            try:
                m = json.loads(msg)
            except ValueError:
                errors.append(f"not JSON from the server: {msg[:80]!r}")
                continue
            ch = m.get("channel")
            if ch == "all" and "data" in m:
                stats["broadcasts_received"] += 1
            elif ch == f"me-{a.index}-{slot}" and "data" in m:
                f = waiting.pop(slot, None)
                if f is not None and not f.done():
                    f.set_result(m["data"])
    except Exception:
        pass
    if conns.get(slot) is ws:
        # Nobody asked for this close.
        del conns[slot]
        stats["lost"] += 1
        code = ws.close_code
        if len(errors) < 20:
            errors.append(f"slot {slot} lost: close code {code}, reason {ws.close_reason!r}")
        asyncio.get_running_loop().create_task(open_slot(slot))


async def open_slot(slot):
    global busy
    busy += 1
    try:
        for attempt in range(5):
            if time.monotonic() > deadline:
                return
            try:
                deflate = slot % 2 == 0 and not a.no_deflate
                ws = await connect(
                    a.url,
                    compression="deflate" if deflate else None,
                    local_addr=source(slot),
                    open_timeout=20,
                    ping_interval=None,  # the server pings; the client answers
                    close_timeout=5,
                    max_size=1 << 20,
                )
            except Exception as e:
                stats["connect_failed"] += 1
                if len(errors) < 20:
                    errors.append(f"connect failed: {type(e).__name__}: {e}")
                await asyncio.sleep(0.2 * (attempt + 1))
                continue
            try:
                await ws.send(json.dumps({"op": "subscribe", "channel": "all"}))
                await ws.send(json.dumps({"op": "subscribe", "channel": f"me-{a.index}-{slot}"}))
            except Exception as e:
                # Never leave an open connection the soak does not track.
                ws.transport.abort()
                stats["connect_failed"] += 1
                if len(errors) < 20:
                    errors.append(f"subscribe failed: {type(e).__name__}: {e}")
                continue
            old = conns.get(slot)
            if old is not None:
                # A reconnect raced another one for this slot: keep one connection per slot.
                ws.transport.abort()
                return
            stats["opened"] += 1
            if ws.protocol.extensions:
                stats["deflate_conns"] += 1
            conns[slot] = ws
            asyncio.get_running_loop().create_task(reader(slot, ws))
            return
    finally:
        busy -= 1


async def close_slot(slot, how):
    global busy
    ws = conns.pop(slot, None)
    if ws is None:
        return
    busy += 1
    try:
        if how == 0:
            await asyncio.wait_for(ws.close(), 10)
            stats["closed_frame"] += 1
        elif how == 1:
            sock = ws.transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            ws.transport.abort()
            stats["closed_rst"] += 1
        else:
            ws.transport.close()  # FIN without a close frame
            stats["closed_fin"] += 1
    except Exception:
        ws.transport.abort()
    finally:
        busy -= 1


async def echo(slot):
    global busy
    ws = conns.get(slot)
    if ws is None or slot in waiting:
        return
    busy += 1
    try:
        f = asyncio.get_running_loop().create_future()
        waiting[slot] = f
        token = random.getrandbits(48)
        # Echo payloads are compressible JSON text: deflate connections compress them.
        data = {"t": token, "pad": "x" * random.choice([10, 100, 400])}
        await ws.send(json.dumps({"op": "publish", "channel": f"me-{a.index}-{slot}", "data": data}))
        got = await asyncio.wait_for(f, 10)
        if got.get("t") == token:
            stats["echo_ok"] += 1
        else:
            errors.append(f"slot {slot}: echo {got!r} is not the {token} sent")
    except Exception:
        stats["echo_late"] += 1
    finally:
        waiting.pop(slot, None)
        busy -= 1


async def main():
    loop = asyncio.get_running_loop()
    # Open in waves so the handshakes do not all wait in the accept queue at once.
    for start in range(0, a.conns, 200):
        await asyncio.gather(*(open_slot(s) for s in range(start, min(start + 200, a.conns))))
    open(a.ready, "w").write(str(len(conns)))
    tick = 0.05
    carry = 0.0
    last_bcast = time.monotonic()
    tasks = set()
    while time.monotonic() < deadline:
        await asyncio.sleep(tick)
        if os.path.exists(a.pause):
            if busy == 0 and not tasks:
                # Atomically: soak.sh reads it while this process may rewrite it.
                with open(a.quiet + ".tmp", "w") as f:
                    f.write(str(len(conns)))
                os.replace(a.quiet + ".tmp", a.quiet)
            continue
        if os.path.exists(a.quiet):
            os.unlink(a.quiet)
        carry += a.churn * tick
        while carry >= 1:
            carry -= 1
            slot = random.randrange(a.conns)
            if slot in conns:
                async def cycle(slot=slot, how=random.randrange(3)):
                    await close_slot(slot, how)
                    await open_slot(slot)
                t = loop.create_task(cycle())
                tasks.add(t)
                t.add_done_callback(tasks.discard)
        # Echo: each connection about once every 10 s.
        for _ in range(max(1, int(a.conns * tick / 10))):
            slot = random.randrange(a.conns)
            t = loop.create_task(echo(slot))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
        if a.index == 0 and time.monotonic() - last_bcast >= 1 and conns:
            last_bcast = time.monotonic()
            ws = next(iter(conns.values()))
            try:
                await ws.send(json.dumps({"op": "publish", "channel": "all",
                                          "data": {"at": time.time(), "pad": "b" * 200}}))
            except Exception:
                pass
    # No longer settled: soak.sh must not read a count from before the leaving.
    if os.path.exists(a.quiet):
        os.unlink(a.quiet)
    if tasks:
        await asyncio.wait(tasks, timeout=15)
    # Leave: every connection with a close frame.
    live = list(conns.items())
    conns.clear()
    await asyncio.gather(*(asyncio.wait_for(ws.close(), 10) for _, ws in live),
                         return_exceptions=True)
    print(json.dumps({"index": a.index, **stats, "errors": errors[:20]}), flush=True)


asyncio.run(main())

"""The Python peer: the websockets package's asyncio echo server with its defaults
(compression off here, as the other peers), one process. Usage: python3 py_echo.py PORT [broadcast]
`broadcast` sends every message to every open client (the sender included) with the
package's own websockets.broadcast(), which writes to each connection without awaiting."""
import asyncio, sys
from websockets.asyncio.server import broadcast, serve

async def echo(ws):
    try:
        async for m in ws:
            await ws.send(m)
    except Exception:
        pass

async def main(port, fan_out):
    server = None

    async def relay(ws):
        try:
            async for m in ws:
                broadcast(server.connections, m)
        except Exception:
            pass

    async with serve(relay if fan_out else echo, "127.0.0.1", port, compression=None,
                     max_size=16 << 20, backlog=4096) as server:
        print(f"py-websockets listening on ws://127.0.0.1:{port}/", file=sys.stderr, flush=True)
        await asyncio.Future()

asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 9202,
                 len(sys.argv) > 2 and sys.argv[2] == "broadcast"))

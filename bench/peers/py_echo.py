"""The Python peer: the websockets package's asyncio echo server with its defaults
(compression off here, as the other peers), one process. Usage: python3 py_echo.py PORT"""
import asyncio, sys
from websockets.asyncio.server import serve

async def echo(ws):
    try:
        async for m in ws:
            await ws.send(m)
    except Exception:
        pass

async def main(port):
    async with serve(echo, "127.0.0.1", port, compression=None, max_size=16 << 20, backlog=4096):
        print(f"py-websockets listening on ws://127.0.0.1:{port}/", file=sys.stderr, flush=True)
        await asyncio.Future()

asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 9202))

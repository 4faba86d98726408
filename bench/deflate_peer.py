#!/usr/bin/env python3
"""The peer for `wstune bench deflate`: the same messages, settings and round trip with
Python's zlib (the C zlib it links), so both are measured in one run on one machine.
Usage: bench/deflate_peer.py [ITERATIONS] [LEVEL] [WINDOW_BITS] [MEM_LEVEL]"""
import json, sys, time, zlib

def message(size, i):
    # Byte for byte the generator in src/cmd/bench.rs.
    s, k = "[", 0
    while len(s) < size:
        if k > 0:
            s += ","
        x = ((i * 2654435761) + k * 40503) % (1 << 64) % 100000
        s += '{"symbol":"SYM%03d","bid":%d.%05d,"ask":%d.%05d,"volume":%d,"seq":%d,"venue":"XNAS"}' % (
            k, x % 500, x, x % 500, (x + 7) % 100000, x * 13 % 1000003, i * 100 + k)
        k += 1
    return (s + "]").encode()

TAIL = b"\x00\x00\xff\xff"

def run(msgs, n, persistent, level, wb, ml):
    c = zlib.compressobj(level, zlib.DEFLATED, -wb, ml)
    d = zlib.decompressobj(-wb)
    comp = orig = 0
    t = time.perf_counter()
    for i in range(n):
        m = msgs[i % len(msgs)]
        if not persistent:
            c = zlib.compressobj(level, zlib.DEFLATED, -wb, ml)
            d = zlib.decompressobj(-wb)
        z = c.compress(m) + c.flush(zlib.Z_SYNC_FLUSH)
        z = z[:-4] if z.endswith(TAIL) else z
        out = d.decompress(z + TAIL)
        assert out == m
        comp += len(z); orig += len(m)
    ms = (time.perf_counter() - t) * 1000
    return ms * 10000 / n, comp / orig

def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    level = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    wb = int(sys.argv[3]) if len(sys.argv) > 3 else 15
    ml = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    rows = []
    for size in (1024, 4096, 16384, 65536):
        for stream in ("repeated", "distinct"):
            msgs = [message(size, i) for i in range(1 if stream == "repeated" else 64)]
            for mode, persistent in (("persistent", True), ("fresh_per_message", False)):
                ms, ratio = run(msgs, n, persistent, level, wb, ml)
                rows.append({"size_bytes": size, "stream": stream, "mode": mode, "ms_per_10k": round(ms, 1), "ratio": round(ratio, 3)})
    print(json.dumps({"zlib": zlib.ZLIB_RUNTIME_VERSION, "iterations": n, "level": level, "rows": rows}, indent=1))

main()

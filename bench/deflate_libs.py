#!/usr/bin/env python3
"""One 64 KiB JSON ticker stream, the same bytes for every library.

`deflate_libs.py write FILE SIZE COUNT` writes COUNT deterministic messages of SIZE bytes back
to back (the Rust side, bench/deflate-libs, reads that file); `deflate_libs.py run FILE SIZE
RUNS` times Python's bindings on it: C zlib (the `zlib` module), zlib-ng (`zlib-ng`), ISA-L
(`isal`) and libdeflate (`deflate`), permessage-deflate style: raw deflate, level 1, window 15,
sync flush with the 00 00 ff ff tail removed and appended back. One JSON line per library and
mode: the median over RUNS of the mean thread CPU time per message.
Modes: `fresh` builds a new compressor and decompressor per message (Python has no reset;
libdeflate is whole-buffer and ends each message with a final block), `takeover` keeps one of
each for the whole stream."""
import json, sys, time, zlib

TAIL = b"\x00\x00\xff\xff"
SYMS = ["AAPL", "MSFT", "NVDA", "AMZN", "GOOG", "META", "TSLA", "BRK.B", "JPM", "V", "XOM",
        "UNH", "AVGO", "LLY", "WMT", "MA"]

def ticker(size, i):
    """A trade feed: prices, quantities, ids and timestamps vary per trade (a 64-bit LCG seeded
    by i), padded with spaces to exactly `size` bytes. C zlib level 1: ratio ~0.30."""
    st = (i * 6364136223846793005 + 1442695040888963407) % (1 << 64)
    def rnd(n):
        nonlocal st
        st = (st * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return (st >> 33) % n
    parts, k, total = [], 0, 2
    while True:
        px = 100 + rnd(90000) / 100
        p = '{"e":"trade","s":"%s","t":%d,"p":"%.2f","q":%d,"b":%d,"a":%d,"T":%d,"m":%s}' % (
            SYMS[rnd(len(SYMS))], 1764547200000 + i * 1000 + k * 7 + rnd(7), px, 1 + rnd(50000),
            rnd(10**9), rnd(10**9), 1764547200000000 + rnd(10**6), "true" if rnd(2) else "false")
        if total + len(p) + 1 > size:
            break
        parts.append(p)
        total += len(p) + 1
        k += 1
    s = "[" + ",".join(parts) + "]"
    return (s + " " * (size - len(s))).encode()

def zlib_like(mod, name, version):
    """A module with zlib's compressobj/decompressobj API."""
    def make():
        c = mod.compressobj(1, mod.DEFLATED, -15, 8)
        d = mod.decompressobj(-15)
        state = {"c": c, "d": d}
        def compress(m, fresh):
            if fresh:
                state["c"] = mod.compressobj(1, mod.DEFLATED, -15, 8)
            c = state["c"]
            z = c.compress(m) + c.flush(mod.Z_SYNC_FLUSH)
            return z[:-4] if z.endswith(TAIL) else z
        def inflate(z, size, fresh):
            if fresh:
                state["d"] = mod.decompressobj(-15)
            return state["d"].decompress(z + TAIL)
        return compress, inflate
    return name, version, make, True

def libdeflate_peer():
    import deflate
    def make():
        def compress(m, fresh):
            return deflate.deflate_compress(m, 1)
        def inflate(z, size, fresh):
            return deflate.deflate_decompress(z + TAIL + b"\x03\x00", size)
        return compress, inflate
    return "libdeflate (deflate %s)" % getattr(deflate, "__version__", "0.9.0"), "", make, False

def peers():
    out = [zlib_like(zlib, "C zlib %s" % zlib.ZLIB_RUNTIME_VERSION, "")]
    from zlib_ng import zlib_ng
    out.append(zlib_like(zlib_ng, "zlib-ng %s" % zlib_ng.ZLIBNG_VERSION, ""))
    from isal import isal_zlib
    import isal
    out.append(zlib_like(isal_zlib, "ISA-L (isal %s)" % isal.__version__, ""))
    out.append(libdeflate_peer())
    return out

def measure(name, make, msgs, runs, fresh):
    cs, ds, ratio = [], [], 0.0
    for _ in range(runs):
        compress, inflate = make()
        c_ns = d_ns = wire = orig = 0
        for m in msgs:
            t0 = time.thread_time_ns()
            z = compress(m, fresh)
            t1 = time.thread_time_ns()
            out = inflate(z, len(m), fresh)
            t2 = time.thread_time_ns()
            assert out == m, name
            c_ns += t1 - t0
            d_ns += t2 - t1
            wire += len(z)
            orig += len(m)
        cs.append(c_ns / len(msgs) / 1000)
        ds.append(d_ns / len(msgs) / 1000)
        ratio = wire / orig
    med = lambda v: sorted(v)[len(v) // 2]
    rt = [a + b for a, b in zip(cs, ds)]
    print(json.dumps({"lib": name, "lang": "python", "mode": "fresh" if fresh else "takeover",
                      "compress_us": round(med(cs), 1), "inflate_us": round(med(ds), 1),
                      "round_trip_us": round(med(rt), 1), "ratio": round(ratio, 4), "runs": runs}))

def main():
    cmd, path, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if cmd == "write":
        with open(path, "wb") as f:
            for i in range(int(sys.argv[4])):
                f.write(ticker(size, i))
        return
    runs = int(sys.argv[4])
    data = open(path, "rb").read()
    msgs = [data[i:i + size] for i in range(0, len(data), size)]
    for fresh in (True, False):
        for name, _, make, streams in peers():
            if fresh or streams:
                measure(name, make, msgs, runs, fresh)

main()

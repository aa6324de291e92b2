#!/usr/bin/env python3
"""store_flood.py - the two sides of bench/store_flood.sh (the protocol from tests/sh/store_attack.py).

  store_flood.py flood HOST PORT N SECS SRC   a stranger: N connections from source address SRC,
                                              each sends HELLO and nothing more; one dropped is
                                              opened again, so N stay open for SECS. Prints
                                              "opened O dropped D refused R held_max M".
  store_flood.py probe HOST PORT TOKEN SECS   the job's client: a GET every 5 ms on one
                                              authenticated connection, and every 20th time a new
                                              connection authenticated and asked; prints the
                                              latencies (ms) of each: n p50 p99 max, and errors.
"""
import os
import resource
import selectors
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "sh"))
import store_attack as sa  # noqa: E402

IP_BIND_ADDRESS_NO_PORT = 24  # linux/in.h: the 4-tuple picks the port, so 20,000 fit one port range


def opener(host, port, src):
    def open_one():
        s = socket.socket()
        s.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        s.bind((src, 0))
        s.setblocking(False)
        try:
            s.connect((host, port))
        except BlockingIOError:
            pass
        return s
    return open_one


def flood(host, port, n, secs, src):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 64), hard))
    hello = sa.frame(sa.HELLO, struct.pack("<IH", sa.MAGIC, sa.VERSION))
    sel = selectors.DefaultSelector()
    open_one = opener(host, port, src)
    opened = dropped = refused = held_max = 0
    held = 0
    end = time.monotonic() + secs

    def add():
        nonlocal opened, held, refused
        try:
            s = open_one()
        except OSError:
            refused += 1
            return
        sel.register(s, selectors.EVENT_WRITE, "connecting")
        opened += 1
        held += 1

    for _ in range(n):
        add()
    while time.monotonic() < end:
        held_max = max(held_max, held)
        for key, ev in sel.select(timeout=0.2):
            s = key.fileobj
            if key.data == "connecting":
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err == 0:
                    try:
                        s.send(hello)
                        sel.modify(s, selectors.EVENT_READ, "held")
                        continue
                    except OSError:
                        pass
                refused += 1
            else:
                try:
                    if s.recv(4096):
                        continue
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    pass
                dropped += 1
            sel.unregister(s)
            s.close()
            held -= 1
            add()
    print("opened %d dropped %d refused %d held_max %d" % (opened, dropped, refused, held_max))


def pct(xs, q):
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def probe(host, port, token, secs):
    get = sa.frame(sa.GET, struct.pack("<I", 0) + sa.string(b"probe/key"))
    s = sa.connect(host, port)
    sa.handshake(s, token)
    calls, fresh, errors = [], [], 0
    end = time.monotonic() + secs
    i = 0
    while time.monotonic() < end:
        i += 1
        t0 = time.monotonic()
        try:
            if i % 20 == 0:
                c = sa.connect(host, port)
                sa.handshake(c, token)
                sa.send(c, get)
                sa.read_frame(c)
                c.close()
                fresh.append((time.monotonic() - t0) * 1e3)
            else:
                sa.send(s, get)
                sa.read_frame(s)
                calls.append((time.monotonic() - t0) * 1e3)
        except (sa.Closed, OSError, PermissionError):
            errors += 1
            try:
                s = sa.connect(host, port)
                sa.handshake(s, token)
            except (sa.Closed, OSError, PermissionError):
                pass
        time.sleep(0.005)
    for name, xs in (("call", sorted(calls)), ("new_client", sorted(fresh))):
        print("%s n %d p50 %.2f p99 %.2f max %.2f" % (name, len(xs), pct(xs, 0.5), pct(xs, 0.99), xs[-1] if xs else float("nan")))
    print("errors %d" % errors)


if __name__ == "__main__":
    a = sys.argv
    if a[1] == "flood":
        flood(a[2], int(a[3]), int(a[4]), float(a[5]), a[6])
    elif a[1] == "probe":
        probe(a[2], int(a[3]), a[4], float(a[5]))
    else:
        raise SystemExit("store_flood.py: flood|probe")

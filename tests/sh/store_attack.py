#!/usr/bin/env python3
"""store_attack.py - a stranger's client of a cddp store, written from docs/store.md (no cddp code):
the attacks tests/sh/test_store_attack.sh runs against a real store. Each prints one word, the
outcome, so the test can say what the store let through.

  store_attack.py HOST PORT ATTACK [ARG...]
    read KEY [TOKEN]          GET KEY after the handshake (TOKEN given: authenticate with it;
                              none: skip AUTH): the value, "absent", "closed" or "auth_fail"
    write KEY VAL [TOKEN]     SET KEY=VAL: "written", "closed" or "auth_fail"
    add KEY [TOKEN]           ADD 1 to KEY: the new count, "closed" or "auth_fail"
    hello_only SECS           HELLO, then silence: "dropped after S" or "kept"
    loris SECS                HELLO and a never-finished AUTH frame, a byte every 0.2 s: as hello_only
    huge [TOKEN]              a 2 GiB length prefix (after authenticating with TOKEN when given):
                              "closed after S" or "kept"
"""
import hashlib
import hmac
import os
import socket
import struct
import sys
import time

MAGIC, VERSION = 0x50444443, 1
HELLO, AUTH, SET, GET, ADD = 0x01, 0x02, 0x10, 0x11, 0x12
CHALLENGE, AUTH_OK, AUTH_FAIL, OK, VALUE, INT, TIMEOUT = 0x81, 0x82, 0x83, 0x90, 0x91, 0x92, 0x93


class Closed(Exception):
    pass


def frame(op, payload=b""):
    return struct.pack("<IB", 1 + len(payload), op) + payload


def string(b):
    return struct.pack("<I", len(b)) + b


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        try:
            b = s.recv(n - len(out))
        except (ConnectionResetError, socket.timeout):
            raise Closed()
        if not b:
            raise Closed()
        out += b
    return out


def read_frame(s):
    n, op = struct.unpack("<IB", recv_exact(s, 5))
    if n < 1 or n > 1 << 20:
        raise Closed()
    return op, recv_exact(s, n - 1)


def send(s, data):
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        raise Closed()


def connect(host, port):
    s = socket.create_connection((host, port), timeout=10)
    s.settimeout(10)
    return s


def handshake(s, token):
    """HELLO, then AUTH with token when one is given (None: the stranger skips AUTH)."""
    send(s, frame(HELLO, struct.pack("<IH", MAGIC, VERSION)))
    op, p = read_frame(s)
    if op != CHALLENGE or len(p) != 39:
        raise Closed()
    auth_required, ns = p[6], p[7:39]
    if token is None or not auth_required:
        return
    nc = os.urandom(32)
    send(s, frame(AUTH, nc + hmac.new(token.encode(), ns + nc, hashlib.sha256).digest()))
    op, _ = read_frame(s)
    if op == AUTH_FAIL:
        raise PermissionError()
    if op != AUTH_OK:
        raise Closed()


def call(host, port, token, request):
    s = connect(host, port)
    try:
        handshake(s, token)
        send(s, request)
        return read_frame(s)
    finally:
        s.close()


def dropped_within(s, secs, trickle=None):
    """Waits up to secs for the server to close s, sending a byte of trickle every 0.2 s."""
    t0 = time.monotonic()
    s.settimeout(0.2)
    while time.monotonic() - t0 < secs:
        try:
            if not s.recv(4096):
                return "dropped after %.1f" % (time.monotonic() - t0)
        except socket.timeout:
            pass
        except ConnectionResetError:
            return "dropped after %.1f" % (time.monotonic() - t0)
        if trickle:
            try:
                s.send(trickle[:1])
            except OSError:
                return "dropped after %.1f" % (time.monotonic() - t0)
            trickle = trickle[1:]
    return "kept"


def main(argv):
    host, port, attack, args = argv[1], int(argv[2]), argv[3], argv[4:]
    token = lambda i: args[i] if len(args) > i else None
    try:
        if attack == "read":
            op, p = call(host, port, token(1), frame(GET, struct.pack("<I", 0) + string(args[0].encode())))
            if op == VALUE and p[0]:
                return p[5:].decode(errors="replace")
            return "absent" if op in (VALUE, TIMEOUT) else "op 0x%02x" % op
        if attack == "write":
            op, _ = call(host, port, token(2), frame(SET, string(args[0].encode()) + string(args[1].encode())))
            return "written" if op == OK else "op 0x%02x" % op
        if attack == "add":
            op, p = call(host, port, token(1), frame(ADD, struct.pack("<q", 1) + string(args[0].encode())))
            return str(struct.unpack("<q", p)[0]) if op == INT else "op 0x%02x" % op
        if attack in ("hello_only", "loris"):
            s = connect(host, port)
            send(s, frame(HELLO, struct.pack("<IH", MAGIC, VERSION)))
            trickle = frame(AUTH, bytes(64)) if attack == "loris" else None
            return dropped_within(s, float(args[0]), trickle)
        if attack == "huge":
            s = connect(host, port)
            if token(0) is not None:
                handshake(s, token(0))
            send(s, struct.pack("<IB", 0x7FFFFFF0, SET) + bytes(64))
            return dropped_within(s, 5).replace("dropped", "closed")
    except Closed:
        return "closed"
    except PermissionError:
        return "auth_fail"
    except ConnectionRefusedError:
        return "refused"
    raise SystemExit("store_attack.py: unknown attack %s" % attack)


if __name__ == "__main__":
    print(main(sys.argv))

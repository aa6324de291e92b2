#!/usr/bin/env python3
"""check_safetensors.py - an independent, stdlib-only reader of safetensors files.

Applies the format's rules as the reference implementation does (8-byte little-endian header
size N <= 100,000,000 and inside the file; N bytes of UTF-8 JSON starting with '{'; an object of
tensor entries {"dtype", "shape", "data_offsets"} plus an optional "__metadata__" str->str map;
offsets, sorted, tile the data section exactly: first at 0, each beginning where the previous
ended, size = product(shape) * dtype size, the last ending at the end of the file), loads the
F32 tensors with struct/array and prints, per file:
    tensor FILE NAME DTYPE [d0, d1] sum=S      (sum in double, in order, like `cddp ckpt info`)
    meta FILE KEY = VALUE
Exit 0 when every file is valid; otherwise one line "FILE: problem" on stderr and exit 1.
usage: check_safetensors.py FILE...
"""
import array
import json
import os
import struct
import sys

MAX_HEADER = 100_000_000
DTYPE_SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
              "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


class Bad(Exception):
    pass


def no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise Bad("key %r appears twice" % k)
        d[k] = v
    return d


def is_uint(x):
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def check(path):
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise Bad("shorter than the 8-byte header size")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > MAX_HEADER:
        raise Bad("header size %d over the limit" % n)
    if 8 + n > len(buf):
        raise Bad("header size %d runs past the end of the file" % n)
    try:
        text = buf[8:8 + n].decode("utf-8")
    except UnicodeDecodeError:
        raise Bad("header is not UTF-8")
    if not text.startswith("{"):
        raise Bad("header does not start with '{'")
    try:
        hdr = json.loads(text, object_pairs_hook=no_duplicates,
                         parse_float=lambda s: (_ for _ in ()).throw(Bad("float %s in header" % s)))
    except json.JSONDecodeError as e:
        raise Bad("header is not JSON: %s" % e)
    if not isinstance(hdr, dict):
        raise Bad("header is not an object")
    meta = hdr.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise Bad("__metadata__ is not a map of strings to strings")
    data = buf[8 + n:]
    tensors = []
    for name, info in hdr.items():
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise Bad("tensor %r: entry must hold exactly dtype, shape, data_offsets" % name)
        dt, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
        if dt not in DTYPE_SIZE:
            raise Bad("tensor %r: unknown dtype %r" % (name, dt))
        if not isinstance(shape, list) or not all(is_uint(d) for d in shape):
            raise Bad("tensor %r: bad shape %r" % (name, shape))
        if not isinstance(offs, list) or len(offs) != 2 or not all(is_uint(o) for o in offs):
            raise Bad("tensor %r: bad data_offsets %r" % (name, offs))
        count = 1
        for d in shape:
            count *= d
        tensors.append((offs[0], offs[1], name, dt, shape, count))
    at = 0
    for begin, end, name, dt, shape, count in sorted(tensors):
        if begin != at:
            raise Bad("tensor %r: data_offsets [%d, %d] do not begin at %d (hole or overlap)" % (name, begin, end, at))
        if end < begin or end - begin != count * DTYPE_SIZE[dt]:
            raise Bad("tensor %r: data_offsets [%d, %d] do not match shape %r of %s" % (name, begin, end, shape, dt))
        at = end
    if at != len(data):
        raise Bad("tensors cover %d bytes, the data section holds %d" % (at, len(data)))
    base = os.path.basename(path)
    out = []
    for begin, end, name, dt, shape, count in sorted(tensors, key=lambda t: list(hdr).index(t[2])):
        line = "tensor %s %s %s [%s]" % (base, name, dt, ", ".join(str(d) for d in shape))
        if dt == "F32":
            a = array.array("f")
            a.frombytes(data[begin:end])
            if sys.byteorder != "little":
                a.byteswap()
            s = 0.0
            for v in a:
                s += v
            line += " sum=%.10e" % s
        out.append(line)
    for k, v in meta.items():
        out.append("meta %s %s = %s" % (base, k, v.replace("\n", "\\n")))
    return out


def main(argv):
    if len(argv) < 2:
        print("usage: check_safetensors.py FILE...", file=sys.stderr)
        return 2
    for path in argv[1:]:
        try:
            lines = check(path)
        except (Bad, OSError) as e:
            print("%s: %s" % (path, e), file=sys.stderr)
            return 1
        for line in lines:
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

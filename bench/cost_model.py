#!/usr/bin/env python3
"""cost_model.py - alpha-beta model of cddp's allreduce algorithms: fit, check, project (stdlib only).

Usage:
  bench/cost_model.py DIR            fit alpha/beta to the sweeps bench/multihost.sh --fit left in
                                     DIR, print predicted vs measured, then the 1,000-node table
  bench/cost_model.py --alpha S --beta S_PER_BYTE [--shm-alpha S --shm-beta S_PER_BYTE]
                                     only the projection, with given parameters
Options: --ranks-per-host L (projection, default 8), --markdown (tables as Markdown).

Model (docs/cost-model.md): a message of n bytes, p ranks, H hosts, L ranks per host;
alpha = per-message latency of a host link, beta = seconds per byte of a host link;
a, b = the same for the shared-memory step within a host.
  ring (1 rank/host):    T = 2(p-1) alpha + 2(p-1)/p n beta
  flat ring, L/host:     T = 2(p-1) alpha + 2(p-1)/p n beta   (one ring edge leaves each host)
  recursive doubling:    T = s alpha + s n beta, s = log2(p2) + 2 [p != p2], p2 = 2^floor(log2 p)
                         (with L ranks/host every step that crosses hosts carries L n per NIC)
  hierarchical:          T = a_rs+ag(n) + 2(H-1) alpha + 2(H-1)/H n beta     (n > 64 KiB)
                         T = a_ar(n) + s_H alpha + s_H L n beta               (n <= 64 KiB)
                         shm term: a + b n (fitted to a one-host shm allreduce); pipelined
                         segments hide all of it but one segment: a + b min(n, seg) ...
busbw = 2(p-1)/p n / T, the figure nccl-tests and `cddp bench` print.
"""
import math
import os
import re
import sys

DIRECT_MAX = 65536
BURST_FREE = 4 << 20  # transfers of at least this size are rate-limited for most of their time
SEG = 4 << 20


def rd_steps(p):
    if p <= 1:
        return 0
    p2 = 1 << (p.bit_length() - 1)
    return int(math.log2(p2)) + (2 if p != p2 else 0)


def t_ring(n, p, a, b):
    return 2 * (p - 1) * a + 2 * (p - 1) / p * n * b if p > 1 else 0.0


def t_rd(n, p, a, b, per_host=1):
    # with L ranks per host, the steps whose partner is on another host move L n per NIC;
    # (ranks contiguous per host: the first log2(L) steps stay inside the host, modelled free)
    s = rd_steps(p)
    inside = int(math.log2(per_host)) if per_host > 1 and per_host & (per_host - 1) == 0 else 0
    return s * a + max(0, s - inside) * per_host * n * b


def t_shm(n, sa, sb):
    return sa + sb * n


def t_hier(n, H, L, a, b, sa, sb):
    if n <= DIRECT_MAX or n < L:
        return t_shm(n, sa, sb) + t_rd(n, H, a, b) * 1.0 + (L - 1) * rd_steps(H) * n * b
    # pipelined: the shm work of all but one segment hides behind the network
    exposed = min(n, SEG)
    return t_shm(exposed, sa, sb) + t_ring(n, H, a, b)


def busbw(n, p, t):
    return 2 * (p - 1) / p * n / t if t > 0 else float("inf")


# ---------------------------------------------------------------- logs

ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+\s+([0-9.]+)\s+[0-9.]+\s+[0-9.]+\s+(\S+)")


def read_bench(path):
    """{size_bytes: time_seconds} of rank 0's rows in a `cddp bench` log."""
    out = {}
    with open(path, errors="replace") as f:
        for line in f:
            line = re.sub(r"^\[[^]]*\] ?", "", line)
            m = ROW.match(line)
            if m:
                out[int(m.group(1))] = float(m.group(3)) * 1e-6
    return out


def fit_linear(points):
    """Least squares on relative error of t = x0 c0 + x1 c1 over (c0, c1, t); returns (x0, x1)."""
    s00 = s01 = s11 = r0 = r1 = 0.0
    for c0, c1, t in points:
        w = 1.0 / (t * t)
        s00 += w * c0 * c0
        s01 += w * c0 * c1
        s11 += w * c1 * c1
        r0 += w * c0 * t
        r1 += w * c1 * t
    det = s00 * s11 - s01 * s01
    x0 = (r0 * s11 - r1 * s01) / det
    x1 = (s00 * r1 - s01 * r0) / det
    return max(x0, 0.0), max(x1, 0.0)


def fmt_t(t):
    if t < 1e-3:
        return "%.0f us" % (t * 1e6)
    if t < 1:
        return "%.1f ms" % (t * 1e3)
    return "%.2f s" % t


def fmt_n(n):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return "%d %s" % (n // k, unit)
    return "%d B" % n


def table(header, rows, md):
    if md:
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join("---" for _ in header) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        w = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
        for r in [header] + rows:
            print("  ".join(str(x).rjust(w[i]) for i, x in enumerate(r)))
    print()


def fit_and_check(d, md):
    logs = {name: read_bench(os.path.join(d, name)) for name in os.listdir(d) if name.startswith("fit-")}
    ring = logs.get("fit-flat-ring-1x3", {})
    if not ring:
        sys.exit("cost_model.py: %s has no fit-flat-ring-1x3 (run bench/multihost.sh --fit --out %s)" % (d, d))
    # alpha, beta from the forced ring on 3 hosts: T = 4 alpha + 4/3 n beta, on the sizes where
    # one term dominates: <= 4 KiB (latency) and >= 4 MiB (bandwidth). In between, tc tbf's
    # burst (1.25 MB at 1 Gbit/s) lets a transfer through at memory speed: the model's beta is
    # the sustained rate, so it over-predicts there (docs/cost-model.md).
    a, b = fit_linear([(2 * 2, 2 * 2 / 3 * n, t) for n, t in ring.items() if n <= 4096 or n >= BURST_FREE])
    shm = logs.get("fit-shm-2x1", {})
    sa, sb = fit_linear([(1.0, n, t) for n, t in shm.items()]) if shm else (0.0, 0.0)
    if not shm:
        print("(no fit-shm-2x1 in %s: the shm term of the hierarchical model is taken as 0)" % d)
    print("fitted from %s/fit-flat-ring-1x3 (sizes <= 4 KiB and >= 4 MiB): alpha = %.1f us, beta = %.3f ns/B (%.3f GB/s)"
          % (d, a * 1e6, b * 1e9, 1e-9 / b if b else float("inf")))
    if shm:
        print("fitted from fit-shm-2x1 (one host, 2 ranks, shm): a = %.1f us, b = %.3f ns/B (%.2f GB/s)"
              % (sa * 1e6, sb * 1e9, 1e-9 / sb if sb else float("inf")))
    print()
    models = [
        ("ring 1x3", "fit-flat-ring-1x3", lambda n: t_ring(n, 3, a, b)),
        ("direct (rec. doubling) 1x3", "fit-flat-direct-1x3", lambda n: t_rd(n, 3, a, b)),
        ("flat ring 2x3", "fit-flat-ring-2x3", lambda n: t_ring(n, 6, a, b)),
        ("direct (rec. doubling) 2x3", "fit-flat-direct-2x3", lambda n: t_rd(n, 6, a, b, 2)),
        ("hier 2x3", "fit-hier-2x3", lambda n: t_hier(n, 3, 2, a, b, sa, sb)),
    ]
    rows = []
    for label, name, f in models:
        meas = logs.get(name, {})
        for n in (4, 4096, 65536, 1 << 20, 16 << 20, 64 << 20):
            if n in meas:
                p, m = f(n), meas[n]
                rows.append([label, fmt_n(n), fmt_t(p), fmt_t(m), "%+.0f%%" % (100 * (p - m) / m)])
    table(["algorithm (ranks/host x hosts)", "size", "predicted", "measured", "error"], rows, md)
    return a, b, sa, sb


def project(a, b, sa, sb, L, md):
    print("projection: alpha = %.1f us, beta = %.3f ns/B per host link; shm a = %.1f us, b = %.3f ns/B; "
          "hier and flat-ring-L with %d ranks per host" % (a * 1e6, b * 1e9, sa * 1e6, sb * 1e9, L))
    rows = []
    for H in (2, 8, 64, 256, 1000):
        for n in (4 << 10, 1 << 20, 64 << 20, 1 << 30):
            pL = H * L
            cells = [
                ("ring", t_ring(n, H, a, b), H),
                ("rec. doubling", t_rd(n, H, a, b), H),
                ("flat ring x%d" % L, t_ring(n, pL, a, b), pL),
                ("hier x%d" % L, t_hier(n, H, L, a, b, sa, sb), pL),
            ]
            rows.append([str(H), fmt_n(n)] + ["%s / %.3f" % (fmt_t(t), busbw(n, p, t) / 1e9) for _, t, p in cells])
    table(["nodes", "size", "ring 1/node", "rec. doubling 1/node", "flat ring %d/node" % L, "hier %d/node" % L]
          , rows, md)
    print("(each cell: predicted time / busbw in GB/s)")


def main(argv):
    md = "--markdown" in argv
    argv = [x for x in argv if x != "--markdown"]
    opts, pos = {}, []
    i = 0
    while i < len(argv):
        if argv[i].startswith("--"):
            if i + 1 >= len(argv):
                sys.exit("cost_model.py: %s needs a value" % argv[i])
            try:
                opts[argv[i]] = float(argv[i + 1])
            except ValueError:
                sys.exit("cost_model.py: %s: '%s' is not a number" % (argv[i], argv[i + 1]))
            i += 2
        else:
            pos.append(argv[i])
            i += 1
    L = int(opts.get("--ranks-per-host", 8))
    if pos:
        a, b, sa, sb = fit_and_check(pos[0], md)
    elif "--alpha" in opts and "--beta" in opts:
        a, b = opts["--alpha"], opts["--beta"]
        sa, sb = opts.get("--shm-alpha", 0.0), opts.get("--shm-beta", 0.0)
    else:
        sys.exit(__doc__.strip().split("\n\n")[0] + "\n(see --help in the file's docstring)")
    project(a, b, sa, sb, L, md)


if __name__ == "__main__":
    main(sys.argv[1:])

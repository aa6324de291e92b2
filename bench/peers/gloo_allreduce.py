#!/usr/bin/python3
"""gloo_allreduce.py - the torch.distributed (gloo) peer of `cddp bench allreduce`: same sizes, same columns.

Run under torchrun (Debian's torch 1.13 needs --redirects 1 --tee 1):
  OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 -m torch.distributed.run --standalone \
      --nproc-per-node 2 --redirects 1 --tee 1 bench/peers/gloo_allreduce.py -b 4K -e 64M -f 4
In place (dist.all_reduce works in place), like DDP and `cddp bench allreduce`.
"""
import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist


def size_arg(s):
    t = s.strip().upper().replace("IB", "").rstrip("B")
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    if t[-1:] in "KMG":
        t = t[:-1]
    try:
        return int(float(t) * mul)
    except ValueError:
        raise argparse.ArgumentTypeError("bad size '%s' (e.g. 4K, 64M)" % s)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-b", type=size_arg, default=32 << 20)
    p.add_argument("-e", type=size_arg, default=32 << 20)
    p.add_argument("-f", type=int, default=0)
    p.add_argument("-i", type=size_arg, default=1 << 20)
    p.add_argument("-w", type=int, default=1)
    p.add_argument("-n", type=int, default=20)
    p.add_argument("-c", type=int, default=1)
    p.add_argument("-d", choices=["float", "double"], default="float")
    p.add_argument("-o", choices=["sum", "max", "min"], default="sum")
    a = p.parse_args()
    # one intra-op thread per rank: ranks share the cores, OpenMP spinning would steal them
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    t_start = time.perf_counter()
    dist.init_process_group("gloo")
    t_ready = time.perf_counter()
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = torch.float64 if a.d == "double" else torch.float32
    esz = 8 if a.d == "double" else 4
    op = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[a.o]
    if rank == 0:
        print("# gloo_allreduce: torch %s gloo, world %d on %s, in place, init %.3f s"
              % (torch.__version__, world, socket.gethostname(), t_ready - t_start))
        print("# minBytes %d maxBytes %d step: %d(%s) warmup iters: %d iters: %d validation: %d\n#"
              % (a.b, a.e, a.f or a.i, "factor" if a.f else "bytes", a.w, a.n, a.c))
        print("# %10s %12s %8s %6s %6s %10s %7s %7s %6s" % ("size", "count", "type", "redop", "root",
                                                            "time", "algbw", "busbw", "#wrong"))
        print("# %10s %12s %8s %6s %6s %10s %7s %7s %6s" % ("(B)", "(elements)", "", "", "", "(us)",
                                                            "(GB/s)", "(GB/s)", ""))
    size, rows, bw_sum, wrong_total = a.b, 0, 0.0, 0
    maxcount = max(a.e // esz, 1)
    buf = torch.zeros(maxcount, dtype=dtype)
    while size <= a.e:
        count = size // esz
        if count > 0:
            t = buf[:count]
            t.zero_()
            for _ in range(a.w):
                dist.all_reduce(t, op=op)
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(a.n):
                dist.all_reduce(t, op=op)
            el = torch.tensor([(time.perf_counter() - t0) / a.n], dtype=torch.float64)
            dist.all_reduce(el, op=dist.ReduceOp.MAX)
            wrong = 0
            if a.c:
                idx = torch.arange(count, dtype=torch.int64)
                vals = [(1 + (idx + 3 * r) % 5).to(dtype) for r in range(world)]
                t.copy_(vals[rank])
                dist.all_reduce(t, op=op)
                want = vals[0].clone()
                for v in vals[1:]:
                    want = want + v if a.o == "sum" else (torch.maximum(want, v) if a.o == "max" else torch.minimum(want, v))
                wrong = int((t != want).sum())
            w = torch.tensor([wrong], dtype=torch.int64)
            dist.all_reduce(w)
            wrong_total += int(w)
            sec = float(el)
            algbw = count * esz / sec / 1e9
            busbw = algbw * 2 * (world - 1) / world
            bw_sum += busbw
            rows += 1
            if rank == 0:
                print("  %10d %12d %8s %6s %6d %10.2f %7.2f %7.2f %6d" % (count * esz, count, a.d, a.o, -1,
                                                                         sec * 1e6, algbw, busbw, int(w) if a.c else -1))
                sys.stdout.flush()
        if a.f:
            if size == 0:
                break
            size *= a.f
        else:
            size += a.i
    if rank == 0:
        print("# Out of bounds values : %d %s" % (wrong_total, "FAILED" if wrong_total else "OK"))
        print("# Avg bus bandwidth    : %.4f\n#" % (bw_sum / rows if rows else 0.0))
    dist.destroy_process_group()
    return 1 if wrong_total else 0


if __name__ == "__main__":
    sys.exit(main())

/* cmd_bench.c - `cddp bench`: nccl-tests-style timing and exact checking of the collectives over a real communicator. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cddp/comm.h"
#include "cddp/ddp.h"
#include "cddp/env.h"
#include "bench/bench.h"
#include "bench/sweep.h"
#include "cli/commands.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/hugepages.h"
#include "common/knobs.h"
#include "common/log.h"
#include "trainer/device.h"
#include "trainer/ops.h"

typedef struct bench {
  bench_opts_t o;
  cddp_comm_t *comm;
  int rank, world, mod;
  size_t esz;
  void *a, *b; /* a: the in-place / send buffer; b: the receive buffer of allgather, reduce_scatter */
  const cddp_ops_t *dev; /* --device cuda: a is pinned staging, dev_a the data in device memory */
  void *dev_a;
  int nccl; /* --backend nccl: the all-reduce runs on dev_a itself, and the bench's own small
               collectives go through device copies */
  cddp_request_t **reqs;
  int broken; /* a collective failed: abort the communicator, skip the polite exit */
} bench_t;

/* One rank's identity for the header: 64 bytes, gathered as 16 int32. */
typedef struct rank_id {
  int32_t pid;
  char host[60];
} rank_id_t;

static const char *type_name(cddp_dtype_t dt) {
  static const char *n[CDDP_DTYPE_COUNT] = {"float", "double", "bfloat16", "int32", "int64", "half"};
  return (unsigned)dt < CDDP_DTYPE_COUNT ? n[dt] : "?";
}
static const char *op_name(cddp_redop_t op) {
  static const char *n[CDDP_REDOP_COUNT] = {"sum", "avg", "max", "min"};
  return (unsigned)op < CDDP_REDOP_COUNT ? n[op] : "?";
}
static const char *algo_name(int a) {
  return a == CDDP_ALGO_RING ? "ring" : a == CDDP_ALGO_DIRECT ? "direct" : "auto";
}

/* --device cuda: the data lives on the GPU; each all-reduce is staged through pinned host
 * memory (down, reduce, up), the path of several ranks sharing one GPU (docs/gpu.md). */
static cddp_result_t staged_allreduce(bench_t *B, size_t n) {
  if (B->nccl) return cddp_allreduce(B->comm, B->dev_a, B->dev_a, n, B->o.dt, B->o.op); /* no staging */
  size_t bytes = n * B->esz;
  B->dev->to_host(B->a, B->dev_a, bytes);
  CDDP_CHECK(cddp_allreduce(B->comm, B->a, B->a, n, B->o.dt, B->o.op));
  B->dev->to_device(B->dev_a, B->a, bytes);
  return CDDP_OK;
}

/* The bench's own small collectives on host memory (the header's host exchange, the slowest
 * time, the wrong counts): an all-gather, or an all-reduce by op; under nccl, whose buffers
 * are the GPU's, through a device copy. */
static cddp_result_t host_coll(bench_t *B, int gather, const void *send, void *recv, size_t n, cddp_dtype_t dt,
                               cddp_redop_t op) {
  if (!B->nccl)
    return gather ? cddp_allgather(B->comm, send, recv, n, dt) : cddp_allreduce(B->comm, send, recv, n, dt, op);
  size_t in = n * cddp_dtype_size(dt), out = gather ? in * (size_t)B->world : in;
  char *d = B->dev->alloc(in + out);
  if (!d) return cddp__fail(CDDP_SYSTEM, "out of GPU memory for %zu bytes", in + out);
  B->dev->to_device(d, send, in);
  cddp_result_t r = gather ? cddp_allgather(B->comm, d, d + in, n, dt) : cddp_allreduce(B->comm, d, d + in, n, dt, op);
  if (r == CDDP_OK) B->dev->to_host(recv, d + in, out);
  B->dev->release(d);
  return r;
}

/* Starts (req != NULL) or runs one collective; n is the element count the call takes
 * (the whole message for allreduce/broadcast, one rank's block for allgather/reduce_scatter). */
static cddp_result_t collective(bench_t *B, size_t n, cddp_request_t **req) {
  const bench_opts_t *o = &B->o;
  if (B->dev) return staged_allreduce(B, n); /* parse allows it for blocking allreduce only */
  switch (o->coll) {
    case BENCH_ALLREDUCE:
      return req ? cddp_iallreduce(B->comm, B->a, B->a, n, o->dt, o->op, req)
                 : cddp_allreduce(B->comm, B->a, B->a, n, o->dt, o->op);
    case BENCH_ALLGATHER:
      return req ? cddp_iallgather(B->comm, B->a, B->b, n, o->dt, req)
                 : cddp_allgather(B->comm, B->a, B->b, n, o->dt);
    case BENCH_REDUCE_SCATTER:
      return req ? cddp_ireduce_scatter(B->comm, B->a, B->b, n, o->dt, o->op, req)
                 : cddp_reduce_scatter(B->comm, B->a, B->b, n, o->dt, o->op);
    case BENCH_BROADCAST:
      return req ? cddp_ibroadcast(B->comm, B->a, n, o->dt, o->root, req)
                 : cddp_broadcast(B->comm, B->a, n, o->dt, o->root);
    default: return CDDP_INVALID_ARG;
  }
}

/* iters back to back: blocking calls, or (--blocking 0) all started, then all waited for. */
static cddp_result_t iterate(bench_t *B, size_t n, long iters) {
  if (B->o.blocking) {
    for (long i = 0; i < iters; i++) CDDP_CHECK(collective(B, n, NULL));
    return CDDP_OK;
  }
  cddp_result_t r = CDDP_OK;
  long started = 0;
  for (; started < iters; started++)
    if ((r = collective(B, n, &B->reqs[started])) != CDDP_OK) break;
  for (long i = 0; i < started; i++) {
    cddp_result_t w = cddp_wait(B->reqs[i]);
    if (r == CDDP_OK) r = w;
  }
  return r;
}

/* Fills the rank's pattern, runs the collective once, counts this rank's wrong elements. */
static cddp_result_t check(bench_t *B, size_t n, size_t *wrong) {
  const bench_opts_t *o = &B->o;
  size_t esz = B->esz, W = (size_t)B->world;
  *wrong = 0;
  switch (o->coll) {
    case BENCH_ALLREDUCE:
      cddp__bench_fill(B->a, n, o->dt, B->rank, 0, B->mod);
      if (B->dev) B->dev->to_device(B->dev_a, B->a, n * esz), cddp__bench_fill_value(B->a, n, o->dt, 0);
      CDDP_CHECK(iterate(B, n, 1));
      if (B->dev) B->dev->to_host(B->a, B->dev_a, n * esz); /* what the GPU holds */
      *wrong = cddp__bench_check_reduced(B->a, n, o->dt, o->op, B->world, 0, B->mod);
      break;
    case BENCH_REDUCE_SCATTER:
      cddp__bench_fill(B->a, n * W, o->dt, B->rank, 0, B->mod);
      cddp__bench_fill_value(B->b, n, o->dt, 0);
      CDDP_CHECK(iterate(B, n, 1));
      *wrong = cddp__bench_check_reduced(B->b, n, o->dt, o->op, B->world, (size_t)B->rank * n, B->mod);
      break;
    case BENCH_ALLGATHER:
      cddp__bench_fill(B->a, n, o->dt, B->rank, 0, B->mod);
      cddp__bench_fill_value(B->b, n * W, o->dt, 0);
      CDDP_CHECK(iterate(B, n, 1));
      for (size_t q = 0; q < W; q++)
        *wrong += cddp__bench_check_rank((char *)B->b + q * n * esz, n, o->dt, (int)q, 0, B->mod);
      break;
    case BENCH_BROADCAST:
      if (B->rank == o->root) cddp__bench_fill(B->a, n, o->dt, B->rank, 0, B->mod);
      else cddp__bench_fill_value(B->a, n, o->dt, 0);
      CDDP_CHECK(iterate(B, n, 1));
      *wrong = cddp__bench_check_rank(B->a, n, o->dt, o->root, 0, B->mod);
      break;
    default: break;
  }
  return CDDP_OK;
}

static double bus_factor(bench_coll_t c, int world) {
  if (c == BENCH_ALLREDUCE) return 2.0 * (world - 1) / world;
  if (c == BENCH_BROADCAST) return 1.0;
  return (double)(world - 1) / world;
}

/* --thp: the data on transparent huge pages (common/hugepages.h). */
static void *thp_alloc(size_t bytes) {
  int advised = 1;
  void *p = cddp__huge_alloc(bytes, &advised);
  if (p && !advised)
    CDDP_WARN("--thp: madvise(MADV_HUGEPAGE) failed (%s): 4 KiB pages", strerror(errno));
  return p;
}

/* Bytes of this process's anonymous memory on transparent huge pages (smaps_rollup), 0 if unknown. */
static size_t anon_huge_bytes(void) {
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  char line[256];
  size_t kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "AnonHugePages: %zu kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb << 10;
}

static cddp_result_t alloc(bench_t *B, size_t bytes, void **p) {
  if (B->dev) return (*p = B->dev->host_alloc(bytes ? bytes : 1)) ? CDDP_OK : CDDP_SYSTEM;
  if (B->o.zero_copy) return cddp_comm_mem_alloc(B->comm, bytes ? bytes : 1, p);
  *p = B->o.thp ? thp_alloc(bytes ? bytes : 1) : malloc(bytes ? bytes : 1);
  return *p ? CDDP_OK : CDDP_SYSTEM;
}
static void release(bench_t *B, void *p) {
  if (B->dev) B->dev->host_release(p);
  else if (B->o.zero_copy) cddp_comm_mem_free(B->comm, p);
  else free(p);
}

static void print_header(bench_t *B, const rank_id_t *ids) {
  const bench_opts_t *o = &B->o;
  int nhosts = 0;
  char hosts[256] = "";
  for (int r = 0; r < B->world; r++) {
    int seen = 0;
    for (int q = 0; q < r && !seen; q++) seen = !strcmp(ids[q].host, ids[r].host);
    if (seen) continue;
    nhosts++;
    size_t len = strlen(hosts);
    if (len + strlen(ids[r].host) + 6 < sizeof hosts)
      snprintf(hosts + len, sizeof hosts - len, "%s%s", len ? "," : "", ids[r].host);
    else if (len + 4 < sizeof hosts && !strstr(hosts, "..."))
      snprintf(hosts + len, sizeof hosts - len, ",...");
  }
  int inplace = o->coll == BENCH_ALLREDUCE || o->coll == BENCH_BROADCAST;
  printf("# cddp bench %s: %d ranks on %d host%s (%s), transport %s, algo %s, %s buffers, %s, %s\n",
         cddp__bench_coll_name(o->coll), B->world, nhosts, nhosts == 1 ? "" : "s", hosts,
         cddp_comm_transport(B->comm), o->algo >= 0 ? algo_name(o->algo) : cddp__knob_str(CDDP_KNOB_ALGO),
         B->nccl         ? "GPU memory (nccl, on the device buffers)"
         : B->dev        ? "GPU memory, staged through pinned host memory"
         : o->zero_copy  ? "zero-copy (cddp_comm_mem_alloc)"
         : o->thp        ? "ordinary (transparent huge pages)"
                         : "ordinary",
         inplace ? "in place" : "out of place",
         o->blocking ? "blocking" : "non-blocking (start all, then wait)");
  if (o->factor)
    printf("# minBytes %zu maxBytes %zu step: %ld(factor) warmup iters: %ld iters: %ld validation: %d\n",
           o->minbytes, o->maxbytes, o->factor, o->warmup, o->iters, o->check);
  else
    printf("# minBytes %zu maxBytes %zu step: %zu(bytes) warmup iters: %ld iters: %ld validation: %d\n",
           o->minbytes, o->maxbytes, o->stepbytes, o->warmup, o->iters, o->check);
  printf("#\n");
  for (int r = 0; r < B->world; r++) printf("#  Rank %3d Pid %7d on %10s\n", r, ids[r].pid, ids[r].host);
  printf("#\n");
  printf("# %10s %12s %8s %6s %6s %10s %7s %7s %6s\n", "size", "count", "type", "redop", "root", "time",
         "algbw", "busbw", "#wrong");
  printf("# %10s %12s %8s %6s %6s %10s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)",
         "(GB/s)", "");
  fflush(stdout);
}

static int fail_line(bench_t *B, const char *what, size_t bytes) {
  B->broken = 1;
  fprintf(stderr, "cddp bench: rank %d: %s (%zu bytes) failed: %s\n", B->rank, what, bytes,
          cddp_last_error()[0] ? cddp_last_error() : "unknown error");
  return 1;
}

/* The sizes, one row each. Returns the exit status. */
static int run_rows(bench_t *B) {
  const bench_opts_t *o = &B->o;
  int perblock = o->coll == BENCH_ALLGATHER || o->coll == BENCH_REDUCE_SCATTER;
  size_t W = (size_t)B->world, unit = B->esz * (perblock ? W : 1);
  double bw_sum = 0;
  int rows = 0;
  int64_t wrong_total = 0;
  for (size_t size = o->minbytes; size <= o->maxbytes;) {
    size_t total = size / unit * (perblock ? W : 1); /* elements in the whole message */
    size_t n = perblock ? total / W : total, bytes = total * B->esz;
    if (n > 0) {
      cddp__bench_fill_value(B->a, perblock && o->coll == BENCH_REDUCE_SCATTER ? total : n, o->dt, 0);
      if (B->b) cddp__bench_fill_value(B->b, o->coll == BENCH_ALLGATHER ? total : n, o->dt, 0);
      if (B->dev) B->dev->fill_zero(B->dev_a, bytes);
      if (iterate(B, n, o->warmup) != CDDP_OK) return fail_line(B, "warm-up", bytes);
      if (cddp_barrier(B->comm) != CDDP_OK) return fail_line(B, "barrier", bytes);
      uint64_t t0 = cddp__now_ns();
      if (iterate(B, n, o->iters) != CDDP_OK) return fail_line(B, cddp__bench_coll_name(o->coll), bytes);
      double t = (double)(cddp__now_ns() - t0) / 1e3 / (double)o->iters, tmax = 0;
      if (host_coll(B, 0, &t, &tmax, 1, CDDP_F64, CDDP_MAX) != CDDP_OK)
        return fail_line(B, "timing allreduce", bytes);
      size_t mine = 0;
      if (o->check && check(B, n, &mine) != CDDP_OK) return fail_line(B, "checked run", bytes);
      int64_t w = (int64_t)mine, wsum = 0;
      if (host_coll(B, 0, &w, &wsum, 1, CDDP_I64, CDDP_SUM) != CDDP_OK)
        return fail_line(B, "#wrong allreduce", bytes);
      wrong_total += wsum;
      double algbw = (double)bytes / tmax / 1e3, busbw = algbw * bus_factor(o->coll, B->world);
      bw_sum += busbw;
      rows++;
      if (B->rank == 0) {
        char wbuf[24] = "N/A";
        if (o->check) snprintf(wbuf, sizeof wbuf, "%lld", (long long)wsum);
        printf("  %10zu %12zu %8s %6s %6d %10.2f %7.2f %7.2f %6s\n", bytes, total, type_name(o->dt),
               op_name(o->op), o->coll == BENCH_BROADCAST ? o->root : -1, tmax, algbw, busbw, wbuf);
        fflush(stdout);
      }
    }
    size_t next = o->factor ? size * (size_t)o->factor : size + o->stepbytes;
    if (next <= size) break; /* -b 0 with a factor, or overflow */
    size = next;
  }
  if (B->rank == 0) {
    printf("# Out of bounds values : %lld %s\n", (long long)wrong_total, wrong_total ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %.4f\n#\n", rows ? bw_sum / rows : 0.0);
    fflush(stdout);
  }
  return wrong_total ? 1 : 0;
}

int cddp__cmd_bench(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "train")) return cddp__bench_sweep(argc - 1, argv + 1);
  bench_t B = {0};
  int rc = cddp__bench_parse(argc, argv, &B.o);
  if (rc) return rc == 1 ? 0 : 2;
  const bench_opts_t *o = &B.o;

  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  if (o->transport) cfg.transport = o->transport;
  if (o->backend) cfg.backend = o->backend;
  if (o->algo >= 0) cfg.algo = (cddp_algo_t)o->algo;
  cddp_env_t env;
  if (cddp_env_read(&env) != CDDP_OK) {
    fprintf(stderr, "cddp bench: %s\n", cddp_last_error());
    return 2;
  }
  if (o->coll == BENCH_BROADCAST && o->root >= env.world_size) {
    fprintf(stderr, "cddp bench: root %d is not a rank of this world of %d\n", o->root, env.world_size);
    return 2;
  }
  cddp_device_choice_t dc;
  if (o->device) { /* before the world: no GPU is one line and exit 2, not a collective failure */
    if (cddp__device_resolve(CDDP_DEVICE_CUDA, &dc) != CDDP_OK) {
      cddp_cuda_probe_t p;
      char why[200];
      cddp__cuda_probe(&p);
      if (p.status == CDDP_CUDA_OK) fprintf(stderr, "cddp bench: --device cuda: %s\n", cddp_last_error());
      else
        fprintf(stderr, "cddp bench: --device cuda: %s (use --device cpu)\n",
                cddp__cuda_why_not(&p, getenv("CUDA_VISIBLE_DEVICES"), why, sizeof why));
      return 2;
    }
    B.dev = cddp__device_ops(&dc);
    const char *be = o->backend ? o->backend : getenv("CDDP_BACKEND");
    B.nccl = be && !strcasecmp(be, "nccl");
    if (B.nccl && dc.emulated) { /* NCCL needs the real GPU; its staging is what the native path tests */
      fprintf(stderr, "cddp bench: --backend nccl needs a GPU: this is the emulated device (use --backend native)\n");
      return 2;
    }
  }
  cddp_world_t *W;
  if (cddp_world_join(&W, &cfg) != CDDP_OK) {
    fprintf(stderr, "cddp bench: %s\n", cddp_last_error());
    cddp_world_leave(W, 0);
    return 1;
  }
  B.rank = cddp_world_rank(W), B.world = cddp_world_size(W), B.comm = cddp_world_comm(W);
  CDDP_INFO(CDDP_SUB_BENCH, "bench %s: rank %d of %d, transport %s", cddp__bench_coll_name(o->coll), B.rank,
            B.world, cddp_comm_transport(B.comm));
  B.esz = cddp_dtype_size(o->dt);
  B.mod = cddp__bench_mod(o->dt, B.world);
  rc = 1;

  rank_id_t me = {.pid = (int32_t)getpid()}, *ids = calloc((size_t)B.world, sizeof *ids);
  gethostname(me.host, sizeof me.host - 1);
  if (!ids || host_coll(&B, 1, &me, ids, sizeof me / 4, CDDP_I32, CDDP_SUM) != CDDP_OK) {
    fail_line(&B, "host exchange", sizeof me);
    goto out;
  }
  /* buffers sized for the largest row; allgather/reduce_scatter keep a block and the whole */
  size_t maxb = o->maxbytes / B.esz * B.esz, blk = maxb / ((size_t)B.world * B.esz) * B.esz;
  size_t abytes = o->coll == BENCH_ALLGATHER ? blk : maxb, bbytes = o->coll == BENCH_REDUCE_SCATTER ? blk : maxb;
  int need_b = o->coll == BENCH_ALLGATHER || o->coll == BENCH_REDUCE_SCATTER;
  if (alloc(&B, abytes, &B.a) != CDDP_OK || (need_b && alloc(&B, bbytes, &B.b) != CDDP_OK)) {
    fail_line(&B, B.dev ? "pinned host_alloc" : o->zero_copy ? "cddp_comm_mem_alloc" : o->thp ? "posix_memalign (--thp)" : "malloc",
              abytes + bbytes);
    goto out;
  }
  if (B.dev && !(B.dev_a = B.dev->alloc(abytes))) {
    fail_line(&B, "device alloc", abytes);
    goto out;
  }
  if (!o->blocking && !(B.reqs = calloc((size_t)CDDP_MAX(o->iters, o->warmup) + 1, sizeof *B.reqs))) {
    fail_line(&B, "request array", 0);
    goto out;
  }
  if (B.rank == 0) print_header(&B, ids);
  rc = run_rows(&B);
  if (o->thp && B.rank == 0) { /* said, because the kernel may give 4 KiB pages all the same */
    size_t mine = abytes + (need_b ? bbytes : 0), huge = CDDP_MIN(anon_huge_bytes(), mine);
    printf("# --thp: %.1f of %.1f MiB of rank 0's buffers on huge pages\n", huge / 1048576.0, mine / 1048576.0);
  }
  if (!B.broken && cddp_barrier(B.comm) != CDDP_OK) rc = fail_line(&B, "final barrier", 0);
out:
  if (B.broken) cddp_comm_abort(B.comm);
  if (B.a) release(&B, B.a);
  if (B.dev_a) B.dev->release(B.dev_a);
  if (B.b) release(&B, B.b);
  cddp_world_leave(W, !B.broken);
  free(B.reqs);
  free(ids);
  return rc;
}

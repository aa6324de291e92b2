/* bench_opts.c - `cddp bench` flags, in nccl-tests' dialect (-b -e -f -i -w -n -c -d -o -r) plus cddp's own. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench/bench.h"

static const char *coll_names[BENCH_COLL_COUNT] = {"allreduce", "allgather", "reduce_scatter",
                                                   "broadcast"};

const char *cddp__bench_coll_name(bench_coll_t c) {
  return (unsigned)c < BENCH_COLL_COUNT ? coll_names[c] : "?";
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: cddp bench COLLECTIVE [options]   (COLLECTIVE: allreduce, allgather, reduce_scatter, broadcast)\n"
          "  -b, --minbytes N       smallest message, bytes; K, M, G suffixes (default 32M)\n"
          "  -e, --maxbytes N       largest message (default 32M)\n"
          "  -f, --stepfactor F     multiply the size by F between rows\n"
          "  -i, --stepbytes N      or add N between rows (default 1M)\n"
          "  -w, --warmup_iters N   untimed iterations per size (default 1)\n"
          "  -n, --iters N          timed iterations per size (default 20)\n"
          "  -c, --check 0|1        fill known values and count wrong elements on every rank (default 1)\n"
          "  -d, --datatype T       float, double, bfloat16, half, int32, int64 (nccl-tests and cddp names)\n"
          "  -o, --op OP            sum, avg, max, min (default sum)\n"
          "  -r, --root R           root rank of broadcast (default 0)\n"
          "  -z, --blocking 0|1     0: start all iterations, then wait for them (default 1)\n"
          "      --zero-copy        buffers from cddp_comm_mem_alloc (shared with the host's peers)\n"
          "      --thp              ordinary buffers on transparent huge pages (2 MiB-aligned, MADV_HUGEPAGE)\n"
          "      --backend B        native, mpi (under mpirun) or nccl (with --device cuda: the all-reduce\n"
          "                         on the GPU buffers, one GPU per rank) (default: CDDP_BACKEND)\n"
          "      --transport T      auto, shm, tcp or hier (default: CDDP_TRANSPORT)\n"
          "      --algo A           auto, ring or direct (default: CDDP_ALGO)\n"
          "      --device D         cpu or cuda: cuda keeps the data in GPU memory, staged through pinned\n"
          "                         host memory around each all-reduce (with --backend nccl: reduced on\n"
          "                         the GPU, no staging) (allreduce, blocking only)\n"
          "Rank, world and store come from the environment: run it under `cddp run`, torchrun-style\n"
          "variables, an srun step or mpirun. Rank 0 prints one line per size; the exit status is 1 if\n"
          "any element was wrong.\n");
}

static int __attribute__((format(printf, 1, 2))) bad(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "cddp bench: ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  usage(stderr);
  return 2;
}

/* "64M", "4K", "1G", "4096", "64MiB", "1MB": powers of 1024, like nccl-tests. */
static int parse_bytes(const char *s, size_t *out) {
  char *end;
  errno = 0;
  if (!isdigit((unsigned char)s[0])) return -1;
  unsigned long long v = strtoull(s, &end, 10), mul = 1;
  if (errno) return -1;
  switch (*end) {
    case 'K': case 'k': mul = 1ull << 10, end++; break;
    case 'M': case 'm': mul = 1ull << 20, end++; break;
    case 'G': case 'g': mul = 1ull << 30, end++; break;
    default: break;
  }
  if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end || v > (1ull << 50) / mul) return -1;
  *out = (size_t)(v * mul);
  return 0;
}

static int parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int parse_dtype(const char *s, cddp_dtype_t *dt) {
  static const struct { const char *name; cddp_dtype_t dt; } names[] = {
      {"float", CDDP_F32},    {"float32", CDDP_F32},   {"f32", CDDP_F32},    {"ncclFloat", CDDP_F32},
      {"ncclFloat32", CDDP_F32}, {"double", CDDP_F64}, {"float64", CDDP_F64}, {"f64", CDDP_F64},
      {"ncclDouble", CDDP_F64}, {"ncclFloat64", CDDP_F64}, {"bfloat16", CDDP_BF16}, {"bf16", CDDP_BF16},
      {"ncclBfloat16", CDDP_BF16}, {"int32", CDDP_I32}, {"int", CDDP_I32},   {"i32", CDDP_I32},
      {"ncclInt", CDDP_I32},  {"ncclInt32", CDDP_I32}, {"int64", CDDP_I64},  {"i64", CDDP_I64},
      {"ncclInt64", CDDP_I64}, {"half", CDDP_F16}, {"float16", CDDP_F16}, {"f16", CDDP_F16},
      {"fp16", CDDP_F16}, {"ncclHalf", CDDP_F16}, {"ncclFloat16", CDDP_F16},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcasecmp(s, names[i].name)) return *dt = names[i].dt, 0;
  return -1;
}

static int parse_op(const char *s, cddp_redop_t *op) {
  static const char *names[] = {"sum", "avg", "max", "min"};
  const char *n = strncasecmp(s, "nccl", 4) ? s : s + 4;
  for (int i = 0; i < 4; i++)
    if (!strcasecmp(n, names[i])) return *op = (cddp_redop_t)i, 0;
  return -1;
}

static int parse_coll(const char *s, bench_coll_t *c) {
  static const struct { const char *name; bench_coll_t c; } names[] = {
      {"allreduce", BENCH_ALLREDUCE},   {"all_reduce", BENCH_ALLREDUCE},
      {"all_reduce_perf", BENCH_ALLREDUCE}, {"allgather", BENCH_ALLGATHER},
      {"all_gather", BENCH_ALLGATHER},  {"all_gather_perf", BENCH_ALLGATHER},
      {"reduce_scatter", BENCH_REDUCE_SCATTER}, {"reducescatter", BENCH_REDUCE_SCATTER},
      {"reduce_scatter_perf", BENCH_REDUCE_SCATTER}, {"broadcast", BENCH_BROADCAST},
      {"bcast", BENCH_BROADCAST},       {"broadcast_perf", BENCH_BROADCAST},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(s, names[i].name)) return *c = names[i].c, 0;
  return -1;
}

enum { OPT_ZERO_COPY = 1000, OPT_THP, OPT_TRANSPORT, OPT_ALGO, OPT_BACKEND, OPT_HELP, OPT_DEVICE };

/* The long options that take a value, by name for their messages; NULL for any other. */
static const char *valued_long(int c) {
  return c == OPT_TRANSPORT ? "transport" : c == OPT_ALGO ? "algo" : c == OPT_BACKEND ? "backend"
         : c == OPT_DEVICE  ? "device"
                            : NULL;
}

int cddp__bench_parse(int argc, char **argv, bench_opts_t *o) {
  static const struct option longs[] = {
      {"minbytes", required_argument, 0, 'b'},     {"maxbytes", required_argument, 0, 'e'},
      {"stepfactor", required_argument, 0, 'f'},   {"stepbytes", required_argument, 0, 'i'},
      {"warmup_iters", required_argument, 0, 'w'}, {"iters", required_argument, 0, 'n'},
      {"check", required_argument, 0, 'c'},        {"datatype", required_argument, 0, 'd'},
      {"op", required_argument, 0, 'o'},           {"root", required_argument, 0, 'r'},
      {"blocking", required_argument, 0, 'z'},     {"zero-copy", no_argument, 0, OPT_ZERO_COPY},
      {"zero_copy", no_argument, 0, OPT_ZERO_COPY}, {"transport", required_argument, 0, OPT_TRANSPORT},
      {"algo", required_argument, 0, OPT_ALGO},    {"help", no_argument, 0, OPT_HELP},
      {"backend", required_argument, 0, OPT_BACKEND}, {"thp", no_argument, 0, OPT_THP},
      {"device", required_argument, 0, OPT_DEVICE},
      {0, 0, 0, 0},
  };
  *o = (bench_opts_t){.coll = BENCH_COLL_COUNT, .minbytes = 32u << 20, .maxbytes = 32u << 20,
                      .stepbytes = 1u << 20, .warmup = 1, .iters = 20, .check = 1, .dt = CDDP_F32,
                      .op = CDDP_SUM, .algo = -1, .blocking = 1};
  int have_e = 0;
  long v;
  opterr = 0;
  optind = 0; /* glibc: start afresh; options and the collective's name may come in any order */
  for (;;) {
    int c = getopt_long(argc, argv, "b:e:f:i:w:n:c:d:o:r:z:h", longs, NULL);
    if (c == -1) break;
    char flag[32]; /* how the message names the option */
    if (valued_long(c)) snprintf(flag, sizeof flag, "--%s", valued_long(c));
    else snprintf(flag, sizeof flag, "-%c", c == '?' ? optopt : c);
    switch (c) {
      case 'b':
        if (parse_bytes(optarg, &o->minbytes)) return bad("bad size '%s' for %s (e.g. 4K, 64M, 1G)", optarg, flag);
        break;
      case 'e':
        if (parse_bytes(optarg, &o->maxbytes)) return bad("bad size '%s' for %s (e.g. 4K, 64M, 1G)", optarg, flag);
        have_e = 1;
        break;
      case 'f':
        if (parse_long(optarg, 2, 1 << 20, &o->factor)) return bad("bad factor '%s' for %s (an integer >= 2)", optarg, flag);
        break;
      case 'i':
        if (parse_bytes(optarg, &o->stepbytes) || !o->stepbytes) return bad("bad step '%s' for %s (bytes > 0)", optarg, flag);
        break;
      case 'w':
        if (parse_long(optarg, 0, 1000000, &o->warmup)) return bad("bad warmup count '%s' for %s (0 to 1000000)", optarg, flag);
        break;
      case 'n':
        if (parse_long(optarg, 1, 10000000, &o->iters)) return bad("bad iteration count '%s' for %s (1 to 10000000)", optarg, flag);
        break;
      case 'c':
        if (parse_long(optarg, 0, 1, &v)) return bad("bad value '%s' for %s (0 or 1)", optarg, flag);
        o->check = (int)v;
        break;
      case 'z':
        if (parse_long(optarg, 0, 1, &v)) return bad("bad value '%s' for %s (0 or 1)", optarg, flag);
        o->blocking = (int)v;
        break;
      case 'd':
        if (parse_dtype(optarg, &o->dt))
          return bad("unsupported datatype '%s' for %s (float, double, bfloat16, half, int32, int64)", optarg, flag);
        break;
      case 'o':
        if (parse_op(optarg, &o->op)) return bad("unsupported op '%s' for %s (sum, avg, max, min)", optarg, flag);
        break;
      case 'r':
        if (parse_long(optarg, 0, 1 << 30, &v)) return bad("bad root '%s' for %s", optarg, flag);
        o->root = (int)v;
        break;
      case OPT_ZERO_COPY: o->zero_copy = 1; break;
      case OPT_THP: o->thp = 1; break;
      case OPT_TRANSPORT:
        if (strcmp(optarg, "auto") && strcmp(optarg, "shm") && strcmp(optarg, "tcp") && strcmp(optarg, "hier"))
          return bad("bad transport '%s' for %s (auto, shm, tcp or hier)", optarg, flag);
        o->transport = optarg;
        break;
      case OPT_BACKEND:
        if (strcmp(optarg, "native") && strcmp(optarg, "mpi") && strcmp(optarg, "nccl"))
          return bad("bad backend '%s' for %s (native, mpi, or nccl with --device cuda)", optarg, flag);
        o->backend = optarg;
        break;
      case OPT_DEVICE:
        if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) return bad("bad device '%s' for %s (cpu or cuda)", optarg, flag);
        o->device = !strcmp(optarg, "cuda");
        break;
      case OPT_ALGO:
        if (!strcmp(optarg, "auto")) o->algo = CDDP_ALGO_AUTO;
        else if (!strcmp(optarg, "ring")) o->algo = CDDP_ALGO_RING;
        else if (!strcmp(optarg, "direct")) o->algo = CDDP_ALGO_DIRECT;
        else return bad("bad algorithm '%s' for %s (auto, ring or direct)", optarg, flag);
        break;
      case 'h':
      case OPT_HELP: usage(stdout); return 1;
      default:
        if (valued_long(optopt)) return bad("option --%s needs a value", valued_long(optopt));
        if (optopt > 0 && optopt < 128 && strchr("befiwncdorz", optopt)) return bad("option %s needs a value", flag);
        return bad("unknown option '%s'", optopt ? flag : argv[optind - 1]);
    }
  }
  if (optind >= argc) return bad("which collective? (allreduce, allgather, reduce_scatter, broadcast)");
  if (parse_coll(argv[optind], &o->coll))
    return bad("unknown collective '%s' (allreduce, allgather, reduce_scatter, broadcast)", argv[optind]);
  if (optind + 1 < argc) return bad("unexpected argument '%s'", argv[optind + 1]);
  if (!have_e && o->maxbytes < o->minbytes) o->maxbytes = o->minbytes;
  if (o->maxbytes < o->minbytes) return bad("-e %zu is below -b %zu", o->maxbytes, o->minbytes);
  if (o->thp && o->zero_copy) return bad("--thp and --zero-copy exclude each other (one kind of buffer)");
  if (o->backend && !strcmp(o->backend, "nccl") && !o->device) /* NCCL's buffers are the GPU's */
    return bad("--backend nccl runs on GPU buffers: add --device cuda (allreduce, blocking)");
  if (o->device && (o->coll != BENCH_ALLREDUCE || !o->blocking || o->thp || o->zero_copy))
    return bad("--device cuda runs allreduce only, blocking, on its own pinned staging (no --thp, --zero-copy)");
  if (o->check && o->coll != BENCH_ALLREDUCE && o->coll != BENCH_REDUCE_SCATTER && o->op != CDDP_SUM)
    o->op = CDDP_SUM; /* no reduction: the op column says sum, like nccl-tests */
  return 0;
}

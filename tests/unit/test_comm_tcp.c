/* test_comm_tcp.c - the TCP transport driven through its table, ranks as threads over one in-memory store. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/reduce.h"
#include "comm/tcp.h"
#include "test_comm_tcp_harness.h"

/* ---- data and references ---- */

static float bf16_f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static uint16_t f_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static void put(void *b, cddp_dtype_t dt, size_t i, double v) {
  switch (dt) {
    case CDDP_F32: ((float *)b)[i] = (float)v; break;
    case CDDP_F64: ((double *)b)[i] = v; break;
    case CDDP_BF16: ((uint16_t *)b)[i] = f_bf16((float)v); break;
    case CDDP_F16: ((uint16_t *)b)[i] = cddp__f32_to_f16((float)v); break;
    case CDDP_I32: ((int32_t *)b)[i] = (int32_t)v; break;
    default: ((int64_t *)b)[i] = (int64_t)v; break;
  }
}
static double get(const void *b, cddp_dtype_t dt, size_t i) {
  switch (dt) {
    case CDDP_F32: return ((const float *)b)[i];
    case CDDP_F64: return ((const double *)b)[i];
    case CDDP_BF16: return bf16_f(((const uint16_t *)b)[i]);
    case CDDP_F16: return cddp__f16_to_f32(((const uint16_t *)b)[i]);
    case CDDP_I32: return ((const int32_t *)b)[i];
    default: return (double)((const int64_t *)b)[i];
  }
}
static int is_int(cddp_dtype_t dt) { return dt == CDDP_I32 || dt == CDDP_I64; }
/* Inputs whose float sums depend on the order of addition, so bit equality across ranks means something. */
static double gen(cddp_dtype_t dt, int r, size_t i) {
  if (is_int(dt)) return (double)((int64_t)((r * 7919 + i * 104729) % 2001) - 1000) * (dt == CDDP_I64 ? 1e9 : 1);
  return sin(r * 7919.0 + (double)i * 0.618) * 100.0;
}
static void fill(void *b, cddp_dtype_t dt, int r, size_t off, size_t n) {
  for (size_t i = 0; i < n; i++) put(b, dt, i, gen(dt, r, off + i));
}
/* The exact reduction of element i over world ranks (inputs as the dtype holds them). */
static double ref(cddp_dtype_t dt, cddp_redop_t op, int world, size_t i, double *sumabs) {
  double acc = 0;
  *sumabs = 0;
  char one[8];
  for (int r = 0; r < world; r++) {
    put(one, dt, 0, gen(dt, r, i));
    double v = get(one, dt, 0);
    *sumabs += fabs(v);
    if (r == 0) acc = v;
    else if (op == CDDP_MAX) acc = v > acc ? v : acc;
    else if (op == CDDP_MIN) acc = v < acc ? v : acc;
    else acc += v;
  }
  if (op == CDDP_AVG) acc = is_int(dt) ? (double)((int64_t)acc / world) : acc / world;
  return acc;
}
/* Largest difference against the reference over n elements starting at global index off. */
static void check_ref(const void *got, cddp_dtype_t dt, cddp_redop_t op, int world, size_t off, size_t n,
                      const char *what) {
  double worst = 0, tol_at = 0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    double sa, want = ref(dt, op, world, off + i, &sa), g = get(got, dt, i), d = fabs(g - want);
    /* bf16 and f16 partial sums cross the wire as such: one rounding per step */
    double tol = is_int(dt) ? 0 : dt == CDDP_BF16 ? world * sa / 256 : dt == CDDP_F16 ? world * sa / 2048
               : dt == CDDP_F32 ? 1e-3 : 1e-9;
    if (d - tol > worst - tol_at || i == 0) worst = d, tol_at = tol, at = i;
  }
  if (worst > tol_at)
    TEST_FAIL("%s %s %s world %d n %zu: largest difference %.6g at element %zu (got %.9g, want %.9g)", what,
              cddp_dtype_name(dt), cddp_redop_name(op), world, n, worst, off + at, get(got, dt, at),
              ref(dt, op, world, off + at, &tol_at));
}

/* After a collective: every rank's output must be the same bytes. */
static void same_bits(trank_t *tr, void *out, size_t bytes, const char *what) {
  job_t *j = tr->job;
  j->out[tr->rank] = out;
  if (tr->rank == 0) j->out_bytes = bytes;
  pthread_barrier_wait(&j->bar);
  if (tr->rank == 0)
    for (int r = 1; r < j->world; r++)
      if (memcmp(j->out[0], j->out[r], bytes) != 0) TEST_FAIL("%s: rank %d differs from rank 0 in its bits", what, r);
  pthread_barrier_wait(&j->bar);
}

/* ---- the matrix: every collective x dtype x op, in-place and not, both algorithms ---- */

static const size_t counts[] = {1, 7, 4097, 20000};

static void matrix_body(trank_t *tr) {
  int w = tr->job->world, r = tr->rank;
  const cddp_algo_t algos[] = {CDDP_ALGO_AUTO, CDDP_ALGO_RING, CDDP_ALGO_DIRECT};
  for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
    size_t n = counts[ci];
    for (int dt = 0; dt < CDDP_DTYPE_COUNT; dt++) {
      size_t es = cddp_dtype_size((cddp_dtype_t)dt);
      char *send = malloc(n * es * (size_t)w + 64), *recv = malloc(n * es * (size_t)w + 64);
      for (int op = 0; op < CDDP_REDOP_COUNT; op++)
        for (int ai = 0; ai < 3; ai++)
          for (int inplace = 0; inplace < 2; inplace++) {
            if ((ai > 0 || inplace) && (op == CDDP_MAX || op == CDDP_MIN) && dt != CDDP_F32) continue;
            char what[96];
            snprintf(what, sizeof what, "allreduce algo %d %s", ai, inplace ? "in-place" : "out-of-place");
            fill(send, (cddp_dtype_t)dt, r, 0, n);
            void *dst = inplace ? send : recv;
            CHECK_OK(coll(tr, CDDP__ALLREDUCE, send, dst, n, (cddp_dtype_t)dt, (cddp_redop_t)op, 0, algos[ai]));
            check_ref(dst, (cddp_dtype_t)dt, (cddp_redop_t)op, w, 0, n, what);
            same_bits(tr, dst, n * es, what);

            /* reduce_scatter: rank r's block of a world * n send buffer */
            snprintf(what, sizeof what, "reduce_scatter algo %d %s", ai, inplace ? "in-place" : "out-of-place");
            for (int b = 0; b < w; b++) fill(send + (size_t)b * n * es, (cddp_dtype_t)dt, r, (size_t)b * n, n);
            dst = inplace ? send + (size_t)r * n * es : recv;
            CHECK_OK(coll(tr, CDDP__REDUCE_SCATTER, send, dst, n, (cddp_dtype_t)dt, (cddp_redop_t)op, 0, algos[ai]));
            check_ref(dst, (cddp_dtype_t)dt, (cddp_redop_t)op, w, (size_t)r * n, n, what);
          }
      /* allgather and broadcast move bytes: check them exactly */
      for (int inplace = 0; inplace < 2; inplace++) {
        fill(send, (cddp_dtype_t)dt, r, 0, n);
        if (inplace) memcpy(recv + (size_t)r * n * es, send, n * es);
        CHECK_OK(coll(tr, CDDP__ALLGATHER, inplace ? recv + (size_t)r * n * es : send, recv, n,
                      (cddp_dtype_t)dt, CDDP_SUM, 0, CDDP_ALGO_AUTO));
        for (int b = 0; b < w; b++) {
          fill(send, (cddp_dtype_t)dt, b, 0, n);
          if (memcmp(send, recv + (size_t)b * n * es, n * es) != 0)
            TEST_FAIL("allgather %s n %zu world %d: block of rank %d wrong on rank %d", cddp_dtype_name((cddp_dtype_t)dt), n, w, b, r);
        }
      }
      for (int root = 0; root < w; root += w - 1 > 0 ? w - 1 : 1) {
        if (r == root) fill(recv, (cddp_dtype_t)dt, root, 0, n);
        else memset(recv, 0x5a, n * es);
        CHECK_OK(coll(tr, CDDP__BROADCAST, recv, recv, n, (cddp_dtype_t)dt, CDDP_SUM, root, CDDP_ALGO_AUTO));
        fill(send, (cddp_dtype_t)dt, root, 0, n);
        if (memcmp(send, recv, n * es) != 0)
          TEST_FAIL("broadcast %s n %zu world %d root %d: wrong on rank %d", cddp_dtype_name((cddp_dtype_t)dt), n, w, root, r);
      }
      free(send);
      free(recv);
    }
  }
  CHECK_OK(coll(tr, CDDP__BARRIER, NULL, NULL, 0, CDDP_I32, CDDP_SUM, 0, CDDP_ALGO_AUTO));
}

TEST_TIMEOUT(tcp_matrix_world2, 120) {
  harness_nstreams = 1;
  run_job(2, matrix_body, NULL);
}
TEST_TIMEOUT(tcp_matrix_world3, 120) {
  harness_nstreams = 3;
  setenv("CDDP_TCP_CHUNK_BYTES", "4096", 1); /* many chunks per block: the pipeline, striped */
  run_job(3, matrix_body, NULL);
  unsetenv("CDDP_TCP_CHUNK_BYTES");
}
TEST_TIMEOUT(tcp_matrix_world4, 120) { run_job(4, matrix_body, NULL); }

/* ---- f16: f32 accumulation, one rounding per hop, bit for bit ---- */

static float h2f(uint16_t h) { return cddp__f16_to_f32(h); }
static uint16_t hop(uint16_t a, uint16_t b, float scale) { /* what one hop writes to the wire */
  float acc = h2f(a) + h2f(b);
  if (scale != 1.0f) acc *= scale;
  return cddp__f32_to_f16(acc);
}
static uint16_t hx(int r, size_t i) { return cddp__f32_to_f16((float)gen(CDDP_F32, r, i)); }

/* Ring: block b's partial starts at rank b+1 and gathers b+2, ..., b, rounded at each hop. */
static uint16_t ring_ref(int w, size_t i, int b, float scale) {
  uint16_t p = hx((b + 1) % w, i);
  for (int j = 2; j <= w; j++) p = hop(p, hx((b + j) % w, i), j == w ? scale : 1.0f);
  return p;
}
/* Recursive doubling: ranks past the largest power of two fold in first, then butterflies
 * with the lower rank's data first. */
static uint16_t rd_ref(int w, size_t i, float scale) {
  int p2 = 1;
  while (p2 * 2 <= w) p2 *= 2;
  uint16_t v[8];
  for (int r = 0; r < p2; r++) v[r] = r + p2 < w ? hop(hx(r, i), hx(r + p2, i), 1.0f) : hx(r, i);
  for (int mask = 1; mask < p2; mask <<= 1) {
    uint16_t nv[8];
    for (int r = 0; r < p2; r++) {
      int lo = r < (r ^ mask) ? r : r ^ mask;
      nv[r] = hop(v[lo], v[lo ^ mask], mask * 2 == p2 ? scale : 1.0f);
    }
    memcpy(v, nv, sizeof v);
  }
  return v[0];
}

static void f16_hops_body(trank_t *tr) {
  int w = tr->job->world, r = tr->rank;
  enum { N = 4097 };
  uint16_t *buf = malloc(N * 2 * (size_t)w), *want = malloc(N * 2 * (size_t)w);
  size_t differs = 0; /* elements where rounding per hop differs from rounding once */
  for (int op = CDDP_SUM; op <= CDDP_AVG; op++)
    for (int direct = 0; direct < 2; direct++) {
      float scale = op == CDDP_AVG ? (float)(1.0 / w) : 1.0f;
      cddp_algo_t algo = direct ? CDDP_ALGO_DIRECT : CDDP_ALGO_RING;
      for (size_t i = 0; i < N; i++) {
        size_t off, len;
        int b = 0;
        for (; b < w; b++) {
          cddp__tcp_split(N, (size_t)w, (size_t)b, &off, &len);
          if (i < off + len) break;
        }
        buf[i] = hx(r, i);
        want[i] = direct ? rd_ref(w, i, scale) : ring_ref(w, i, b, scale);
        double once = 0;
        for (int k = 0; k < w; k++) once += h2f(hx(k, i));
        differs += want[i] != cddp__f32_to_f16((float)once * scale);
      }
      CHECK_OK(coll(tr, CDDP__ALLREDUCE, buf, buf, N, CDDP_F16, (cddp_redop_t)op, 0, algo));
      for (size_t i = 0; i < N; i++)
        if (buf[i] != want[i])
          TEST_FAIL("f16 %s allreduce %s world %d rank %d: element %zu is %#x (%.6g), want %#x (%.6g)",
                    cddp_redop_name((cddp_redop_t)op), direct ? "direct" : "ring", w, r, i, buf[i], h2f(buf[i]),
                    want[i], h2f(want[i]));
      same_bits(tr, buf, N * 2, "f16 allreduce");
      /* reduce_scatter: blocks of N, rank r keeps block r */
      for (size_t i = 0; i < N * (size_t)w; i++) buf[i] = hx(r, i);
      CHECK_OK(coll(tr, CDDP__REDUCE_SCATTER, buf, buf + (size_t)r * N, N, CDDP_F16, (cddp_redop_t)op, 0, algo));
      for (size_t i = 0; i < N; i++) {
        size_t g = (size_t)r * N + i;
        uint16_t ref = direct ? rd_ref(w, g, scale) : ring_ref(w, g, r, scale);
        if (buf[g] != ref)
          TEST_FAIL("f16 %s reduce_scatter %s world %d rank %d: element %zu is %#x, want %#x",
                    cddp_redop_name((cddp_redop_t)op), direct ? "direct" : "ring", w, r, i, buf[g], ref);
      }
    }
  if (w > 2) CHECK(differs > 100); /* the reference really tells the two apart */
  free(buf), free(want);
}

TEST(tcp_f16_rounds_once_per_hop_world2) { harness_nstreams = 1; run_job(2, f16_hops_body, NULL); }
TEST(tcp_f16_rounds_once_per_hop_world3) {
  setenv("CDDP_TCP_CHUNK_BYTES", "4096", 1);
  run_job(3, f16_hops_body, NULL);
  unsetenv("CDDP_TCP_CHUNK_BYTES");
}
TEST(tcp_f16_rounds_once_per_hop_world4) { run_job(4, f16_hops_body, NULL); }

/* ---- congestion control: reno within one host, the system's (or the knob's) across ---- */

static void cc_body(trank_t *tr) {
  const char *want = tr->job->arg;
  cddp__tcp_t *t = tr->st;
  int checked = 0;
  for (int i = 0; i < t->world * t->nstreams; i++) {
    if (t->fds[i] < 0) continue;
    char got[32] = "";
    socklen_t len = sizeof got - 1;
    CHECK(getsockopt(t->fds[i], IPPROTO_TCP, TCP_CONGESTION, got, &len) == 0);
    if (strcmp(got, want) != 0) TEST_FAIL("rank %d fd %d: congestion control %s, want %s", tr->rank, i, got, want);
    checked++;
  }
  CHECK(checked > 0);
  float v[1000];
  for (int i = 0; i < 1000; i++) v[i] = (float)(tr->rank + i);
  CHECK_OK(coll(tr, CDDP__ALLREDUCE, v, v, 1000, CDDP_F32, CDDP_SUM, 0, CDDP_ALGO_RING));
  for (int i = 0; i < 1000; i++) CHECK(v[i] == (float)(2 * i + 1));
}

static void cc_job(int all_local, const char *want) {
  job_t *j = calloc(1, sizeof *j);
  if (!j) abort();
  j->nstreams = 1, j->all_local = all_local;
  job_start(j, 2, cc_body, (void *)want);
  job_join(j);
  for (int r = 0; r < 2; r++) CHECK_OK(j->r[r].init_result);
  free(j);
}

static int read_line(const char *path, char *buf, size_t size) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int ok = fgets(buf, (int)size, f) != NULL;
  fclose(f);
  buf[strcspn(buf, "\n")] = '\0';
  return ok ? 0 : -1;
}

TEST_TIMEOUT(tcp_congestion_control, 60) {
  char sys[64], avail[256];
  unsetenv("CDDP_TCP_CONGESTION");
  cc_job(1, "reno"); /* one host: reno, whatever the system's default */
  if (read_line("/proc/sys/net/ipv4/tcp_congestion_control", sys, sizeof sys) == 0)
    cc_job(0, sys); /* across hosts: left alone */
  setenv("CDDP_TCP_CONGESTION", "system", 1);
  if (read_line("/proc/sys/net/ipv4/tcp_congestion_control", sys, sizeof sys) == 0) cc_job(1, sys);
  char allowed[256] = "";
  (void)read_line("/proc/sys/net/ipv4/tcp_allowed_congestion_control", allowed, sizeof allowed);
  if (read_line("/proc/sys/net/ipv4/tcp_available_congestion_control", avail, sizeof avail) == 0 &&
      strstr(avail, "cubic") && (geteuid() == 0 || strstr(allowed, "cubic"))) {
    setenv("CDDP_TCP_CONGESTION", "cubic", 1);
    cc_job(0, "cubic"); /* explicit: everywhere (root, or cubic in the allowed list) */
  }
  setenv("CDDP_TCP_CONGESTION", "no-such-algorithm", 1); /* a WARN, then the system's */
  if (read_line("/proc/sys/net/ipv4/tcp_congestion_control", sys, sizeof sys) == 0) cc_job(1, sys);
  unsetenv("CDDP_TCP_CONGESTION");
}

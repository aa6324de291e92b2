/* tcp.c - the TCP transport: state, failure reporting, and the collectives' algorithms. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/reduce.h"
#include "comm/tcp.h"
#include "common/check.h"
#include "common/knobs.h"

#define SLOT_PAD 4096

/* ---- failure: first cause to the store, shut every connection, record the message ---- */

static void shut_all(cddp__tcp_t *t) {
  t->failed = 1;
  for (int i = 0; i < t->world * t->nstreams; i++)
    if (t->fds[i] >= 0) shutdown(t->fds[i], SHUT_RDWR);
}

cddp_result_t cddp__tcp_fail(cddp__tcp_t *t, cddp_result_t code, const char *fmt, ...) {
  char msg[320], mine[448], full[800], me[128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(mine, sizeof mine, "%s (seen by %s)", msg, cddp__peer_name(t->ctx, t->rank, me, sizeof me));
  snprintf(full, sizeof full, "%s", msg);
  void *cur = NULL;
  size_t curlen = 0;
  /* the first rank to see a failure names it for everyone: later ones only see the
   * connections that rank closed, so they append what it saw */
  if (cddp_store_compare_set(t->ctx->store, "tcp/failed", NULL, 0, mine, strlen(mine) + 1, &cur,
                             &curlen) == CDDP_OK &&
      cur && strcmp((const char *)cur, mine) != 0)
    snprintf(full, sizeof full, "%s; first failure: %.300s", msg, (const char *)cur);
  free(cur);
  shut_all(t);
  return cddp__fail(code, "%s", full);
}

cddp_result_t cddp__tcp_desync(cddp__tcp_t *t, const cddp__fp_t *theirs, int peer) {
  char name[128], msg[600];
  cddp_result_t r = cddp__desync_fail(t->ctx->desync_store, &t->fp, theirs,
                                      cddp__peer_name(t->ctx, peer, name, sizeof name));
  snprintf(msg, sizeof msg, "%s", cddp_last_error());
  shut_all(t); /* after the line is in the store: the peers that see the sockets close find it there */
  return cddp__fail(r, "%s", msg);
}

/* ---- transfers over one flat buffer: recursive doubling steps, broadcast chain ---- */

typedef struct flat {
  const char *src;
  char *dst;
  size_t count, es;
} flat_t;

static void flat_send(const cddp__tcp_xfer_t *x, int s, size_t k, const char **p, size_t *len) {
  const flat_t *f = x->arg;
  size_t off, n;
  cddp__tcp_split(f->count, x->K, k, &off, &n);
  *p = f->src + off * f->es, *len = n * f->es;
}

static void flat_recv(const cddp__tcp_xfer_t *x, int s, size_t k, cddp__tcp_rslot_t *slot) {
  const flat_t *f = x->arg;
  size_t off, n;
  cddp__tcp_split(f->count, x->K, k, &off, &n);
  *slot = (cddp__tcp_rslot_t){.dst = f->dst + off * f->es, .len = n * f->es, .scale = 1.0};
}

/* Sends count elements of src to `to` while receiving count elements from `from` into dst. */
static cddp_result_t exchange(cddp__tcp_t *t, const char *what, int to, const void *src, int from,
                              void *dst, size_t count, cddp_dtype_t dt, int dep) {
  flat_t f = {src, dst, count, cddp_dtype_size(dt)};
  cddp__tcp_xfer_t x = {what, to, from, to >= 0, from >= 0, cddp__tcp_nchunks(count * f.es, t->chunk_bytes),
                        dep, dt, CDDP_SUM, flat_send, flat_recv, &f};
  return cddp__tcp_xfer_run(t, &x);
}

static cddp_result_t scratch(cddp__tcp_t *t, size_t bytes) {
  if (t->scratch_cap >= bytes) return CDDP_OK;
  free(t->scratch);
  t->scratch = NULL, t->scratch_cap = 0;
  size_t cap = (bytes + 4095) & ~(size_t)4095;
  if (posix_memalign((void **)&t->scratch, 4096, cap + 2048) != 0)
    return cddp__fail(CDDP_SYSTEM, "out of memory for %zu bytes of TCP scratch", bytes);
  t->scratch_cap = cap;
  return CDDP_OK;
}
/* offset 2 KiB into the allocation so scratch never shares a 4 KiB offset with user buffers */
#define SCRATCH(t) ((t)->scratch + 2048)

/* Latency allreduce: recursive doubling on the largest power of two, the other ranks
 * folded in first and handed the result last. Every combination puts the lower block
 * of ranks first, so every rank computes the same bits. */
static cddp_result_t allreduce_rd(cddp__tcp_t *t, const void *send, void *recv, size_t count,
                                  cddp_dtype_t dt, cddp_redop_t op) {
  int r = t->rank, n = t->world, p2 = cddp__tcp_pow2_floor(n), rem = n - p2;
  size_t bytes = count * cddp_dtype_size(dt);
  double avg = op == CDDP_AVG ? 1.0 / n : 1.0;
  if (send != recv) memcpy(recv, send, bytes);
  if (r >= p2) /* hand my data to r - p2, get the result back */
    return exchange(t, "allreduce (fold)", r - p2, recv, r - p2, recv, count, dt, 0);
  CDDP_CHECK(scratch(t, bytes));
  char *tmp = SCRATCH(t);
  if (r < rem) {
    CDDP_CHECK(exchange(t, "allreduce (fold)", -1, NULL, r + p2, tmp, count, dt, 0));
    cddp__reduce2(recv, recv, tmp, count, dt, op, 1.0);
  }
  for (int mask = 1; mask < p2; mask <<= 1) {
    int partner = r ^ mask;
    CDDP_CHECK(exchange(t, "allreduce (recursive doubling)", partner, recv, partner, tmp, count, dt, 0));
    double scale = mask * 2 == p2 ? avg : 1.0;
    if (r < partner) cddp__reduce2(recv, recv, tmp, count, dt, op, scale);
    else cddp__reduce2(recv, tmp, recv, count, dt, op, scale);
  }
  if (p2 == 1 && op == CDDP_AVG) cddp__scale(recv, count, dt, avg);
  if (r < rem) CDDP_CHECK(exchange(t, "allreduce (fold)", r + p2, recv, -1, NULL, count, dt, 0));
  return CDDP_OK;
}

/* ---- ring: reduce-scatter then allgather, chunked, pipelined ---- */

typedef struct ring {
  const char *send;
  char *recv;
  size_t count, es; /* allreduce: count split in world blocks; rs/ag: block = count */
  int rank, world, uniform, step0;
  char *partial;    /* reduce_scatter: partial sums of step s at partial + s * block */
  double last_scale;
} ring_t;

static void ring_span(const ring_t *g, const cddp__tcp_xfer_t *x, int b, size_t k, size_t *off, size_t *n) {
  size_t boff, blen, coff;
  if (g->uniform) boff = (size_t)b * g->count, blen = g->count;
  else cddp__tcp_split(g->count, (size_t)g->world, (size_t)b, &boff, &blen);
  cddp__tcp_split(blen, x->K, k, &coff, n);
  *off = (boff + coff) * g->es;
  *n *= g->es;
}

static void ring_send(const cddp__tcp_xfer_t *x, int s, size_t k, const char **p, size_t *len) {
  const ring_t *g = x->arg;
  int sb, rb, gs = s + g->step0;
  size_t off;
  cddp__tcp_ring_blocks(g->rank, g->world, gs, &sb, &rb);
  ring_span(g, x, sb, k, &off, len);
  if (gs == 0) *p = g->send + off;            /* my own data, untouched */
  else if (g->partial && gs < g->world - 1)   /* reduce_scatter: the partial made last step */
    *p = g->partial + (size_t)(gs - 1) * g->count * g->es + (off - (size_t)sb * g->count * g->es);
  else *p = g->recv + off;
}

static void ring_recv(const cddp__tcp_xfer_t *x, int s, size_t k, cddp__tcp_rslot_t *slot) {
  const ring_t *g = x->arg;
  int sb, rb, gs = s + g->step0;
  size_t off, len;
  cddp__tcp_ring_blocks(g->rank, g->world, gs, &sb, &rb);
  ring_span(g, x, rb, k, &off, &len);
  *slot = (cddp__tcp_rslot_t){.dst = g->recv + off, .len = len, .scale = 1.0};
  if (gs >= g->world - 1) return; /* allgather: straight into place */
  slot->mine = g->send + off;
  if (gs == g->world - 2) slot->scale = g->last_scale;
  if (g->partial) { /* reduce_scatter: own block lands in recv, the rest in partial */
    size_t in_block = off - (size_t)rb * g->count * g->es;
    slot->dst = gs == g->world - 2 ? g->recv + in_block
                                   : g->partial + (size_t)gs * g->count * g->es + in_block;
  }
}

static cddp_result_t ring_run(cddp__tcp_t *t, const char *what, ring_t *g, int nsteps, size_t max_block) {
  cddp__tcp_xfer_t x = {what, (t->rank + 1) % t->world, (t->rank + t->world - 1) % t->world, nsteps, nsteps,
                        cddp__tcp_nchunks(max_block, t->chunk_bytes), 0, CDDP_F32, CDDP_SUM,
                        ring_send, ring_recv, g};
  return cddp__tcp_xfer_run(t, &x);
}

static cddp_result_t allreduce_ring(cddp__tcp_t *t, const cddp__coll_t *c, size_t chunk) {
  size_t es = cddp_dtype_size(c->dt);
  ring_t g = {c->send, c->recv, c->count, es, t->rank, t->world, 0, 0, NULL,
              c->op == CDDP_AVG ? 1.0 / t->world : 1.0};
  cddp__tcp_xfer_t x = {"allreduce ring", (t->rank + 1) % t->world, (t->rank + t->world - 1) % t->world,
                        2 * (t->world - 1), 2 * (t->world - 1),
                        cddp__tcp_nchunks((c->count + (size_t)t->world - 1) / (size_t)t->world * es, chunk),
                        0, c->dt, c->op, ring_send, ring_recv, &g};
  return cddp__tcp_xfer_run(t, &x);
}

static cddp_result_t reduce_scatter(cddp__tcp_t *t, const cddp__coll_t *c, int latency) {
  size_t es = cddp_dtype_size(c->dt), bytes = c->count * es, n = (size_t)t->world;
  if (latency) { /* allreduce the whole send buffer, keep my block */
    CDDP_CHECK(scratch(t, 2 * n * bytes + 4096));
    char *all = SCRATCH(t) + n * bytes + 2048; /* allreduce_rd uses SCRATCH(t) itself */
    CDDP_CHECK(allreduce_rd(t, c->send, all, n * c->count, c->dt, c->op));
    memcpy(c->recv, all + (size_t)t->rank * bytes, bytes);
    return CDDP_OK;
  }
  /* recv inside send anywhere but at my own block would be overwritten while peers still
   * need it: reduce into scratch then */
  const char *s0 = c->send, *r0 = c->recv;
  int overlap = r0 < s0 + n * bytes && s0 < r0 + bytes && r0 != s0 + (size_t)t->rank * bytes;
  CDDP_CHECK(scratch(t, (n - 1) * bytes));
  char *out = overlap ? SCRATCH(t) + (n - 2) * bytes : c->recv;
  ring_t g = {c->send, out, c->count, es, t->rank, t->world, 1, 0, SCRATCH(t),
              c->op == CDDP_AVG ? 1.0 / t->world : 1.0};
  cddp__tcp_xfer_t x = {"reduce_scatter ring", (t->rank + 1) % t->world, (t->rank + t->world - 1) % t->world,
                        t->world - 1, t->world - 1, cddp__tcp_nchunks(bytes, t->chunk_bytes), 0,
                        c->dt, c->op, ring_send, ring_recv, &g};
  CDDP_CHECK(cddp__tcp_xfer_run(t, &x));
  if (overlap) memcpy(c->recv, out, bytes);
  return CDDP_OK;
}

static cddp_result_t allgather(cddp__tcp_t *t, const cddp__coll_t *c) {
  size_t es = cddp_dtype_size(c->dt), bytes = c->count * es;
  char *mine = (char *)c->recv + (size_t)t->rank * bytes;
  if ((const char *)c->send != mine) memmove(mine, c->send, bytes);
  ring_t g = {NULL, c->recv, c->count, es, t->rank, t->world, 1, t->world - 1, NULL, 1.0};
  return ring_run(t, "allgather ring", &g, t->world - 1, bytes);
}

/* Pipelined chain root -> root+1 -> ... -> root-1: each rank forwards chunk k as soon as
 * it has it. */
static cddp_result_t broadcast(cddp__tcp_t *t, const cddp__coll_t *c) {
  int rel = (t->rank - c->root + t->world) % t->world;
  int to = rel < t->world - 1 ? (t->rank + 1) % t->world : -1;
  int from = rel > 0 ? (t->rank + t->world - 1) % t->world : -1;
  return exchange(t, "broadcast chain", to, c->recv, from, c->recv, c->count, c->dt, from >= 0);
}

/* ---- the transport table ---- */

static void tcp_destroy(void *state);

static cddp_result_t tcp_init(const cddp__comm_ctx_t *ctx, void **state) {
  cddp_result_t ret = CDDP_OK;
  cddp__tcp_t *t = calloc(1, sizeof *t);
  if (!t) return cddp__fail(CDDP_SYSTEM, "out of memory");
  t->ctx = ctx, t->rank = ctx->rank, t->world = ctx->world, t->wakefd = -1;
  t->nstreams = CDDP_MAX(1, CDDP_MIN(ctx->cfg->nstreams, 64));
  /* Within one host the kernel's loopback has a single queue: a second stream only adds
   * CPU (measured ~8% per allreduce). Striping is for real NICs, unless asked for. */
  if (ctx->all_local && !getenv(cddp__knob_var(CDDP_KNOB_NSTREAMS))) t->nstreams = 1;
  int64_t chunk = cddp__knob_int(CDDP_KNOB_TCP_CHUNK_BYTES);
  t->chunk_bytes = (size_t)CDDP_MAX(4096, CDDP_MIN(chunk, 64 << 20)) & ~(size_t)63;
  /* BBR, a common system default, paces every socket: on loopback, where nothing is
   * lost, the pacing timers and the small bursts they allow cost ~30% more CPU per 64 MiB
   * allreduce than reno (docs/tcp.md). Across hosts the system's choice stands. */
  const char *cc = cddp__knob_str(CDDP_KNOB_TCP_CONGESTION);
  if (strcmp(cc, "system") == 0 || !*cc) t->cc = NULL;
  else if (strcmp(cc, "auto") == 0) t->cc = ctx->all_local ? "reno" : NULL;
  else t->cc = cc;
  int64_t dmax = cddp__knob_int(CDDP_KNOB_DIRECT_MAX_BYTES);
  t->direct_max = dmax < 0 ? 0 : (size_t)dmax;
  t->fds = malloc((size_t)t->world * (size_t)t->nstreams * sizeof *t->fds);
  size_t stride = t->chunk_bytes + SLOT_PAD + 320;
  t->staging = calloc((size_t)t->nstreams, sizeof *t->staging);
  if (!t->fds || !t->staging || posix_memalign((void **)&t->staging_mem, 4096, stride * (size_t)t->nstreams + 4096)) {
    ret = cddp__fail(CDDP_SYSTEM, "out of memory for TCP staging");
    goto fail;
  }
  for (int i = 0; i < t->nstreams; i++) /* odd 4 KiB offsets: no slot aliases another buffer */
    t->staging[i] = t->staging_mem + (size_t)i * stride + 2048 + 320 * (size_t)i % 2048;
  for (int i = 0; i < t->world * t->nstreams; i++) t->fds[i] = -1;
  t->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (t->wakefd < 0) { ret = cddp__fail_errno(CDDP_SYSTEM, "eventfd"); goto fail; }
  if (t->world > 1) CDDP_CHECK_GOTO(cddp__tcp_bootstrap(t), ret, fail);
  cddp__tcp_tune_init(t);
  *state = t;
  return CDDP_OK;
fail:
  tcp_destroy(t);
  return ret;
}

static const char *algo_name(int latency) { return latency ? "recursive doubling" : "ring"; }

cddp_result_t cddp__tcp_run(void *state, const cddp__coll_t *c) {
  cddp__tcp_t *t = state;
  if (t->failed) return cddp__fail(CDDP_INVALID_USAGE, "the TCP transport failed earlier; destroy the communicator");
  t->deadline = c->deadline;
  cddp__fp_t fp = c->fp; /* the tuner's own calls (seq 0) run in between without headers */
  t->fp = fp;
  size_t es = cddp_dtype_size(c->dt), bytes = c->count * es, n = (size_t)t->world, chunk = t->chunk_bytes;
  int latency = c->algo == CDDP_ALGO_DIRECT;
  if (c->algo == CDDP_ALGO_AUTO)
    latency = (c->kind == CDDP__REDUCE_SCATTER ? n * bytes : bytes) <= t->direct_max;
  if (c->kind == CDDP__ALLREDUCE && t->world > 1) { /* the tuner's table (docs/tuner.md) */
    if (t->tune.state == CDDP_TUNE_PENDING && bytes > 4096) { /* same call on every rank */
      CDDP_CHECK(cddp__tcp_tune_run(t, c->deadline));
      t->deadline = c->deadline;
      t->fp = fp;
    }
    int mech = cddp__tcp_tune_pick(t, bytes);
    if (c->algo == CDDP_ALGO_AUTO) latency = mech == TCP_MECH_RD;
    if (mech == TCP_MECH_RING4) chunk = CDDP_MAX(t->chunk_bytes / 4 & ~(size_t)63, 4096);
  }
  if (t->world == 1) {
    if (c->kind == CDDP__ALLREDUCE || c->kind == CDDP__REDUCE_SCATTER || c->kind == CDDP__ALLGATHER) {
      if (c->send != c->recv) memmove(c->recv, c->send, bytes);
    }
    return CDDP_OK;
  }
  CDDP_TRACE(CDDP_SUB_COMM, "tcp: kind %d, %zu bytes, %s", (int)c->kind, bytes, algo_name(latency));
  switch (c->kind) {
    case CDDP__ALLREDUCE:
      if (latency) return allreduce_rd(t, c->send, c->recv, c->count, c->dt, c->op);
      return allreduce_ring(t, c, chunk);
    case CDDP__REDUCE_SCATTER: return reduce_scatter(t, c, latency);
    case CDDP__ALLGATHER: return allgather(t, c);
    case CDDP__BROADCAST: return broadcast(t, c);
    case CDDP__BARRIER: {
      int32_t one = 1, sum = 0;
      return allreduce_rd(t, &one, &sum, 1, CDDP_I32, CDDP_SUM);
    }
  }
  return cddp__fail(CDDP_INVALID_ARG, "unknown collective kind %d", (int)c->kind);
}

static void tcp_wake(void *state) {
  cddp__tcp_t *t = state;
  uint64_t one = 1;
  if (write(t->wakefd, &one, sizeof one) < 0) { /* counter full: already awake */ }
}

static void tcp_destroy(void *state) {
  cddp__tcp_t *t = state;
  if (!t) return;
  for (int i = 0; t->fds && i < t->world * t->nstreams; i++)
    if (t->fds[i] >= 0) close(t->fds[i]);
  if (t->wakefd >= 0) close(t->wakefd);
  free(t->fds);
  free(t->staging);
  free(t->staging_mem);
  free(t->scratch);
  free(t->done);
  free(t);
}

const cddp__transport_t cddp__transport_tcp = {"tcp", tcp_init, cddp__tcp_run, tcp_wake, tcp_destroy, NULL, NULL, NULL};

/* hier.c - the hierarchical transport: a shm communicator per host and a tcp communicator
 * per local rank across hosts (local rank i of every host), composed into every collective.
 *
 * allreduce = reduce-scatter within the host, allreduce of my slice across hosts,
 * allgather within the host: each host's NIC carries count * es * 2 (H-1)/H bytes in
 * total, split over L parallel cross-host rings, instead of the flat ring's 2 (p-1)/p.
 * Large messages are cut in segments and pipelined: a helper thread runs segment s's
 * cross-host allreduce while this thread reduce-scatters segment s+1 and allgathers s-1,
 * so the shm work hides behind the network. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/hier.h"
#include "comm/reduce.h"
#include "common/check.h"
#include "common/knobs.h"
#include "common/log.h"

#define HIER_MAXSEG 16

typedef struct hier {
  const cddp__comm_ctx_t *ctx;
  int H, L, host, local; /* hosts, ranks per host, my host, my rank within it */
  int *grank;            /* [x * L + l] = world rank of local rank l on host x */
  cddp__peer_t *lpeers, *xpeers;
  cddp_store_t *lstore, *xstore;
  cddp__comm_ctx_t lctx, xctx;
  void *ls, *xs; /* shm (L > 1) and tcp (H > 1) states */
  char *scratch;
  size_t cap, direct_max, seg_bytes;
  int failed;
  /* the cross-host helper thread: runs posted segment allreduces in order */
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int th_started, th_stop;
  cddp__coll_t xjob[HIER_MAXSEG]; /* segment allreduces, posted in order */
  int posted, finished;           /* jobs posted / completed (under mu) */
  cddp_result_t xerr;             /* first failure of a posted job, its message: */
  char xmsg[600];
} hier_t;

/* ---------------------------------------------------------------- placement */

/* Host index of every rank (first appearance order) into host_of; returns the host count. */
static int host_index(const cddp__peer_t *peers, int world, int *host_of) {
  int H = 0;
  for (int r = 0; r < world; r++) {
    int x = -1;
    for (int q = 0; q < r && x < 0; q++)
      if (!strcmp(peers[q].host_id, peers[r].host_id)) x = host_of[q];
    host_of[r] = x >= 0 ? x : H++;
  }
  return H;
}

int cddp__hier_placement(const cddp__peer_t *peers, int world, int *hosts, int *ranks_per_host) {
  int *host_of = calloc((size_t)world, sizeof *host_of), *count = calloc((size_t)world, sizeof *count);
  int H = 0, uniform = 0;
  if (host_of && count) {
    H = host_index(peers, world, host_of);
    for (int r = 0; r < world; r++) count[host_of[r]]++;
    uniform = 1;
    for (int x = 1; x < H; x++) uniform &= count[x] == count[0];
  }
  *hosts = H;
  *ranks_per_host = uniform ? count[0] : 0;
  free(host_of);
  free(count);
  return uniform;
}

int cddp__hier_fits(const cddp__peer_t *peers, int world) {
  int H, L;
  return cddp__hier_placement(peers, world, &H, &L) && H >= 2 && L >= 2;
}

/* ---------------------------------------------------------------- sub-collectives */

/* Runs one collective on a sub-communicator (a plain copy when it has one rank); a failure
 * is re-worded to say which step and group it was. */
static cddp_result_t sub(hier_t *h, int cross, const cddp__coll_t *proto, cddp__coll_kind_t kind,
                         const void *send, void *recv, size_t count, int root) {
  cddp__coll_t c = *proto;
  c.kind = kind, c.send = send, c.recv = recv, c.count = count, c.root = root;
  if (c.op == CDDP_AVG) c.op = CDDP_SUM; /* the average is taken once, at the end */
  const cddp__transport_t *tp = cross ? &cddp__transport_tcp : &cddp__transport_shm;
  void *st = cross ? h->xs : h->ls;
  if (!st) { /* a group of one */
    size_t bytes = count * cddp_dtype_size(c.dt);
    if (kind != CDDP__BARRIER && kind != CDDP__BROADCAST && send != recv && bytes) memmove(recv, send, bytes);
    return CDDP_OK;
  }
  cddp_result_t r = tp->run(st, &c);
  if (r == CDDP_OK) return CDDP_OK;
  h->failed = 1;
  char msg[600];
  snprintf(msg, sizeof msg, "%s", cddp_last_error());
  if (cross)
    return cddp__fail(r, "hierarchical step across hosts (local rank %d of each host): %s", h->local, msg);
  return cddp__fail(r, "hierarchical step within host %s: %s", h->ctx->peers[h->ctx->rank].host, msg);
}

static char *scratch(hier_t *h, size_t bytes) {
  if (h->scratch && h->cap >= bytes) return h->scratch;
  free(h->scratch);
  h->cap = 0;
  size_t cap = (bytes + 4095) & ~(size_t)4095;
  if (posix_memalign((void **)&h->scratch, 4096, cap ? cap : 4096) != 0) {
    h->scratch = NULL;
    cddp__fail(CDDP_SYSTEM, "out of memory for %zu bytes of hierarchical scratch", bytes);
    return NULL;
  }
  h->cap = cap;
  return h->scratch;
}

/* Small messages: allreduce within the host, then every local rank allreduces the host sums
 * with its peers on the other hosts (the same inputs and algorithm in every cross group, so
 * every rank ends with the same bits). Two latency steps. */
static cddp_result_t allreduce_small(hier_t *h, const cddp__coll_t *c, const void *send, void *recv,
                                     size_t count) {
  CDDP_CHECK(sub(h, 0, c, CDDP__ALLREDUCE, send, recv, count, 0));
  return sub(h, 1, c, CDDP__ALLREDUCE, recv, recv, count, 0);
}

/* ---------------------------------------------------------------- the pipeline */

static void *cross_main(void *arg) {
  hier_t *h = arg;
  pthread_mutex_lock(&h->mu);
  for (;;) {
    while (!h->th_stop && h->finished == h->posted) pthread_cond_wait(&h->cv, &h->mu);
    if (h->finished == h->posted) break; /* stopping and drained */
    cddp__coll_t job = h->xjob[h->finished % HIER_MAXSEG];
    int skip = h->xerr != CDDP_OK;
    pthread_mutex_unlock(&h->mu);
    cddp_result_t r = skip ? CDDP_OK : cddp__transport_tcp.run(h->xs, &job);
    pthread_mutex_lock(&h->mu);
    if (r != CDDP_OK && h->xerr == CDDP_OK) {
      h->xerr = r;
      snprintf(h->xmsg, sizeof h->xmsg, "%s", cddp_last_error());
    }
    h->finished++;
    pthread_cond_broadcast(&h->cv);
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

static void post_cross(hier_t *h, const cddp__coll_t *job) {
  pthread_mutex_lock(&h->mu);
  h->xjob[h->posted % HIER_MAXSEG] = *job;
  h->posted++;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

/* Waits until at most `left` posted jobs are unfinished; the first failure, re-worded. */
static cddp_result_t wait_cross(hier_t *h, int left) {
  pthread_mutex_lock(&h->mu);
  while (h->posted - h->finished > left) pthread_cond_wait(&h->cv, &h->mu);
  cddp_result_t r = h->xerr;
  char msg[600];
  snprintf(msg, sizeof msg, "%s", h->xmsg);
  pthread_mutex_unlock(&h->mu);
  if (r == CDDP_OK) return CDDP_OK;
  h->failed = 1;
  return cddp__fail(r, "hierarchical step across hosts (local rank %d of each host): %s", h->local, msg);
}

/* Elements [0, main) in segments of seg elements (multiples of L): reduce-scatter of segment
 * s within the host, its slice's allreduce across hosts on the helper thread, allgather of
 * segment s-1 meanwhile. Every local rank issues the shm steps in the same order. */
static cddp_result_t allreduce_pipelined(hier_t *h, const cddp__coll_t *c, char *slices, size_t main,
                                         size_t seg) {
  size_t es = cddp_dtype_size(c->dt), L = (size_t)h->L, nseg = (main + seg - 1) / seg;
  cddp_result_t ret = CDDP_OK;
  for (size_t s = 0; s <= nseg && ret == CDDP_OK; s++) {
    if (s < nseg) {
      size_t off = s * seg, n = CDDP_MIN(seg, main - off);
      char *slice = slices + off / L * es;
      ret = sub(h, 0, c, CDDP__REDUCE_SCATTER, (const char *)c->send + off * es, slice, n / L, 0);
      if (ret != CDDP_OK) break;
      cddp__coll_t job = *c;
      job.kind = CDDP__ALLREDUCE, job.send = slice, job.recv = slice, job.count = n / L;
      if (job.op == CDDP_AVG) job.op = CDDP_SUM;
      post_cross(h, &job);
    }
    if (s >= 1) {
      size_t off = (s - 1) * seg, n = CDDP_MIN(seg, main - off);
      ret = wait_cross(h, s < nseg ? 1 : 0);
      if (ret == CDDP_OK)
        ret = sub(h, 0, c, CDDP__ALLGATHER, slices + off / L * es, (char *)c->recv + off * es, n / L, 0);
    }
  }
  if (ret != CDDP_OK) { /* let the helper drain what was posted (it skips after a failure) */
    char msg[600];
    snprintf(msg, sizeof msg, "%s", cddp_last_error());
    wait_cross(h, 0);
    cddp__set_error_text(msg);
  }
  return ret;
}

static cddp_result_t allreduce(hier_t *h, const cddp__coll_t *c) {
  size_t es = cddp_dtype_size(c->dt), L = (size_t)h->L;
  int small = c->algo == CDDP_ALGO_DIRECT || c->count < L ||
              (c->algo == CDDP_ALGO_AUTO && c->count * es <= h->direct_max);
  if (small) {
    CDDP_CHECK(allreduce_small(h, c, c->send, c->recv, c->count));
  } else {
    size_t blk = c->count / L, main = blk * L;
    char *slice = scratch(h, blk * es);
    if (!slice) return CDDP_SYSTEM;
    /* segments of about seg_bytes (a multiple of L elements), at most HIER_MAXSEG - 1 */
    size_t seg = CDDP_MAX(h->seg_bytes / es, (main + HIER_MAXSEG - 2) / (HIER_MAXSEG - 1));
    seg = (seg + L - 1) / L * L;
    if (h->th_started && seg < main) {
      CDDP_CHECK(allreduce_pipelined(h, c, slice, main, seg));
    } else {
      CDDP_CHECK(sub(h, 0, c, CDDP__REDUCE_SCATTER, c->send, slice, blk, 0));
      CDDP_CHECK(sub(h, 1, c, CDDP__ALLREDUCE, slice, slice, blk, 0));
      CDDP_CHECK(sub(h, 0, c, CDDP__ALLGATHER, slice, c->recv, blk, 0));
    }
    if (main < c->count) { /* the count % L elements left over: before recv is overwritten */
      cddp__coll_t t = *c;
      t.algo = CDDP_ALGO_AUTO;
      CDDP_CHECK(allreduce_small(h, &t, (const char *)c->send + main * es, (char *)c->recv + main * es,
                                 c->count - main));
    }
  }
  if (c->op == CDDP_AVG) cddp__scale(c->recv, c->count, c->dt, 1.0 / h->ctx->world);
  return CDDP_OK;
}

/* send holds world blocks of count. Reordered so that local rank l's blocks for every host
 * are adjacent ([l][x]), reduce-scattered within the host (local rank l gets its H blocks
 * summed over the host), then reduce-scattered across hosts (host x keeps block x). */
static cddp_result_t reduce_scatter(hier_t *h, const cddp__coll_t *c) {
  size_t blk = c->count * cddp_dtype_size(c->dt), W = (size_t)h->ctx->world, H = (size_t)h->H;
  char *perm = scratch(h, (W + H) * blk);
  if (!perm) return CDDP_SYSTEM;
  char *part = perm + W * blk;
  for (int l = 0; l < h->L; l++)
    for (int x = 0; x < h->H; x++)
      memcpy(perm + ((size_t)l * H + (size_t)x) * blk,
             (const char *)c->send + (size_t)h->grank[x * h->L + l] * blk, blk);
  CDDP_CHECK(sub(h, 0, c, CDDP__REDUCE_SCATTER, perm, part, H * c->count, 0));
  CDDP_CHECK(sub(h, 1, c, CDDP__REDUCE_SCATTER, part, c->recv, c->count, 0));
  if (c->op == CDDP_AVG) cddp__scale(c->recv, c->count, c->dt, 1.0 / h->ctx->world);
  return CDDP_OK;
}

/* Across hosts first (my block with my local-rank peers), then within the host (H blocks
 * each), then every block to its world rank's place. */
static cddp_result_t allgather(hier_t *h, const cddp__coll_t *c) {
  size_t blk = c->count * cddp_dtype_size(c->dt), W = (size_t)h->ctx->world, H = (size_t)h->H;
  char *mine = scratch(h, (W + H) * blk);
  if (!mine) return CDDP_SYSTEM;
  char *all = mine + H * blk;
  CDDP_CHECK(sub(h, 1, c, CDDP__ALLGATHER, c->send, mine, c->count, 0));
  CDDP_CHECK(sub(h, 0, c, CDDP__ALLGATHER, mine, all, H * c->count, 0));
  for (int l = 0; l < h->L; l++)
    for (int x = 0; x < h->H; x++)
      memcpy((char *)c->recv + (size_t)h->grank[x * h->L + l] * blk, all + ((size_t)l * H + (size_t)x) * blk, blk);
  return CDDP_OK;
}

static cddp_result_t broadcast(hier_t *h, const cddp__coll_t *c) {
  int rx = -1, rl = -1;
  for (int i = 0; i < h->H * h->L && rx < 0; i++)
    if (h->grank[i] == c->root) rx = i / h->L, rl = i % h->L;
  if (h->local == rl) CDDP_CHECK(sub(h, 1, c, CDDP__BROADCAST, c->recv, c->recv, c->count, rx));
  return sub(h, 0, c, CDDP__BROADCAST, c->recv, c->recv, c->count, rl);
}

/* Everyone on my host arrived, then my local-rank peers on every other host saw the same. */
static cddp_result_t barrier(hier_t *h, const cddp__coll_t *c) {
  CDDP_CHECK(sub(h, 0, c, CDDP__BARRIER, NULL, NULL, 0, 0));
  return sub(h, 1, c, CDDP__BARRIER, NULL, NULL, 0, 0);
}

/* ---------------------------------------------------------------- the transport table */

static void hier_destroy(void *state);

static void sub_peer(cddp__peer_t *dst, const cddp__peer_t *src, int world_rank) {
  *dst = *src; /* the sub-communicators name peers by their sub-rank: add the world rank */
  snprintf(dst->host, sizeof dst->host, "%.40s, world rank %d", src->host, world_rank);
}

static cddp_result_t hier_init(const cddp__comm_ctx_t *ctx, void **state) {
  cddp_result_t ret = CDDP_OK;
  *state = NULL;
  hier_t *h = calloc(1, sizeof *h);
  int *host_of = calloc((size_t)ctx->world, sizeof *host_of), *seen = calloc((size_t)ctx->world, sizeof *seen);
  if (!h || !host_of || !seen) {
    free(h), free(host_of), free(seen);
    return cddp__fail(CDDP_SYSTEM, "out of memory");
  }
  h->ctx = ctx;
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  h->seg_bytes = (size_t)CDDP_MAX(64, cddp__knob_int(CDDP_KNOB_HIER_SEGMENT_BYTES));
  int64_t dmax = cddp__knob_int(CDDP_KNOB_DIRECT_MAX_BYTES);
  h->direct_max = dmax < 0 ? 0 : (size_t)dmax;
  if (!cddp__hier_placement(ctx->peers, ctx->world, &h->H, &h->L)) {
    ret = cddp__fail(CDDP_INVALID_USAGE, "hierarchical transport needs the same number of ranks on every host "
                     "(%d ranks on %d hosts)", ctx->world, h->H);
    goto fail;
  }
  if (h->L > 64) {
    ret = cddp__fail(CDDP_INVALID_USAGE, "hierarchical transport: %d ranks per host, shm supports at most 64", h->L);
    goto fail;
  }
  host_index(ctx->peers, ctx->world, host_of);
  h->grank = malloc((size_t)ctx->world * sizeof *h->grank);
  h->lpeers = calloc((size_t)h->L, sizeof *h->lpeers);
  h->xpeers = calloc((size_t)h->H, sizeof *h->xpeers);
  if (!h->grank || !h->lpeers || !h->xpeers) { ret = cddp__fail(CDDP_SYSTEM, "out of memory"); goto fail; }
  for (int r = 0; r < ctx->world; r++) {
    int x = host_of[r], l = seen[x]++;
    h->grank[x * h->L + l] = r;
    if (r == ctx->rank) h->host = x, h->local = l;
  }
  for (int l = 0; l < h->L; l++) {
    int g = h->grank[h->host * h->L + l];
    sub_peer(&h->lpeers[l], &ctx->peers[g], g);
  }
  for (int x = 0; x < h->H; x++) {
    int g = h->grank[x * h->L + h->local];
    sub_peer(&h->xpeers[x], &ctx->peers[g], g);
  }
  char prefix[48];
  snprintf(prefix, sizeof prefix, "hier/host%d/", h->host);
  CDDP_CHECK_GOTO(cddp_store_prefix_create(&h->lstore, ctx->store, prefix, 0), ret, fail);
  snprintf(prefix, sizeof prefix, "hier/local%d/", h->local);
  CDDP_CHECK_GOTO(cddp_store_prefix_create(&h->xstore, ctx->store, prefix, 0), ret, fail);
  h->lctx = (cddp__comm_ctx_t){.rank = h->local, .world = h->L, .round = ctx->round, .store = h->lstore,
                               .cfg = ctx->cfg, .peers = h->lpeers, .aborted = ctx->aborted, .all_local = 1,
                               .desync_store = ctx->desync_store};
  h->xctx = (cddp__comm_ctx_t){.rank = h->host, .world = h->H, .round = ctx->round, .store = h->xstore,
                               .cfg = ctx->cfg, .peers = h->xpeers, .aborted = ctx->aborted, .all_local = 0,
                               .desync_store = ctx->desync_store};
  if (h->L > 1) CDDP_CHECK_GOTO(cddp__transport_shm.init(&h->lctx, &h->ls), ret, fail);
  if (h->H > 1) CDDP_CHECK_GOTO(cddp__transport_tcp.init(&h->xctx, &h->xs), ret, fail);
  if (h->H > 1 && h->L > 1) {
    if (pthread_create(&h->th, NULL, cross_main, h) != 0) {
      ret = cddp__fail(CDDP_SYSTEM, "cannot start the hierarchical transport's cross-host thread");
      goto fail;
    }
    h->th_started = 1;
  }
  CDDP_INFO(CDDP_SUB_COMM,
            "hier: rank %d is local rank %d of %d on host %d of %d; reduce-scatter/allgather within the host "
            "over shm, allreduce across hosts over tcp with local rank %d of every host",
            ctx->rank, h->local, h->L, h->host, h->H, h->local);
  free(host_of);
  free(seen);
  *state = h;
  return CDDP_OK;
fail:
  free(host_of);
  free(seen);
  hier_destroy(h);
  return ret;
}

static cddp_result_t hier_run(void *state, const cddp__coll_t *c) {
  hier_t *h = state;
  if (h->failed) return cddp__fail(CDDP_INVALID_USAGE, "the hierarchical transport failed earlier; destroy the communicator");
  switch (c->kind) {
    case CDDP__ALLREDUCE: return allreduce(h, c);
    case CDDP__REDUCE_SCATTER: return reduce_scatter(h, c);
    case CDDP__ALLGATHER: return allgather(h, c);
    case CDDP__BROADCAST: return broadcast(h, c);
    case CDDP__BARRIER: return barrier(h, c);
  }
  return cddp__fail(CDDP_INVALID_ARG, "unknown collective kind %d", (int)c->kind);
}

static void hier_wake(void *state) {
  hier_t *h = state;
  if (h->ls) cddp__transport_shm.wake(h->ls);
  if (h->xs) cddp__transport_tcp.wake(h->xs);
}

static void hier_destroy(void *state) {
  hier_t *h = state;
  if (!h) return;
  if (h->th_started) {
    pthread_mutex_lock(&h->mu);
    h->th_stop = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->th, NULL);
  }
  pthread_cond_destroy(&h->cv);
  pthread_mutex_destroy(&h->mu);
  if (h->xs) cddp__transport_tcp.destroy(h->xs);
  if (h->ls) cddp__transport_shm.destroy(h->ls);
  cddp_store_close(h->xstore);
  cddp_store_close(h->lstore);
  free(h->grank);
  free(h->lpeers);
  free(h->xpeers);
  free(h->scratch);
  free(h);
}

const cddp__transport_t cddp__transport_hier = {"hier", hier_init, hier_run, hier_wake, hier_destroy, NULL, NULL, NULL};

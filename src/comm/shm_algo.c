/* shm_algo.c - shm collectives: direct (latency), staged ring (bandwidth) and zero-copy paths. */
#include <string.h>

#include "comm/reduce.h"
#include "comm/shm.h"
#include "common/check.h"

static const char *const kind_names[] = {"allreduce", "reduce_scatter", "allgather",
                                         "broadcast", "barrier"};

typedef struct {
  shm_t *s;
  const cddp__coll_t *c;
  size_t es;            /* element size */
  size_t align;         /* elements per 64 bytes: slice boundaries stay cache-line aligned */
  double scale;         /* 1/world for AVG */
  int nt;               /* non-temporal stores into the user's buffers */
  int cma;              /* the tuner allows cross-memory attach for ordinary buffers */
} run_t;

#define AT(p, elems, es) ((char *)(p) + (size_t)(elems) * (es))

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static inline void copy(void *dst, const void *src, size_t bytes, int nt) {
  if (dst != src && bytes) cddp__shm_copy(dst, src, bytes, nt);
}

/* Two ranks, f32 sum or average: the fused one-pass kernel applies. */
static int fast2(const run_t *R) {
  return R->s->world == 2 && R->c->dt == CDDP_F32 &&
         (R->c->op == CDDP_SUM || R->c->op == CDDP_AVG);
}

/* Slice q of n elements split over world ranks at 64-byte boundaries. */
static void slice(const run_t *R, size_t n, int q, size_t *lo, size_t *len) {
  size_t per = round_up((n + (size_t)R->s->world - 1) / (size_t)R->s->world, R->align);
  size_t a = CDDP_MIN((size_t)q * per, n), b = CDDP_MIN(a + per, n);
  *lo = a;
  *len = b - a;
}

/* ---- staging slots: step g uses slot g % SHM_NSLOT of every rank. Reuse is safe with no
 * extra flag: a rank starts step g only after every peer posted step g-1, i.e. finished
 * everything of step g-2. Where the data of a slot starts is chosen per step from the user
 * buffer it is copied from (2 KiB apart modulo 4 KiB, so the load and store streams never
 * 4K-alias) and published next to the arrive word (slot_off[k]); readers take it from there. */

/* Which staging buffer rank q writes at step g. More than two ranks: slot[g % 4][q].
 * Two ranks: an ownership chain over four buffers, slot[g % 2][(q + g/2) % 2]: a rank writes
 * at step g the buffer its peer wrote at g-2 and it read then with PREFETCHW (read for
 * ownership), so the lines are already modified in its own cache: one cross-core transfer
 * per line and step instead of a read plus an invalidation. Safe: the peer wrote that
 * buffer before posting g-2 and never reads its own buffers; this rank read it during g-2;
 * the peer reads it again only after this rank posts g. (g/2 is a 31-bit counter, even
 * modulus, so the parity carries on across the u32 wrap.) */
static char *slot_buf(shm_t *s, uint32_t step, int q) {
  if (s->world == 2) return s->slot[step & 1][((uint32_t)q + (step >> 1)) & 1];
  return s->slot[step % SHM_NSLOT][q];
}

static char *my_slot(shm_t *s, uint32_t step, const void *user) {
  int k = (int)(step % SHM_NSLOT);
  uint32_t off = (uint32_t)(((uintptr_t)user + 2048) & 4032);
  s->ctl[s->rank].desc.slot_off[k] = off; /* published by the following arrive */
  return slot_buf(s, step, s->rank) + off;
}

static const char *peer_slot(shm_t *s, uint32_t step, int q) {
  int k = (int)(step % SHM_NSLOT);
  return slot_buf(s, step, q) + s->ctl[q].desc.slot_off[k];
}

/* More than two ranks: takes back the lines of my next slot (the peers read them two steps
 * ago, so they sit in their caches): the stores of the next step then hit instead of waiting
 * for invalidations. (Two ranks read each other's buffers for ownership instead.) */
static void warm_next(shm_t *s, const void *user, size_t bytes) {
  cddp__shm_prefetchw(slot_buf(s, s->step + 1, s->rank) + (((uintptr_t)user + 2048) & 4032), bytes);
}

/* ---- direct: every rank stages its whole input, every rank reduces all slots in rank
 * order (bit-identical everywhere). One arrival per piece. ---- */
static cddp_result_t allreduce_direct(run_t *R) {
  shm_t *s = R->s;
  const cddp__coll_t *c = R->c;
  size_t piece = s->slot_bytes / R->es;
  const void *srcs[64];
  for (size_t off = 0; off < c->count; off += piece) {
    size_t n = CDDP_MIN(piece, c->count - off);
    uint32_t step = ++s->step;
    memcpy(my_slot(s, step, AT(c->send, off, R->es)), AT(c->send, off, R->es), n * R->es);
    CDDP_CHECK(cddp__shm_arrive_all(s, step, c->deadline));
    for (int q = 0; q < s->world; q++)
      srcs[q] = q == s->rank ? (const void *)AT(c->send, off, R->es) : peer_slot(s, step, q);
    if (s->world == 2) /* read the peer's buffer for ownership: I write it at step + 2 */
      cddp__shm_prefetchw(srcs[1 - s->rank], n * R->es);
    else
      warm_next(s, AT(c->send, off + n < c->count ? off + n : 0, R->es),
                CDDP_MIN(piece, c->count) * R->es);
    if (fast2(R))
      cddp__shm_sum2_f32((float *)AT(c->recv, off, 4), NULL, srcs[0], srcs[1], n,
                         (float)R->scale, c->op == CDDP_AVG, 0);
    else
      cddp__reduce_n(AT(c->recv, off, R->es), srcs, s->world, n, c->dt, c->op, R->scale);
  }
  return CDDP_OK;
}

/* ---- ring (staged): per chunk, each rank stages only the slices the others reduce, reduces
 * its own slice from its send buffer and the peers' staging, publishes the result in its
 * own staging slice, and copies the others' results out. Two arrivals per chunk. ---- */
static cddp_result_t allreduce_ring(run_t *R) {
  shm_t *s = R->s;
  const cddp__coll_t *c = R->c;
  const int me = s->rank, W = s->world;
  size_t chunk = CDDP_MAX(s->chunk_bytes / R->es / (R->align * W), 1) * R->align * W;
  const void *srcs[64];
  for (size_t off = 0; off < c->count; off += chunk) {
    size_t n = CDDP_MIN(chunk, c->count - off), lo, len;
    uint32_t step = ++s->step;
    char *mine = my_slot(s, step, AT(c->send, off, R->es));
    for (int q = 0; q < W; q++) {
      if (q == me) continue;
      slice(R, n, q, &lo, &len);
      memcpy(AT(mine, lo, R->es), AT(c->send, off + lo, R->es), len * R->es);
    }
    CDDP_CHECK(cddp__shm_arrive_all(s, step, c->deadline));
    slice(R, n, me, &lo, &len);
    for (int q = 0; q < W; q++)
      srcs[q] = q == me ? (const void *)AT(c->send, off + lo, R->es) : AT(peer_slot(s, step, q), lo, R->es);
    if (fast2(R)) { /* one pass: result into staging and recv */
      cddp__shm_sum2_f32((float *)AT(mine, lo, 4), (float *)AT(c->recv, off + lo, 4),
                         (const float *)srcs[0], (const float *)srcs[1], len, (float)R->scale,
                         c->op == CDDP_AVG, R->nt);
      cddp__shm_post(s, &s->ctl[me].reduced.v, step);
    } else {
      cddp__reduce_n(AT(mine, lo, R->es), srcs, W, len, c->dt, c->op, R->scale);
      cddp__shm_post(s, &s->ctl[me].reduced.v, step);
      copy(AT(c->recv, off + lo, R->es), AT(mine, lo, R->es), len * R->es, R->nt);
    }
    for (int i = 1; i < W; i++) {
      int q = (me + i) % W;
      CDDP_CHECK(cddp__shm_wait(s, q, &s->ctl[q].reduced.v, step, c->deadline));
      slice(R, n, q, &lo, &len);
      copy(AT(c->recv, off + lo, R->es), AT(peer_slot(s, step, q), lo, R->es), len * R->es, R->nt);
    }
  }
  if (R->nt) __builtin_ia32_sfence();
  return CDDP_OK;
}

/* reduce_scatter, staged: rank r's staging holds its contribution to every other block. */
static cddp_result_t reduce_scatter_staged(run_t *R) {
  shm_t *s = R->s;
  const cddp__coll_t *c = R->c;
  const int me = s->rank, W = s->world;
  size_t piece = CDDP_MAX(s->slot_bytes / R->es / (size_t)W / R->align, 1) * R->align;
  const void *srcs[64];
  for (size_t off = 0; off < c->count; off += piece) {
    size_t n = CDDP_MIN(piece, c->count - off);
    uint32_t step = ++s->step;
    char *mine = my_slot(s, step, AT(c->send, off, R->es));
    for (int q = 0; q < W; q++)
      if (q != me)
        memcpy(AT(mine, (size_t)q * piece, R->es), AT(c->send, (size_t)q * c->count + off, R->es),
               n * R->es);
    CDDP_CHECK(cddp__shm_arrive_all(s, step, c->deadline));
    for (int q = 0; q < W; q++)
      srcs[q] = q == me ? (const void *)AT(c->send, (size_t)me * c->count + off, R->es)
                        : AT(peer_slot(s, step, q), (size_t)me * piece, R->es);
    cddp__reduce_n(AT(c->recv, off, R->es), srcs, W, n, c->dt, c->op, R->scale);
  }
  return CDDP_OK;
}

static cddp_result_t allgather_staged(run_t *R) {
  shm_t *s = R->s;
  const cddp__coll_t *c = R->c;
  const int me = s->rank, W = s->world;
  size_t piece = s->slot_bytes / R->es;
  for (size_t off = 0; off < c->count; off += piece) {
    size_t n = CDDP_MIN(piece, c->count - off);
    uint32_t step = ++s->step;
    memcpy(my_slot(s, step, AT(c->send, off, R->es)), AT(c->send, off, R->es), n * R->es);
    CDDP_CHECK(cddp__shm_arrive_all(s, step, c->deadline));
    /* own block first: with send == recv it is moved before block 0 overwrites it */
    if (AT(c->recv, (size_t)me * c->count + off, R->es) != AT(c->send, off, R->es))
      memmove(AT(c->recv, (size_t)me * c->count + off, R->es), AT(c->send, off, R->es), n * R->es);
    for (int q = 0; q < W; q++)
      if (q != me)
        copy(AT(c->recv, (size_t)q * c->count + off, R->es), peer_slot(s, step, q), n * R->es, R->nt);
  }
  return CDDP_OK;
}

static cddp_result_t broadcast_staged(run_t *R, char *buf) {
  shm_t *s = R->s;
  const cddp__coll_t *c = R->c;
  size_t piece = s->slot_bytes / R->es;
  for (size_t off = 0; off < c->count; off += piece) {
    size_t n = CDDP_MIN(piece, c->count - off);
    uint32_t step = ++s->step;
    if (s->rank == c->root) memcpy(my_slot(s, step, AT(buf, off, R->es)), AT(buf, off, R->es), n * R->es);
    CDDP_CHECK(cddp__shm_arrive_all(s, step, c->deadline));
    if (s->rank != c->root) copy(AT(buf, off, R->es), peer_slot(s, step, c->root), n * R->es, R->nt);
  }
  return CDDP_OK;
}

/* ---- zero-copy: every buffer involved is a mem_alloc buffer, mapped by every rank. ---- */

static char *peer_ptr(shm_t *s, int q, int32_t id, uint64_t off) {
  for (int i = 0; i < SHM_MAX_ALLOCS; i++)
    if (s->allocs[i].used && s->allocs[i].id == id) return s->allocs[i].base[q] + off;
  return NULL;
}

/* One pass: rank r reduces its slice from every rank's send buffer (rank order) into its own
 * recv buffer, block by block, and copies each block (still in cache) into the peers'. */
static void allreduce_zc(run_t *R, char *const *sendp, char *const *recvp) {
  shm_t *s = R->s;
  const cddp__coll_t *c = R->c;
  const int me = s->rank, W = s->world;
  size_t lo, len, blk = CDDP_MAX((size_t)16384 / R->es, 1);
  const void *srcs[64];
  slice(R, c->count, me, &lo, &len);
  if (fast2(R)) {
    cddp__shm_sum2_f32((float *)AT(recvp[me], lo, 4), (float *)AT(recvp[1 - me], lo, 4),
                       (const float *)AT(sendp[0], lo, 4), (const float *)AT(sendp[1], lo, 4), len,
                       (float)R->scale, c->op == CDDP_AVG, R->nt);
    return;
  }
  for (size_t b = lo; b < lo + len; b += blk) {
    size_t n = CDDP_MIN(blk, lo + len - b);
    for (int q = 0; q < W; q++) srcs[q] = AT(sendp[q], b, R->es);
    cddp__reduce_n(AT(recvp[me], b, R->es), srcs, W, n, c->dt, c->op, R->scale);
    for (int i = 1; i < W; i++) {
      int q = (me + i) % W;
      copy(AT(recvp[q], b, R->es), AT(recvp[me], b, R->es), n * R->es, R->nt);
    }
  }
}

static int overlap(uint64_t a, size_t alen, uint64_t b, size_t blen) {
  return a < b + blen && b < a + alen;
}

/* Returns 1 (and the peers' pointers) when every rank's buffers allow zero copy. */
static int zc_agree(run_t *R, char **sendp, char **recvp) {
  shm_t *s = R->s;
  const cddp__coll_t *c = R->c;
  size_t blk = c->count * R->es;
  for (int q = 0; q < s->world; q++) {
    const shm_zc_desc_t *d = &s->ctl[q].desc;
    int need_send = c->kind != CDDP__BROADCAST || q == c->root;
    int need_recv = c->kind == CDDP__ALLREDUCE;
    if ((need_send && d->send_id < 0) || (need_recv && d->recv_id < 0)) return 0;
    sendp[q] = d->send_id >= 0 ? peer_ptr(s, q, d->send_id, d->send_off) : NULL;
    recvp[q] = d->recv_id >= 0 ? peer_ptr(s, q, d->recv_id, d->recv_off) : NULL;
    if ((need_send && !sendp[q]) || (need_recv && !recvp[q])) return 0;
    /* peers read q's send while q writes its recv: only NCCL's in-place forms are safe */
    if (c->kind == CDDP__REDUCE_SCATTER && d->recv_id == d->send_id &&
        overlap(d->recv_off, blk, d->send_off, (size_t)s->world * blk) &&
        d->recv_off != d->send_off + (uint64_t)q * blk)
      return 0;
    if (c->kind == CDDP__ALLGATHER && d->recv_id == d->send_id &&
        overlap(d->send_off, blk, d->recv_off, (size_t)s->world * blk) &&
        d->send_off != d->recv_off + (uint64_t)q * blk)
      return 0;
  }
  return 1;
}

static void describe(run_t *R, size_t send_bytes, size_t recv_bytes) {
  shm_t *s = R->s;
  shm_zc_desc_t *d = &s->ctl[s->rank].desc;
  int i = R->c->send ? cddp__shm_find_alloc(s, R->c->send, send_bytes, &d->send_off) : -1;
  d->send_id = i >= 0 ? s->allocs[i].id : -1;
  i = R->c->recv ? cddp__shm_find_alloc(s, R->c->recv, recv_bytes, &d->recv_off) : -1;
  d->recv_id = i >= 0 ? s->allocs[i].id : -1;
  d->send_addr = (uint64_t)(uintptr_t)R->c->send;
  d->recv_addr = (uint64_t)(uintptr_t)R->c->recv;
}

/* Large messages: one arrival carrying the zero-copy descriptors, then zero copy if every
 * rank's buffers allow it, else the staged algorithm. */
static cddp_result_t run_large(run_t *R, size_t send_bytes, size_t recv_bytes) {
  shm_t *s = R->s;
  const cddp__coll_t *c = R->c;
  char *sendp[64], *recvp[64];
  describe(R, send_bytes, recv_bytes);
  uint32_t step = ++s->step;
  CDDP_CHECK(cddp__shm_arrive_all(s, step, c->deadline));
  if (!zc_agree(R, sendp, recvp)) {
    if (R->cma && cddp__shm_cma_usable(s, c, R->es)) {
      CDDP_CHECK(cddp__shm_allreduce_cma(s, c, R->es, R->scale));
      return cddp__shm_reduced_all(s, step, c->deadline); /* nobody touches us after */
    }
    switch (c->kind) {
      case CDDP__ALLREDUCE: return allreduce_ring(R);
      case CDDP__REDUCE_SCATTER: return reduce_scatter_staged(R);
      case CDDP__ALLGATHER: return allgather_staged(R);
      default: return broadcast_staged(R, c->recv);
    }
  }
  const int me = s->rank, W = s->world;
  const size_t es = R->es, n = c->count;
  const void *srcs[64];
  switch (c->kind) {
    case CDDP__ALLREDUCE: allreduce_zc(R, sendp, recvp); break;
    case CDDP__REDUCE_SCATTER:
      for (int q = 0; q < W; q++) srcs[q] = AT(sendp[q], (size_t)me * n, es);
      cddp__reduce_n(c->recv, srcs, W, n, c->dt, c->op, R->scale);
      break;
    case CDDP__ALLGATHER:
      for (int i = 0; i < W; i++) {
        int q = (me + i) % W;
        copy(AT(c->recv, (size_t)q * n, es), sendp[q], n * es, R->nt);
      }
      break;
    default:
      if (me != c->root) copy(c->recv, sendp[c->root], n * es, R->nt);
  }
  if (R->nt) __builtin_ia32_sfence();
  return cddp__shm_reduced_all(s, step, c->deadline); /* nobody reads or writes us after */
}

cddp_result_t cddp__shm_run(shm_t *s, const cddp__coll_t *c) {
  if ((unsigned)c->kind > CDDP__BARRIER)
    return cddp__fail(CDDP_INVALID_ARG, "shm: unknown collective %d", (int)c->kind);
  s->what = kind_names[c->kind];
  if (c->fp.seq) s->fp_next = c->fp; /* the next arrival carries it (the tuner's calls carry none) */
  if (c->kind == CDDP__BARRIER) return cddp__shm_arrive_all(s, ++s->step, c->deadline);
  size_t es = cddp_dtype_size(c->dt);
  if (!es) return cddp__fail(CDDP_INVALID_ARG, "shm %s: unknown dtype %d", s->what, (int)c->dt);
  int reduces = c->kind == CDDP__ALLREDUCE || c->kind == CDDP__REDUCE_SCATTER;
  if (reduces && (unsigned)c->op >= CDDP_REDOP_COUNT)
    return cddp__fail(CDDP_INVALID_ARG, "shm %s: unknown op %d", s->what, (int)c->op);
  if (c->kind == CDDP__BROADCAST && (c->root < 0 || c->root >= s->world))
    return cddp__fail(CDDP_INVALID_ARG, "shm broadcast: root %d not in [0, %d)", c->root,
                      s->world);
  if (c->count == 0) { /* same count on every rank: nobody waits */
    s->fp_next.seq = 0;
    return CDDP_OK;
  }
  run_t R = {.s = s, .c = c, .es = es, .align = 64 / es,
             .scale = c->op == CDDP_AVG ? 1.0 / s->world : 1.0};
  cddp__coll_t bc;
  size_t W = (size_t)s->world, bytes = c->count * es, send_bytes = bytes, recv_bytes = bytes;
  if (c->kind == CDDP__REDUCE_SCATTER) send_bytes = W * bytes;
  if (c->kind == CDDP__ALLGATHER) recv_bytes = W * bytes;
  if (c->kind == CDDP__BROADCAST) { /* one buffer: recv (send may be NULL or the same) */
    bc = *c;
    if (!bc.recv) bc.recv = (void *)bc.send;
    bc.send = bc.recv;
    R.c = c = &bc;
  }
  size_t total = CDDP_MAX(send_bytes, recv_bytes);
  R.nt = s->nt_bytes && total >= s->nt_bytes;
  int direct = total <= s->direct_max;
  if (c->kind == CDDP__ALLREDUCE) { /* the tuner's table (docs/tuner.md) */
    if (s->tune.state == SHM_TUNE_PENDING && total > 4096) { /* same call on every rank */
      CDDP_CHECK(cddp__shm_tune_run(s, c->deadline));
      s->what = kind_names[c->kind];
    }
    int mech = cddp__shm_tune_pick(s, total);
    direct = mech == SHM_MECH_DIRECT;
    R.cma = mech != SHM_MECH_RING;
  }
  int large = c->algo == CDDP_ALGO_RING || (c->algo != CDDP_ALGO_DIRECT && !direct);
  if (large) return run_large(&R, send_bytes, recv_bytes);
  switch (c->kind) {
    case CDDP__ALLREDUCE: return allreduce_direct(&R);
    case CDDP__REDUCE_SCATTER: return reduce_scatter_staged(&R);
    case CDDP__ALLGATHER: return allgather_staged(&R);
    default: return broadcast_staged(&R, c->recv);
  }
}

/* mpi.c - the mpi backend: every collective maps onto an MPI non-blocking one, polled so that
 * cddp's timeout and abort still work. Without MPI (CDDP_HAVE_MPI 0) only the "not built" error. */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/reduce.h"
#include "comm/transport.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/log.h"

#if !CDDP_HAVE_MPI

cddp_result_t cddp__mpi_available(void) {
  return cddp__fail(CDDP_INVALID_USAGE,
                    "backend 'mpi' is not built into this cddp (install libopenmpi-dev and rebuild)");
}

static cddp_result_t unbuilt_init(const cddp__comm_ctx_t *ctx, void **state) {
  *state = NULL;
  return cddp__mpi_available();
}
static cddp_result_t unbuilt_run(void *state, const cddp__coll_t *coll) { return cddp__mpi_available(); }
static void unbuilt_destroy(void *state) {}

const cddp__transport_t cddp__transport_mpi = {
    .name = "mpi", .init = unbuilt_init, .run = unbuilt_run, .destroy = unbuilt_destroy};

#else /* CDDP_HAVE_MPI */

#include <mpi.h>

cddp_result_t cddp__mpi_available(void) { return CDDP_OK; }

/* Process-wide: cddp's own MPI calls never overlap (what MPI_THREAD_SERIALIZED asks), even
 * with several communicators on several threads. */
static pthread_mutex_t mpi_mu = PTHREAD_MUTEX_INITIALIZER;
static int we_initialised; /* cddp called MPI_Init_thread, so cddp calls MPI_Finalize at exit */
static int left_pending;   /* an aborted or timed-out operation is still outstanding */

typedef struct mpi_state {
  const cddp__comm_ctx_t *ctx;
  MPI_Comm comm; /* a duplicate of MPI_COMM_WORLD: cddp's traffic never matches the user's */
  int have_comm;
  int failed; /* a run() failed: only destroy is allowed, and the comm is not freed */
  void *scratch;
  size_t scratch_cap;
} mpi_state_t;

/* MPI_Finalize is collective and waits for the peers; after an abort or timeout a peer may be
 * stuck forever, so then cddp skips it and mpirun ends the job when this process exits. */
static void finalize_at_exit(void) {
  pthread_mutex_lock(&mpi_mu);
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && !left_pending) MPI_Finalize();
  pthread_mutex_unlock(&mpi_mu);
}

static const char *level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
  }
}

static cddp_result_t mpi_fail(int rc, const char *what, int rank) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
  return cddp__fail(CDDP_REMOTE, "backend mpi: rank %d: %s failed: %s", rank, what, msg);
}

/* Polls req until it completes, *aborted is set, or the deadline passes. On abort/timeout the
 * request stays outstanding: MPI cannot cancel a collective. */
static cddp_result_t wait_req(mpi_state_t *s, MPI_Request *req, uint64_t deadline, const char *what) {
  for (unsigned long it = 0;; it++) {
    int done = 0;
    pthread_mutex_lock(&mpi_mu);
    int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    pthread_mutex_unlock(&mpi_mu);
    if (rc != MPI_SUCCESS) {
      s->failed = 1;
      return mpi_fail(rc, what, s->ctx->rank);
    }
    if (done) return CDDP_OK;
    if ((it & 63) != 63) continue;
    int aborted = cddp__aborted(s->ctx);
    if (aborted || cddp__now_coarse_ns() > deadline) {
      s->failed = 1;
      __atomic_store_n(&left_pending, 1, __ATOMIC_RELEASE);
      if (aborted)
        return cddp__fail(CDDP_ABORTED,
                          "backend mpi: rank %d: %s aborted; MPI cannot cancel it, so this process "
                          "will not call MPI_Finalize (mpirun ends the job when it exits)",
                          s->ctx->rank, what);
      return cddp__fail(CDDP_TIMEOUT,
                        "backend mpi: rank %d of %d: %s did not complete within %d ms (MPI does not "
                        "say which peer is late; CDDP_TIMEOUT_MS)",
                        s->ctx->rank, s->ctx->world, what, s->ctx->cfg->timeout_ms);
    }
    if (it > 4096) sched_yield(); /* oversubscribed ranks: let the peer we wait for run */
  }
}

/* Starts one MPI call under the lock; the call's status is returned. */
#define LOCKED(call)                         \
  ({                                         \
    pthread_mutex_lock(&mpi_mu);             \
    int mpi__rc = (call);                    \
    pthread_mutex_unlock(&mpi_mu);           \
    mpi__rc;                                 \
  })

static cddp_result_t mpi_init(const cddp__comm_ctx_t *ctx, void **out) {
  *out = NULL;
  int inited = 0, fin = 0, provided = MPI_THREAD_SINGLE, rc;
  pthread_mutex_lock(&mpi_mu);
  MPI_Finalized(&fin);
  MPI_Initialized(&inited);
  if (fin) {
    pthread_mutex_unlock(&mpi_mu);
    return cddp__fail(CDDP_INVALID_USAGE, "backend mpi: MPI was already finalised in this process");
  }
  if (!inited) {
    /* Open MPI's non-blocking allreduce (libnbc) picks a binomial tree for in-place buffers
     * and for fewer than 4 ranks: half the bandwidth of its ring, which measured faster at
     * every size from 4 KiB (docs/mpi.md). A value the user set wins. */
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "ring", 0);
    rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
      pthread_mutex_unlock(&mpi_mu);
      return cddp__fail(CDDP_SYSTEM, "backend mpi: rank %d: MPI_Init_thread failed (%d)", ctx->rank, rc);
    }
    we_initialised = 1;
    atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&provided);
  }
  int mrank = -1, mworld = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &mrank);
  MPI_Comm_size(MPI_COMM_WORLD, &mworld);
  pthread_mutex_unlock(&mpi_mu);
  if (provided < MPI_THREAD_SERIALIZED)
    return cddp__fail(CDDP_INVALID_USAGE,
                      "backend mpi: MPI provides %s; cddp's progress thread needs MPI_THREAD_SERIALIZED "
                      "or better (initialise MPI with MPI_Init_thread before cddp, or let cddp do it)",
                      level_name(provided));
  if (mrank != ctx->rank || mworld != ctx->world)
    return cddp__fail(CDDP_INVALID_USAGE,
                      "backend mpi: MPI says rank %d of %d but cddp has rank %d of %d: start every rank "
                      "with mpirun -np %d and let cddp take its ranks from MPI",
                      mrank, mworld, ctx->rank, ctx->world, ctx->world);

  mpi_state_t *s = calloc(1, sizeof *s);
  if (!s) return cddp__fail(CDDP_SYSTEM, "backend mpi: out of memory");
  s->ctx = ctx;
  MPI_Request req;
  rc = LOCKED(MPI_Comm_idup(MPI_COMM_WORLD, &s->comm, &req));
  if (rc != MPI_SUCCESS) {
    free(s);
    return mpi_fail(rc, "MPI_Comm_idup", ctx->rank);
  }
  cddp_result_t r = wait_req(s, &req, cddp__deadline_ms(ctx->cfg->timeout_ms), "communicator duplication");
  if (r != CDDP_OK) {
    free(s); /* the duplicate may still be in flight: leave it to MPI */
    return r;
  }
  s->have_comm = 1;
  (void)LOCKED(MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN));
  CDDP_INFO(CDDP_SUB_COMM, "backend mpi: rank %d of %d, thread level %s, MPI initialised by %s", ctx->rank,
            ctx->world, level_name(provided), we_initialised ? "cddp" : "the program");
  *out = s;
  return CDDP_OK;
}

static MPI_Datatype mpi_type(cddp_dtype_t dt) {
  switch (dt) {
    case CDDP_F32: return MPI_FLOAT;
    case CDDP_F64: return MPI_DOUBLE;
    case CDDP_I32: return MPI_INT32_T;
    case CDDP_I64: return MPI_INT64_T;
    default: return MPI_UINT16_T; /* bf16, f16: moved as bits, reduced as f32 */
  }
}

static MPI_Op mpi_op(cddp_redop_t op) {
  return op == CDDP_MAX ? MPI_MAX : op == CDDP_MIN ? MPI_MIN : MPI_SUM; /* AVG: sum, then scale */
}

static void *scratch(mpi_state_t *s, size_t bytes) {
  if (bytes > s->scratch_cap) {
    void *p = realloc(s->scratch, bytes);
    if (!p) return NULL;
    s->scratch = p, s->scratch_cap = bytes;
  }
  return s->scratch;
}

static int overlap(const void *a, size_t an, const void *b, size_t bn) {
  const char *x = a, *y = b;
  return x < y + bn && y < x + an;
}

/* bf16 and f16 are reduced by MPI as f32: widened before, rounded once after. */
static int half_type(cddp_dtype_t dt) { return dt == CDDP_BF16 || dt == CDDP_F16; }

static void widen(cddp_dtype_t dt, float *dst, const uint16_t *src, size_t n) {
  if (dt == CDDP_F16) cddp__f16_to_f32_n(dst, src, n);
  else cddp__bf16_to_f32_n(dst, src, n);
}

static void narrow(cddp_dtype_t dt, uint16_t *dst, const float *src, size_t n) {
  if (dt == CDDP_F16) cddp__f32_to_f16_n(dst, src, n);
  else cddp__f32_to_bf16_n(dst, src, n);
}

/* MPI counts are int: messages are cut into pieces of at most this many elements. */
#define PIECE ((size_t)1 << 30)

static cddp_result_t run_allreduce(mpi_state_t *s, const cddp__coll_t *c) {
  size_t es = cddp_dtype_size(c->dt), n = c->count;
  const void *send = c->send;
  void *recv = c->recv;
  cddp_dtype_t dt = c->dt;
  if (half_type(dt)) { /* f32 accumulation, one rounding at the end */
    float *f = scratch(s, n * 4);
    if (!f && n) return cddp__fail(CDDP_SYSTEM, "backend mpi: no memory for a %zu-element %s staging buffer", n, cddp_dtype_name(dt));
    widen(dt, f, send, n);
    send = recv = f, dt = CDDP_F32, es = 4;
  } else if (send != recv && overlap(send, n * es, recv, n * es)) {
    memmove(recv, send, n * es);
    send = recv;
  }
  for (size_t off = 0; off < n; off += PIECE) {
    int k = (int)CDDP_MIN(PIECE, n - off);
    MPI_Request req;
    const void *sp = send == recv ? MPI_IN_PLACE : (const char *)send + off * es;
    int rc = LOCKED(MPI_Iallreduce(sp, (char *)recv + off * es, k, mpi_type(dt), mpi_op(c->op), s->comm, &req));
    if (rc != MPI_SUCCESS) return s->failed = 1, mpi_fail(rc, "MPI_Iallreduce", s->ctx->rank);
    CDDP_CHECK(wait_req(s, &req, c->deadline, "allreduce"));
  }
  if (c->op == CDDP_AVG) cddp__scale(recv, n, dt, 1.0 / s->ctx->world);
  if (half_type(c->dt)) narrow(c->dt, c->recv, recv, n);
  return CDDP_OK;
}

static cddp_result_t run_reduce_scatter(mpi_state_t *s, const cddp__coll_t *c) {
  size_t es = cddp_dtype_size(c->dt), n = c->count, W = (size_t)s->ctx->world;
  if (n > INT_MAX) return cddp__fail(CDDP_INVALID_ARG, "backend mpi: reduce_scatter of %zu elements per rank exceeds MPI's int count", n);
  const void *send = c->send;
  void *out = c->recv;
  cddp_dtype_t dt = c->dt;
  if (half_type(dt)) {
    float *f = scratch(s, W * n * 4);
    if (!f && n) return cddp__fail(CDDP_SYSTEM, "backend mpi: no memory for a %s staging buffer", cddp_dtype_name(dt));
    widen(dt, f, send, W * n);
    send = out = f, dt = CDDP_F32, es = 4; /* in place: block `rank` lands at f[0..n) */
  } else if (overlap(send, W * n * es, out, n * es) && send != out) {
    void *t = scratch(s, W * n * es);
    if (!t && n) return cddp__fail(CDDP_SYSTEM, "backend mpi: no memory for a reduce_scatter staging buffer");
    memcpy(t, send, W * n * es);
    send = t;
  }
  MPI_Request req;
  int rc = LOCKED(MPI_Ireduce_scatter_block(send == out ? MPI_IN_PLACE : send, out, (int)n, mpi_type(dt),
                                            mpi_op(c->op), s->comm, &req));
  if (rc != MPI_SUCCESS) return s->failed = 1, mpi_fail(rc, "MPI_Ireduce_scatter_block", s->ctx->rank);
  CDDP_CHECK(wait_req(s, &req, c->deadline, "reduce_scatter"));
  if (c->op == CDDP_AVG) cddp__scale(out, n, dt, 1.0 / (double)W);
  if (half_type(c->dt)) narrow(c->dt, c->recv, out, n);
  return CDDP_OK;
}

static cddp_result_t run_allgather(mpi_state_t *s, const cddp__coll_t *c) {
  size_t es = cddp_dtype_size(c->dt), n = c->count, W = (size_t)s->ctx->world;
  if (n > INT_MAX) return cddp__fail(CDDP_INVALID_ARG, "backend mpi: allgather of %zu elements per rank exceeds MPI's int count", n);
  char *mine = (char *)c->recv + (size_t)s->ctx->rank * n * es;
  const void *send = c->send;
  if (send != mine && overlap(send, n * es, c->recv, W * n * es)) { /* MPI forbids aliasing */
    memmove(mine, send, n * es);
    send = mine;
  }
  MPI_Request req;
  MPI_Datatype t = mpi_type(c->dt);
  int rc = LOCKED(MPI_Iallgather(send == mine ? MPI_IN_PLACE : send, (int)n, t, c->recv, (int)n, t, s->comm, &req));
  if (rc != MPI_SUCCESS) return s->failed = 1, mpi_fail(rc, "MPI_Iallgather", s->ctx->rank);
  return wait_req(s, &req, c->deadline, "allgather");
}

static cddp_result_t run_broadcast(mpi_state_t *s, const cddp__coll_t *c) {
  size_t es = cddp_dtype_size(c->dt);
  for (size_t off = 0; off < c->count; off += PIECE) {
    MPI_Request req;
    int k = (int)CDDP_MIN(PIECE, c->count - off);
    int rc = LOCKED(MPI_Ibcast((char *)c->recv + off * es, k, mpi_type(c->dt), c->root, s->comm, &req));
    if (rc != MPI_SUCCESS) return s->failed = 1, mpi_fail(rc, "MPI_Ibcast", s->ctx->rank);
    CDDP_CHECK(wait_req(s, &req, c->deadline, "broadcast"));
  }
  return CDDP_OK;
}

static cddp_result_t mpi_run(void *state, const cddp__coll_t *c) {
  mpi_state_t *s = state;
  if (s->failed) return cddp__fail(CDDP_INVALID_USAGE, "backend mpi: an earlier collective failed; destroy the communicator");
  switch (c->kind) {
    case CDDP__ALLREDUCE: return run_allreduce(s, c);
    case CDDP__REDUCE_SCATTER: return run_reduce_scatter(s, c);
    case CDDP__ALLGATHER: return run_allgather(s, c);
    case CDDP__BROADCAST: return run_broadcast(s, c);
    case CDDP__BARRIER: {
      MPI_Request req;
      int rc = LOCKED(MPI_Ibarrier(s->comm, &req));
      if (rc != MPI_SUCCESS) return s->failed = 1, mpi_fail(rc, "MPI_Ibarrier", s->ctx->rank);
      return wait_req(s, &req, c->deadline, "barrier");
    }
  }
  return cddp__fail(CDDP_INVALID_ARG, "backend mpi: collective kind %d", (int)c->kind);
}

static void mpi_destroy(void *state) {
  mpi_state_t *s = state;
  if (!s) return;
  /* after a failure an operation may still use the communicator: leave it to MPI */
  if (s->have_comm && !s->failed) (void)LOCKED(MPI_Comm_free(&s->comm));
  free(s->scratch);
  free(s);
}

/* wake is not needed: wait_req() reads *aborted every 64 tests of the request. */
const cddp__transport_t cddp__transport_mpi = {
    .name = "mpi", .init = mpi_init, .run = mpi_run, .wake = NULL, .destroy = mpi_destroy};

#endif /* CDDP_HAVE_MPI */

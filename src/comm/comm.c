/* comm.c - the communicator core: lifecycle, peer exchange, transport choice, ordered execution
 * of blocking (inline) and non-blocking (progress thread) collectives, abort. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cddp/comm.h"
#include "comm/hier.h"
#include "comm/nccl.h"
#include "comm/peers.h"
#include "comm/reduce.h"
#include "comm/flight.h"
#include "comm/transport.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"

struct cddp_request {
  cddp_comm_t *comm;
  cddp__coll_t coll;
  cddp_result_t result;
  char error[256];
  int done; /* atomic; set under comm->mu */
  struct cddp_request *next;
};

struct cddp_comm {
  int rank, world, round;
  uint64_t n_coll;          /* collectives run: the flight recorder's per-communicator number */
  int desync_check;         /* every rank has CDDP_DESYNC_CHECK on: fingerprints are compared */
  cddp_comm_config_t cfg;
  char transport_name[8];
  cddp_store_t *view; /* "comm/r<round>/" over the caller's store */
  cddp__peer_t *peers;
  cddp__comm_ctx_t ctx;
  const cddp__transport_t *tp; /* NULL when world == 1 */
  void *tp_state;
  volatile int aborted;

  pthread_mutex_t mu;
  pthread_cond_t cv;        /* queue changed, a request finished, or busy cleared */
  cddp_request_t *head, *tail;
  int busy;                 /* a collective is executing (inline or on the thread) */
  int thread_started, stopping;
  pthread_t thread;

  cddp_result_t error; /* first failure: the communicator is unusable after it */
  char error_msg[256];
};

/* ---------------------------------------------------------------- config */

static cddp_algo_t algo_from_knob(void) {
  const char *a = cddp__knob_str(CDDP_KNOB_ALGO);
  if (!strcasecmp(a, "ring")) return CDDP_ALGO_RING;
  if (!strcasecmp(a, "direct")) return CDDP_ALGO_DIRECT;
  if (strcasecmp(a, "auto") && a[0]) CDDP_WARN("CDDP_ALGO=%s is not auto, ring or direct; using auto", a);
  return CDDP_ALGO_AUTO;
}

void cddp_comm_config_default(cddp_comm_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->backend = cddp__knob_str(CDDP_KNOB_BACKEND);
  cfg->transport = cddp__knob_str(CDDP_KNOB_TRANSPORT);
  cfg->nstreams = (int)cddp__knob_int(CDDP_KNOB_NSTREAMS);
  cfg->timeout_ms = (int)cddp__knob_int(CDDP_KNOB_TIMEOUT_MS);
  cfg->algo = algo_from_knob();
}

/* Caller's fields win where set; the rest come from the defaults. */
static cddp_result_t resolve_config(cddp_comm_config_t *out, const cddp_comm_config_t *in) {
  cddp_comm_config_default(out);
  if (in) {
    if (in->backend && in->backend[0]) out->backend = in->backend;
    if (in->transport && in->transport[0]) out->transport = in->transport;
    if (in->nstreams > 0) out->nstreams = in->nstreams;
    if (in->timeout_ms > 0) out->timeout_ms = in->timeout_ms;
    if (in->algo != CDDP_ALGO_AUTO) out->algo = in->algo;
  }
  if (!strcasecmp(out->backend, "mpi")) {
    out->backend = "mpi";
    CDDP_CHECK(cddp__mpi_available());
  } else if (!strcasecmp(out->backend, "nccl")) {
    out->backend = "nccl";
    CDDP_CHECK(cddp__nccl_available());
  } else if (strcasecmp(out->backend, "native")) {
    return cddp__fail(CDDP_INVALID_USAGE, "backend '%s' is not native, mpi or nccl (--backend, CDDP_BACKEND)",
                      out->backend);
  }
  if (strcasecmp(out->transport, "auto") && strcasecmp(out->transport, "shm") &&
      strcasecmp(out->transport, "tcp") && strcasecmp(out->transport, "hier"))
    return cddp__fail(CDDP_INVALID_ARG, "transport '%s' is not auto, shm, tcp or hier (CDDP_TRANSPORT)",
                      out->transport);
  if (out->nstreams < 1 || out->nstreams > 64)
    return cddp__fail(CDDP_INVALID_ARG, "nstreams %d is not in 1..64 (CDDP_NSTREAMS)", out->nstreams);
  if ((unsigned)out->algo >= CDDP_ALGO_COUNT)
    return cddp__fail(CDDP_INVALID_ARG, "algorithm %d is not a cddp_algo_t", (int)out->algo);
  return CDDP_OK;
}

/* ---------------------------------------------------------------- peers */

/* boot id + network namespace: ranks in different netns are different "hosts" even on one
 * kernel, which is what the namespace test cluster relies on. */
void cddp__local_host_id(char *buf, size_t size) {
  char boot[64] = "?", ns[64] = "?";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (fgets(boot, sizeof boot, f)) boot[strcspn(boot, "\n")] = '\0';
    fclose(f);
  }
  ssize_t n = readlink("/proc/self/ns/net", ns, sizeof ns - 1);
  ns[n > 0 ? n : 0] = '\0';
  snprintf(buf, size, "%s/%s", boot, ns);
}

const char *cddp__peer_name(const cddp__comm_ctx_t *ctx, int rank, char *buf, size_t size) {
  const char *host = (ctx && ctx->peers && rank >= 0 && rank < ctx->world) ? ctx->peers[rank].host : "?";
  snprintf(buf, size, "rank %d (host %s)", rank, host);
  return buf;
}

static cddp_result_t exchange_peers(cddp_comm_t *c) {
  cddp__peer_t me = {.pid = (int)getpid()};
  if (gethostname(me.host, sizeof me.host) != 0) strcpy(me.host, "?");
  me.host[sizeof me.host - 1] = '\0';
  cddp__local_host_id(me.host_id, sizeof me.host_id);
  /* the desync check changes what goes on the wire (a header per TCP transfer): on only when
   * every rank has it on, so a rank with CDDP_DESYNC_CHECK=0 does not desync the others */
  int check = cddp__knob_int(CDDP_KNOB_DESYNC_CHECK) != 0;
  return cddp__peers_exchange(c->view, c->rank, c->world, c->round, c->cfg.timeout_ms, &me, check, c->peers,
                              &c->desync_check);
}

/* ---------------------------------------------------------------- hierarchical choice */

/* Several hosts (auto) or asked for (hier): shm within each host composed with tcp across
 * them when every host runs the same number of ranks (auto: >= 2 hosts with >= 2 ranks
 * each), otherwise the flat tcp transport. */
static const cddp__transport_t *pick_hier(const cddp_comm_t *c, int all_local) {
  int asked = !strcasecmp(c->cfg.transport, "hier"), hosts, per_host;
  if (!asked && (all_local || strcasecmp(c->cfg.transport, "auto"))) return NULL;
  int uniform = cddp__hier_placement(c->peers, c->world, &hosts, &per_host);
  if (uniform && (asked || (hosts >= 2 && per_host >= 2))) return &cddp__transport_hier;
  if (asked || !uniform)
    CDDP_INFO(CDDP_SUB_COMM, "hierarchical collectives not used (%s): flat tcp over %d hosts",
              uniform ? "one rank per host" : "hosts run different numbers of ranks", hosts);
  return NULL;
}

/* ---------------------------------------------------------------- lifecycle */

/* Under mu. The message is written before the code is published (execute reads it lock-free). */
static void record_error(cddp_comm_t *c, cddp_result_t r, const char *msg) {
  if (c->error == CDDP_OK) {
    snprintf(c->error_msg, sizeof c->error_msg, "%s", msg && msg[0] ? msg : cddp_strerror(r));
    __atomic_store_n(&c->error, r, __ATOMIC_RELEASE);
  }
}

cddp_result_t cddp_comm_init(cddp_comm_t **out, cddp_store_t *store, int rank, int world, int round,
                             const cddp_comm_config_t *cfg) {
  cddp_result_t ret = CDDP_OK;
  cddp_comm_t *c = NULL;
  *out = NULL;
  if (!store) return cddp__fail(CDDP_INVALID_ARG, "comm init: store is NULL");
  if (world < 1 || rank < 0 || rank >= world)
    return cddp__fail(CDDP_INVALID_ARG, "comm init: rank %d is not in [0, world %d)", rank, world);
  if (round < 0) return cddp__fail(CDDP_INVALID_ARG, "comm init: round %d is negative", round);

  c = calloc(1, sizeof *c);
  if (!c) return cddp__fail(CDDP_SYSTEM, "comm init: out of memory");
  c->rank = rank, c->world = world, c->round = round;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  CDDP_CHECK_GOTO(resolve_config(&c->cfg, cfg), ret, fail);
  c->peers = calloc((size_t)world, sizeof *c->peers);
  if (!c->peers) {
    ret = cddp__fail(CDDP_SYSTEM, "comm init: out of memory");
    goto fail;
  }
  char prefix[48];
  snprintf(prefix, sizeof prefix, "comm/r%d/", round);
  CDDP_CHECK_GOTO(cddp_store_prefix_create(&c->view, store, prefix, 0), ret, fail);
  CDDP_CHECK_GOTO(exchange_peers(c), ret, fail);

  int all_local = 1;
  for (int r = 1; r < world; r++) all_local &= !strcmp(c->peers[r].host_id, c->peers[0].host_id);
  c->ctx = (cddp__comm_ctx_t){.rank = rank, .world = world, .round = round, .store = c->view,
                              .cfg = &c->cfg, .peers = c->peers, .aborted = &c->aborted,
                              .all_local = all_local, .desync_store = c->view};

  if (world > 1 || !strcmp(c->cfg.backend, "nccl")) { /* nccl: device buffers, even alone */
    if (!strcmp(c->cfg.backend, "nccl")) {
      c->tp = &cddp__transport_nccl;
    } else if (!strcmp(c->cfg.backend, "mpi")) {
      c->tp = &cddp__transport_mpi; /* every collective on MPI's; the transport knob does not apply */
    } else if (!strcasecmp(c->cfg.transport, "shm")) {
      if (!all_local) {
        int r = 1;
        while (!strcmp(c->peers[r].host_id, c->peers[0].host_id)) r++;
        ret = cddp__fail(CDDP_INVALID_USAGE, "transport shm asked for, but rank 0 is on host %s and rank %d on host %s",
                         c->peers[0].host, r, c->peers[r].host);
        goto fail;
      }
      c->tp = &cddp__transport_shm;
    } else if ((c->tp = pick_hier(c, all_local))) {
      /* hierarchical */
    } else if (!strcasecmp(c->cfg.transport, "tcp") || !strcasecmp(c->cfg.transport, "hier") || !all_local) {
      c->tp = &cddp__transport_tcp;
    } else {
      c->tp = &cddp__transport_shm;
    }
    CDDP_CHECK_GOTO(c->tp->init(&c->ctx, &c->tp_state), ret, fail);
    snprintf(c->transport_name, sizeof c->transport_name, "%s", c->tp->name);
  } else {
    strcpy(c->transport_name, "self");
  }
  static const char *algo_names[CDDP_ALGO_COUNT] = {"auto", "ring", "direct"};
  CDDP_INFO(CDDP_SUB_COMM,
            "comm ready: rank %d of %d, round %d, transport %s, %s host%s, algorithm %s (auto: direct "
            "up to %lld B, ring above; shm allreduce: the tuner's table), timeout %d ms",
            rank, world, round, c->transport_name, all_local ? "one" : "several", all_local ? "" : "s",
            algo_names[c->cfg.algo], (long long)cddp__knob_int(CDDP_KNOB_DIRECT_MAX_BYTES), c->cfg.timeout_ms);
  *out = c;
  return CDDP_OK;
fail:
  cddp_comm_destroy(c);
  return ret;
}

static void *progress_main(void *arg);

static void stop_thread(cddp_comm_t *c) {
  pthread_mutex_lock(&c->mu);
  int started = c->thread_started;
  c->stopping = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (started) pthread_join(c->thread, NULL);
  c->thread_started = 0;
}

cddp_result_t cddp_comm_finalize(cddp_comm_t *c) {
  if (!c) return CDDP_OK;
  pthread_mutex_lock(&c->mu);
  while (c->head || c->busy) pthread_cond_wait(&c->cv, &c->mu);
  cddp_result_t r = c->error;
  pthread_mutex_unlock(&c->mu);
  stop_thread(c);
  if (r != CDDP_OK) cddp__set_error_text(c->error_msg);
  return r;
}

void cddp_comm_destroy(cddp_comm_t *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  int outstanding = c->head || c->busy;
  pthread_mutex_unlock(&c->mu);
  if (outstanding) cddp_comm_abort(c);
  cddp_comm_finalize(c);
  if (c->tp && c->tp_state) c->tp->destroy(c->tp_state);
  cddp_store_close(c->view);
  free(c->peers);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

void cddp_comm_abort(cddp_comm_t *c) {
  if (!c) return;
  __atomic_store_n(&c->aborted, 1, __ATOMIC_SEQ_CST);
  void *state = __atomic_load_n(&c->tp_state, __ATOMIC_ACQUIRE);
  if (c->tp && state && c->tp->wake) c->tp->wake(state);
}

cddp_result_t cddp_comm_last_error(const cddp_comm_t *c, const char **msg) {
  if (msg) *msg = c ? c->error_msg : "";
  return c ? c->error : CDDP_INVALID_ARG;
}

void *cddp__comm_transport_state(cddp_comm_t *c, const char **name) {
  if (name) *name = c->transport_name;
  return c->tp_state;
}

int cddp_comm_rank(const cddp_comm_t *c) { return c->rank; }
int cddp_comm_world(const cddp_comm_t *c) { return c->world; }
const char *cddp_comm_transport(const cddp_comm_t *c) { return c->transport_name; }

/* ---------------------------------------------------------------- execution */

/* world == 1: every collective is a copy (AVG divides by one). */
static void run_self(const cddp__coll_t *co) {
  size_t bytes = co->count * cddp_dtype_size(co->dt);
  if (co->kind == CDDP__BARRIER || co->kind == CDDP__BROADCAST) return;
  if (co->send != co->recv && bytes) memmove(co->recv, co->send, bytes);
}

/* Runs one collective on the calling thread; the caller holds the "busy" token. */
static cddp_result_t execute(cddp_comm_t *c, cddp__coll_t *co, char *err, size_t errsize) {
  cddp_result_t r;
  if (__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE)) {
    r = cddp__fail(CDDP_ABORTED, "communicator (rank %d, round %d) was aborted", c->rank, c->round);
  } else if (__atomic_load_n(&c->error, __ATOMIC_ACQUIRE) != CDDP_OK) {
    r = c->error;
    cddp__set_error_text(c->error_msg);
  } else if (!c->tp) {
    run_self(co);
    r = CDDP_OK;
  } else {
    /* the coarse clock keeps the latency path cheap; it only ever makes the bound shorter */
    co->deadline = cddp__now_coarse_ns() + (uint64_t)c->cfg.timeout_ms * 1000000ull;
    uint64_t seq = cddp__flight_start((int)co->kind, (int)co->dt, (int)co->op, co->root, co->count, c->rank, c->world,
                                      c->round, ++c->n_coll);
    if (c->desync_check)
      co->fp = (cddp__fp_t){.count = co->count, .seq = (uint32_t)c->n_coll, .rank = (uint32_t)c->rank,
                            .kind = (uint8_t)co->kind, .dt = (uint8_t)co->dt,
                            .arg = (uint16_t)(co->kind == CDDP__BROADCAST ? co->root : (int)co->op)};
    r = c->tp->run(c->tp_state, co);
    cddp__flight_end(seq, r == CDDP_OK);
    /* a peer that found a desync failed us too: say what it found, not only that it left */
    if (c->desync_check && (r == CDDP_REMOTE || r == CDDP_TIMEOUT)) r = cddp__desync_explain(c->view, r);
  }
  if (r != CDDP_OK) snprintf(err, errsize, "%s", cddp_last_error());
  return r;
}

static void complete_locked(cddp_comm_t *c, cddp_request_t *req, cddp_result_t r) {
  req->result = r;
  if (r != CDDP_OK) record_error(c, r, req->error);
  __atomic_store_n(&req->done, 1, __ATOMIC_RELEASE);
}

static void *progress_main(void *arg) {
  cddp_comm_t *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!c->stopping && (!c->head || c->busy)) pthread_cond_wait(&c->cv, &c->mu);
    if (!c->head) break; /* stopping and drained */
    cddp_request_t *req = c->head;
    c->head = req->next;
    if (!c->head) c->tail = NULL;
    c->busy = 1;
    pthread_mutex_unlock(&c->mu);
    cddp_result_t r = execute(c, &req->coll, req->error, sizeof req->error);
    pthread_mutex_lock(&c->mu);
    c->busy = 0;
    complete_locked(c, req, r);
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

static cddp_result_t check_coll(const cddp_comm_t *c, const cddp__coll_t *co) {
  if (!c) return cddp__fail(CDDP_INVALID_ARG, "communicator is NULL");
  if ((unsigned)co->dt >= CDDP_DTYPE_COUNT) return cddp__fail(CDDP_INVALID_ARG, "dtype %d is not a cddp_dtype_t", (int)co->dt);
  if ((unsigned)co->op >= CDDP_REDOP_COUNT) return cddp__fail(CDDP_INVALID_ARG, "op %d is not a cddp_redop_t", (int)co->op);
  if (co->count > (SIZE_MAX / 8) / (size_t)c->world)
    return cddp__fail(CDDP_INVALID_ARG, "count %zu is too large", co->count);
  if (co->count && co->kind != CDDP__BARRIER) {
    if (!co->recv) return cddp__fail(CDDP_INVALID_ARG, "receive buffer is NULL");
    if (!co->send && co->kind != CDDP__BROADCAST) return cddp__fail(CDDP_INVALID_ARG, "send buffer is NULL");
  }
  if (co->kind == CDDP__BROADCAST && (co->root < 0 || co->root >= c->world))
    return cddp__fail(CDDP_INVALID_ARG, "broadcast root %d is not in [0, %d)", co->root, c->world);
  return CDDP_OK;
}

static cddp_result_t start(cddp_comm_t *c, const cddp__coll_t *co, cddp_request_t **out) {
  CDDP_CHECK(check_coll(c, co));
  cddp_request_t *req = calloc(1, sizeof *req);
  if (!req) return cddp__fail(CDDP_SYSTEM, "out of memory for a request");
  req->comm = c;
  req->coll = *co;
  pthread_mutex_lock(&c->mu);
  if (!c->thread_started) {
    c->stopping = 0;
    if (pthread_create(&c->thread, NULL, progress_main, c) != 0) {
      pthread_mutex_unlock(&c->mu);
      free(req);
      return cddp__fail(CDDP_SYSTEM, "cannot start the progress thread");
    }
    c->thread_started = 1;
  }
  if (c->tail) c->tail->next = req;
  else c->head = req;
  c->tail = req;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  *out = req;
  return CDDP_OK;
}

cddp_result_t cddp_test(cddp_request_t *req, int *done) {
  *done = 0;
  if (!req) return cddp__fail(CDDP_INVALID_ARG, "request is NULL");
  if (!__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) return CDDP_OK;
  *done = 1; /* the progress thread no longer touches a completed request */
  cddp_result_t r = req->result;
  if (r != CDDP_OK) cddp__set_error_text(req->error);
  free(req);
  return r;
}

cddp_result_t cddp_wait(cddp_request_t *req) {
  if (!req) return cddp__fail(CDDP_INVALID_ARG, "request is NULL");
  cddp_comm_t *c = req->comm;
  pthread_mutex_lock(&c->mu);
  while (!__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) pthread_cond_wait(&c->cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
  cddp_result_t r = req->result;
  if (r != CDDP_OK) cddp__set_error_text(req->error);
  free(req);
  return r;
}

/* Blocking call: runs inline when nothing is queued or running (no thread hand-off on the
 * latency path), otherwise queues behind the outstanding requests to keep the order. */
static cddp_result_t run_blocking(cddp_comm_t *c, cddp__coll_t *co) {
  CDDP_CHECK(check_coll(c, co));
  pthread_mutex_lock(&c->mu);
  if (!c->head && !c->busy) {
    c->busy = 1;
    pthread_mutex_unlock(&c->mu);
    char err[256];
    cddp_result_t r = execute(c, co, err, sizeof err);
    pthread_mutex_lock(&c->mu);
    c->busy = 0;
    if (r != CDDP_OK) record_error(c, r, err);
    if (c->head) pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (r != CDDP_OK) cddp__set_error_text(err);
    return r;
  }
  pthread_mutex_unlock(&c->mu);
  cddp_request_t *req;
  CDDP_CHECK(start(c, co, &req));
  return cddp_wait(req);
}

/* ---------------------------------------------------------------- public collectives */

#define COLL(kind_, send_, recv_, count_, dt_, op_, root_) \
  (cddp__coll_t){.kind = (kind_), .send = (send_), .recv = (recv_), .count = (count_), \
                 .dt = (dt_), .op = (op_), .root = (root_), .algo = c ? c->cfg.algo : CDDP_ALGO_AUTO}

cddp_result_t cddp_allreduce(cddp_comm_t *c, const void *send, void *recv, size_t count,
                             cddp_dtype_t dt, cddp_redop_t op) {
  cddp__coll_t co = COLL(CDDP__ALLREDUCE, send, recv, count, dt, op, 0);
  return run_blocking(c, &co);
}
cddp_result_t cddp_reduce_scatter(cddp_comm_t *c, const void *send, void *recv, size_t recvcount,
                                  cddp_dtype_t dt, cddp_redop_t op) {
  cddp__coll_t co = COLL(CDDP__REDUCE_SCATTER, send, recv, recvcount, dt, op, 0);
  return run_blocking(c, &co);
}
cddp_result_t cddp_allgather(cddp_comm_t *c, const void *send, void *recv, size_t sendcount,
                             cddp_dtype_t dt) {
  cddp__coll_t co = COLL(CDDP__ALLGATHER, send, recv, sendcount, dt, CDDP_SUM, 0);
  return run_blocking(c, &co);
}
cddp_result_t cddp_broadcast(cddp_comm_t *c, void *buf, size_t count, cddp_dtype_t dt, int root) {
  cddp__coll_t co = COLL(CDDP__BROADCAST, buf, buf, count, dt, CDDP_SUM, root);
  return run_blocking(c, &co);
}
cddp_result_t cddp_barrier(cddp_comm_t *c) {
  cddp__coll_t co = COLL(CDDP__BARRIER, NULL, NULL, 0, CDDP_F32, CDDP_SUM, 0);
  return run_blocking(c, &co);
}

cddp_result_t cddp_iallreduce(cddp_comm_t *c, const void *send, void *recv, size_t count,
                              cddp_dtype_t dt, cddp_redop_t op, cddp_request_t **req) {
  cddp__coll_t co = COLL(CDDP__ALLREDUCE, send, recv, count, dt, op, 0);
  return start(c, &co, req);
}
cddp_result_t cddp_ireduce_scatter(cddp_comm_t *c, const void *send, void *recv, size_t recvcount,
                                   cddp_dtype_t dt, cddp_redop_t op, cddp_request_t **req) {
  cddp__coll_t co = COLL(CDDP__REDUCE_SCATTER, send, recv, recvcount, dt, op, 0);
  return start(c, &co, req);
}
cddp_result_t cddp_iallgather(cddp_comm_t *c, const void *send, void *recv, size_t sendcount,
                              cddp_dtype_t dt, cddp_request_t **req) {
  cddp__coll_t co = COLL(CDDP__ALLGATHER, send, recv, sendcount, dt, CDDP_SUM, 0);
  return start(c, &co, req);
}
cddp_result_t cddp_ibroadcast(cddp_comm_t *c, void *buf, size_t count, cddp_dtype_t dt, int root,
                              cddp_request_t **req) {
  cddp__coll_t co = COLL(CDDP__BROADCAST, buf, buf, count, dt, CDDP_SUM, root);
  return start(c, &co, req);
}

/* ---------------------------------------------------------------- zero-copy buffers */

/* Collective, so it runs in order with collectives: wait until nothing is outstanding. */
static void acquire_idle(cddp_comm_t *c) {
  pthread_mutex_lock(&c->mu);
  while (c->head || c->busy) pthread_cond_wait(&c->cv, &c->mu);
  c->busy = 1;
  pthread_mutex_unlock(&c->mu);
}

static void release_idle(cddp_comm_t *c) {
  pthread_mutex_lock(&c->mu);
  c->busy = 0;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

cddp_result_t cddp_comm_mem_alloc(cddp_comm_t *c, size_t bytes, void **ptr) {
  *ptr = NULL;
  if (!c) return cddp__fail(CDDP_INVALID_ARG, "communicator is NULL");
  if (c->tp && c->tp->mem_alloc) {
    acquire_idle(c);
    cddp_result_t r = c->tp->mem_alloc(c->tp_state, bytes, ptr);
    release_idle(c);
    return r;
  }
  /* no transport support: ordinary page-aligned memory */
  if (posix_memalign(ptr, 4096, bytes ? bytes : 1) != 0)
    return cddp__fail(CDDP_SYSTEM, "cannot allocate %zu bytes", bytes);
  return CDDP_OK;
}

cddp_result_t cddp_comm_mem_free(cddp_comm_t *c, void *ptr) {
  if (!c) return cddp__fail(CDDP_INVALID_ARG, "communicator is NULL");
  if (!ptr) return CDDP_OK;
  if (c->tp && c->tp->mem_free) {
    acquire_idle(c);
    cddp_result_t r = c->tp->mem_free(c->tp_state, ptr);
    release_idle(c);
    return r;
  }
  free(ptr);
  return CDDP_OK;
}

cddp_result_t cddp_comm_mem_alloc_one(cddp_comm_t *c, size_t bytes, void **ptr) {
  *ptr = NULL;
  if (!c || !c->tp || !c->tp->mem_alloc_one)
    return cddp__fail(CDDP_INVALID_USAGE, "one buffer for every rank: the %s transport maps no shared memory",
                      c ? c->transport_name : "(no)");
  acquire_idle(c);
  cddp_result_t r = c->tp->mem_alloc_one(c->tp_state, bytes, ptr);
  release_idle(c);
  return r;
}

/* world.c - a worker joins its job: environment -> store -> communicator, leaves it, and
 * re-forms it in place after a peer or a whole node died (cddp run --restart-mode replace). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cddp/world.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"
#include "job/elastic.h"
#include "world/world_internal.h"

#define WATCH_SLICE_MS 250 /* how often the watcher looks at its stop flag */

/* The generation watcher: a thread with its own store connection; when a generation past the
 * one w->comm belongs to is announced, it aborts w->comm, so every blocked collective returns
 * ABORTED at once (a frozen or cut-off peer would otherwise hold it until the comm's
 * timeout). A join generation (nobody lost: "join node ...") only raises join_gen: the ranks
 * agree to re-form at a step boundary (cddp_world_should_reform). */
typedef struct cddp__gen_watch {
  pthread_t th;
  pthread_mutex_t mu; /* guards gen and comm against the main thread's changes */
  cddp_store_t *store;
  int64_t gen;        /* the world's generation and communicator, kept here (not a pointer to */
  cddp_comm_t *comm;  /* the world), guarded by mu */
  cddp_comm_t *also;  /* the caller's communicator of that generation, aborted with it (mu) */
  int rank;           /* for the log lines */
  int stop;
  int64_t join_gen; /* the latest join generation seen (atomic) */
} gen_watch_t;

static int64_t watch_gen(gen_watch_t *f) {
  pthread_mutex_lock(&f->mu);
  int64_t g = f->gen;
  pthread_mutex_unlock(&f->mu);
  return g;
}

/* 1 when elastic/gen/<g> announces a join only. */
static int is_join(cddp_store_t *s, int64_t g) {
  cddp__job_announce_t a;
  return cddp__gen_what(s, g, &a) && a.kind == CDDP__GEN_JOIN;
}

static void *watch_main(void *arg) {
  gen_watch_t *f = arg;
  int64_t seen = -1, base = -1; /* generations up to seen are known to be joins past base */
  while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) {
    int64_t g = watch_gen(f);
    if (g != base) base = g, seen = g; /* re-formed: start over past the new generation */
    cddp__jobkey_t key = cddp__job_key(CDDP__JK_GEN_ANNOUNCE, seen + 1, 0);
    const char *k = key.s;
    cddp_result_t r = cddp_store_wait(f->store, &k, 1, WATCH_SLICE_MS);
    if (r == CDDP_TIMEOUT) continue;
    if (r != CDDP_OK) break; /* the store is gone: the job is over */
    if (is_join(f->store, seen + 1)) { /* not a failure: re-form at the next step boundary */
      seen++;
      __atomic_store_n(&f->join_gen, seen, __ATOMIC_RELEASE);
      CDDP_INFO(CDDP_SUB_ENV, "rank %d: generation %lld takes a node in: re-forming at the next step boundary",
                f->rank, (long long)seen);
      continue;
    }
    pthread_mutex_lock(&f->mu);
    if (f->gen == g && f->comm) {
      CDDP_INFO(CDDP_SUB_ENV, "rank %d: generation %lld announced: aborting the communicator of %lld", f->rank,
                (long long)seen + 1, (long long)g);
      cddp_comm_abort(f->comm);
      if (f->also) cddp_comm_abort(f->also);
    }
    pthread_mutex_unlock(&f->mu);
    while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE) && watch_gen(f) == g) usleep(20000);
  }
  return NULL;
}

static void watch_start(cddp_world_t *w) {
  gen_watch_t *f = calloc(1, sizeof *f);
  if (!f) return;
  pthread_mutex_init(&f->mu, NULL);
  f->gen = w->env.gen, f->comm = w->comm, f->rank = w->rank;
  cddp_store_server_t *hosted = NULL;
  if (cddp_env_connect(&w->env, 10000, &f->store, &hosted) != CDDP_OK || hosted ||
      pthread_create(&f->th, NULL, watch_main, f) != 0) {
    CDDP_WARN("rank %d: no generation watcher (%s): a silent peer is found by the comm timeout only", w->rank,
              cddp_last_error());
    cddp_env_disconnect(f->store, hosted);
    pthread_mutex_destroy(&f->mu);
    free(f);
    return;
  }
  w->watch = f;
}

static void watch_stop(cddp_world_t *w) {
  gen_watch_t *f = w->watch;
  if (!f) return;
  __atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
  pthread_join(f->th, NULL);
  cddp_store_close(f->store);
  pthread_mutex_destroy(&f->mu);
  free(f);
  w->watch = NULL;
}

/* The world's communicator and generation change: the watcher's copies change with them. */
static void watch_set(cddp_world_t *w, cddp_comm_t *comm, int gen) {
  gen_watch_t *f = w->watch;
  if (f) pthread_mutex_lock(&f->mu);
  w->comm = comm, w->env.gen = gen;
  if (f) f->comm = comm, f->gen = gen, f->rank = w->rank, f->also = NULL;
  if (f) pthread_mutex_unlock(&f->mu);
}

static cddp_result_t form(cddp_world_t *w, uint64_t deadline, int64_t min_gen) {
  int64_t g = CDDP_MAX((int64_t)w->env.gen, min_gen);
  const char *aid = getenv("CDDP_AGENT_ID");
  cddp__gen_place_t place = {.agent_id = aid && *aid ? atoi(aid) : -1, .local_rank = w->env.local_rank};
  cddp_comm_t *comm = NULL;
  cddp_store_t *view = NULL;
  cddp_result_t r = cddp__gen_form(w->store, w->rank, w->world, w->env.round, &w->cfg, g, deadline, &place, &comm,
                                   &view, &g);
  if (r != CDDP_OK) {
    w->gone = place.gone;
    return r;
  }
  w->gen_view = view;
  if (place.agent_id >= 0) w->rank = place.rank, w->world = place.world;
  watch_set(w, comm, (int)g);
  cddp__log_set_rank(w->rank);
  return CDDP_OK;
}

/* The join itself: on failure w holds nothing but why (w->gone). */
static cddp_result_t join(cddp_world_t *w, const cddp_comm_config_t *cfg) {
  CDDP_CHECK(cddp_env_read(&w->env));
  w->rank = w->env.rank, w->world = w->env.world_size;
  cddp__log_set_rank(w->rank);
  cddp_result_t r = cddp_env_connect(&w->env, (int)cddp__knob_int(CDDP_KNOB_STORE_TIMEOUT_MS),
                                     &w->store, &w->hosted);
  if (r != CDDP_OK) {
    char why[512]; /* cddp__fail rewrites the buffer cddp_last_error points to */
    snprintf(why, sizeof why, "%s", cddp_last_error());
    return cddp__fail(r, "rank %d: cannot reach the job's store at %s:%d: %s", w->rank,
                      w->env.master_addr, w->env.master_port, why);
  }
  if (cfg) w->cfg = *cfg;
  else cddp_comm_config_default(&w->cfg);
  if (cddp_world_can_recover(w)) {
    cddp_comm_config_t full;
    cddp_comm_config_default(&full);
    int ms = w->cfg.timeout_ms > 0 ? w->cfg.timeout_ms : full.timeout_ms;
    int spawned_in = w->env.gen;
    r = form(w, cddp__deadline_ms(ms), 0);
    if (r == CDDP_OK) {
      /* its peers of that generation include a replacement, which goes straight to the
       * state sync: so must this rank, or it would run the first start's collectives alone */
      w->late = w->env.gen > spawned_in;
      watch_start(w);
    }
  } else {
    r = cddp_comm_init(&w->comm, w->store, w->rank, w->world, w->env.gen, &w->cfg); /* restart-all: one per restart */
  }
  if (r != CDDP_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", cddp_last_error());
    cddp_env_disconnect(w->store, w->hosted);
    w->store = NULL, w->hosted = NULL;
    if (w->gone) return cddp__fail(r, "rank %d: %s", w->rank, why);
    return cddp__fail(r, "rank %d: communicator: %s", w->rank, why);
  }
  return CDDP_OK;
}

cddp_result_t cddp_world_join(cddp_world_t **out, const cddp_comm_config_t *cfg) {
  cddp_world_t *w = calloc(1, sizeof *w);
  *out = w;
  if (!w) return cddp__fail(CDDP_SYSTEM, "cddp_world_join: out of memory");
  return join(w, cfg);
}

int cddp_world_rank(const cddp_world_t *w) { return w ? w->rank : 0; }
int cddp_world_size(const cddp_world_t *w) { return w ? w->world : 0; }
cddp_comm_t *cddp_world_comm(const cddp_world_t *w) { return w ? w->comm : NULL; }
cddp_store_t *cddp_world_store(const cddp_world_t *w) { return w ? w->store : NULL; }
const cddp_env_t *cddp_world_env(const cddp_world_t *w) {
  static const cddp_env_t none;
  return w ? &w->env : &none;
}

int cddp_world_can_recover(const cddp_world_t *w) {
  /* any size: a world of one holds the whole state, so a node that joins it (one that comes back
   * after the world shrank to one) is taken in place like any other; if the one worker dies its
   * replacement has no survivor and restores from disk, as when every worker dies at once */
  return w && w->env.source == CDDP_ENV_AGENT && w->env.replace_mode;
}

int cddp_world_replacement(const cddp_world_t *w) { return w && (w->env.replacement || w->late); }

int cddp_world_gone(const cddp_world_t *w) { return w ? w->gone : 0; }

int cddp_world_superseded(const cddp_world_t *w) {
  int64_t latest;
  if (!cddp_world_can_recover(w) || !w->store || cddp__gen_latest(w->store, &latest) != CDDP_OK) {
    cddp__clear_error();
    return 0;
  }
  for (int64_t g = (int64_t)w->env.gen + 1; g <= latest; g++)
    if (!is_join(w->store, g)) return 1;
  return 0;
}

cddp_result_t cddp_world_allow_sizes(const cddp_world_t *w, const int *sizes, int n) {
  if (!w || !w->store) return cddp__fail(CDDP_INVALID_USAGE, "cddp_world_allow_sizes: the world has no store (join first)");
  return cddp__job_worlds_publish(w->store, sizes, n);
}

void cddp_world_stop(cddp_world_t *w, const char *line) {
  if (!w) return;
  if (w->store) (void)cddp__job_stop(w->store, line);
  w->gone = 2;
}

int cddp_world_generation(const cddp_world_t *w) { return w ? w->env.gen : 0; }

void cddp_world_abort_with(cddp_world_t *w, cddp_comm_t *comm) {
  gen_watch_t *f = w ? w->watch : NULL;
  if (!f) return; /* no watcher (restart-all): nothing aborts the world's either */
  pthread_mutex_lock(&f->mu);
  f->also = comm;
  pthread_mutex_unlock(&f->mu);
}

int cddp_world_should_reform(const cddp_world_t *w) {
  gen_watch_t *f = w ? w->watch : NULL;
  return f && __atomic_load_n(&f->join_gen, __ATOMIC_ACQUIRE) > (int64_t)w->env.gen;
}

static void drop_comm(cddp_world_t *w) {
  cddp_comm_t *c = w->comm;
  watch_set(w, NULL, w->env.gen);
  if (c) cddp_comm_abort(c);
  cddp_comm_destroy(c);
  cddp_store_close(w->gen_view);
  w->gen_view = NULL;
}

cddp_result_t cddp_world_recover(cddp_world_t *w) {
  if (!w) return cddp__fail(CDDP_INVALID_USAGE, "cddp_world_recover: no world (join first)");
  if (!cddp_world_can_recover(w)) {
    drop_comm(w);
    return cddp__fail(CDDP_INVALID_USAGE, "rank %d: no in-place recovery here (it needs `cddp run --restart-mode "
                      "replace`)", w->rank);
  }
  int ms = (int)cddp__knob_int(CDDP_KNOB_RECOVER_TIMEOUT_MS);
  uint64_t deadline = cddp__deadline_ms(ms);
  drop_comm(w);
  cddp_result_t r = cddp__gen_wait_past(w->store, w->env.gen, cddp__ms_left(deadline));
  if (r == CDDP_TIMEOUT)
    return cddp__fail(r, "rank %d: the job did not re-form within %.1f s (CDDP_RECOVER_TIMEOUT_MS) after generation %d: "
                      "restarts used up, or its agent is gone", w->rank, ms / 1e3, w->env.gen);
  CDDP_CHECK(r);
  return form(w, deadline, (int64_t)w->env.gen + 1);
}

/* Every rank says it is done; rank 0, which may host the store, waits for the others. */
static void done_barrier(cddp_world_t *w) {
  cddp__jobkey_t key = cddp__job_key(CDDP__JK_WORLD_DONE, w->env.gen, w->rank);
  if (cddp_store_set(w->store, key.s, CDDP__JOB_FLAG, CDDP__JOB_FLAG_LEN) != CDDP_OK || w->rank != 0) return;
  uint64_t deadline = cddp__deadline_ms(10000);
  for (int r = 1; r < w->world; r++) {
    key = cddp__job_key(CDDP__JK_WORLD_DONE, w->env.gen, r);
    const char *keys[1] = {key.s};
    if (cddp_store_wait(w->store, keys, 1, cddp__ms_left(deadline)) != CDDP_OK) return;
  }
}

void cddp_world_leave(cddp_world_t *w, int clean) {
  if (!w) return;
  watch_stop(w);
  if (!clean && w->comm) cddp_comm_abort(w->comm);
  cddp_comm_destroy(w->comm);
  w->comm = NULL;
  cddp_store_close(w->gen_view);
  if (clean && w->store) done_barrier(w);
  cddp_env_disconnect(w->store, w->hosted);
  free(w);
}

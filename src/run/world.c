/* world.c - a worker joins its job: environment -> store -> communicator, leaves it, and
 * re-forms it in place after a peer died (cddp run --restart-mode replace). */
#include <stdio.h>
#include <string.h>

#include "cddp/ddp.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"
#include "run/elastic.h"

static cddp_result_t form(cddp_world_t *w, uint64_t deadline) {
  int64_t g = w->env.gen;
  CDDP_CHECK(cddp__gen_form(w->store, w->rank, w->world, w->env.round, &w->cfg, g, deadline, &w->comm, &w->gen_view, &g));
  w->env.gen = (int)g;
  return CDDP_OK;
}

cddp_result_t cddp_world_join(cddp_world_t *w, const cddp_comm_config_t *cfg) {
  memset(w, 0, sizeof *w);
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
    r = form(w, cddp__deadline_ms(ms));
  } else {
    r = cddp_comm_init(&w->comm, w->store, w->rank, w->world, w->env.round, &w->cfg);
  }
  if (r != CDDP_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", cddp_last_error());
    cddp_env_disconnect(w->store, w->hosted);
    w->store = NULL, w->hosted = NULL;
    return cddp__fail(r, "rank %d: communicator: %s", w->rank, why);
  }
  return CDDP_OK;
}

int cddp_world_can_recover(const cddp_world_t *w) {
  return w->env.source == CDDP_ENV_AGENT && w->env.replace_mode && w->world > 1;
}

int cddp_world_replacement(const cddp_world_t *w) { return w->env.replacement; }

int cddp_world_generation(const cddp_world_t *w) { return w->env.gen; }

static void drop_comm(cddp_world_t *w) {
  if (w->comm) cddp_comm_abort(w->comm);
  cddp_comm_destroy(w->comm);
  w->comm = NULL;
  cddp_store_close(w->gen_view);
  w->gen_view = NULL;
}

cddp_result_t cddp_world_recover(cddp_world_t *w) {
  if (!cddp_world_can_recover(w)) {
    drop_comm(w);
    return cddp__fail(CDDP_INVALID_USAGE, "rank %d: no in-place recovery here (it needs `cddp run --restart-mode "
                      "replace` and a world of 2 or more)", w->rank);
  }
  int ms = (int)cddp__knob_int(CDDP_KNOB_RECOVER_TIMEOUT_MS);
  uint64_t deadline = cddp__deadline_ms(ms);
  drop_comm(w);
  cddp_result_t r = cddp__gen_wait_past(w->store, w->env.gen, cddp__ms_left(deadline));
  if (r == CDDP_TIMEOUT)
    return cddp__fail(r, "rank %d: no replacement for the failed worker within %.1f s (CDDP_RECOVER_TIMEOUT_MS) after "
                      "generation %d: restarts used up, or its agent is gone", w->rank, ms / 1e3, w->env.gen);
  CDDP_CHECK(r);
  return form(w, deadline);
}

/* Every rank says it is done; rank 0, which may host the store, waits for the others. */
static void done_barrier(cddp_world_t *w) {
  char key[64];
  snprintf(key, sizeof key, "world/r%d/done/%d", w->env.round, w->rank);
  if (cddp_store_set(w->store, key, "1", 1) != CDDP_OK || w->rank != 0) return;
  uint64_t deadline = cddp__deadline_ms(10000);
  for (int r = 1; r < w->world; r++) {
    snprintf(key, sizeof key, "world/r%d/done/%d", w->env.round, r);
    const char *keys[1] = {key};
    if (cddp_store_wait(w->store, keys, 1, cddp__ms_left(deadline)) != CDDP_OK) return;
  }
}

void cddp_world_leave(cddp_world_t *w, int clean) {
  if (!clean && w->comm) cddp_comm_abort(w->comm);
  cddp_comm_destroy(w->comm);
  w->comm = NULL;
  cddp_store_close(w->gen_view);
  w->gen_view = NULL;
  if (clean && w->store) done_barrier(w);
  cddp_env_disconnect(w->store, w->hosted);
  w->store = NULL, w->hosted = NULL;
}

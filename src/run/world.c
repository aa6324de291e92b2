/* world.c - a worker joins its job: environment -> store -> communicator, and leaves it. */
#include <stdio.h>
#include <string.h>

#include "cddp/ddp.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"

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
  cddp_comm_config_t def;
  if (!cfg) cddp_comm_config_default(&def), cfg = &def;
  r = cddp_comm_init(&w->comm, w->store, w->rank, w->world, w->env.round, cfg);
  if (r != CDDP_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", cddp_last_error());
    cddp_env_disconnect(w->store, w->hosted);
    w->store = NULL, w->hosted = NULL;
    return cddp__fail(r, "rank %d: communicator: %s", w->rank, why);
  }
  return CDDP_OK;
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
  if (clean && w->store) done_barrier(w);
  cddp_env_disconnect(w->store, w->hosted);
  w->store = NULL, w->hosted = NULL;
}

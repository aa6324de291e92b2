/* gen_form.c - a worker builds the communicator of the job's latest generation: its place by
 * the member record, a wait below MIN, and starting over when a later generation comes. */
#include <stdio.h>
#include <stdlib.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"
#include "job/elastic.h"

/* The place of this worker in generation g by its member record: OK, or NOT_FOUND with
 * place->gone set (dropped or stopped); no record: the given rank and world stand. *wait_ms > 0:
 * the record waits below MIN (this generation never forms; the next one decides). */
static cddp_result_t find_place(cddp_store_t *s, int64_t g, cddp__gen_place_t *p, int *rank, int *world,
                                int *wait_ms) {
  *wait_ms = 0;
  if (!p || p->agent_id < 0) return CDDP_OK;
  cddp__members_t *m = malloc(sizeof *m);
  if (!m) return cddp__fail(CDDP_SYSTEM, "out of memory");
  cddp_result_t r = cddp__members_read(s, g, m);
  if (r == CDDP_NOT_FOUND) {
    cddp__clear_error();
    free(m);
    return CDDP_OK;
  }
  if (r == CDDP_OK && m->stop) {
    p->gone = 2;
    r = cddp__fail(CDDP_NOT_FOUND, "%s", m->line);
  } else if (r == CDDP_OK) {
    int base, w;
    *wait_ms = m->wait_ms;
    if (cddp__members_find(m, p->agent_id, &base, &w) < 0) {
      p->gone = 1;
      r = cddp__fail(CDDP_NOT_FOUND, "dropped from the job: generation %lld goes on without agent %d (its node was "
                     "declared lost)", (long long)g, p->agent_id);
    } else {
      *rank = base + p->local_rank, *world = w;
    }
  }
  free(m);
  return r;
}

/* Waits for the generation after the wait generation g in slices, giving up (ABORTED) when
 * the agents end the round meanwhile (a signal: "fail ..." in rdzv/<round>/event). */
static cddp_result_t wait_below_min(cddp_store_t *s, int64_t g, int round, int timeout_ms) {
  uint64_t end = cddp__deadline_ms(timeout_ms);
  cddp__jobkey_t ev = cddp__job_key(CDDP__JK_RDZV_EVENT, round, 0);
  for (;;) {
    cddp_result_t r = cddp__gen_wait_past(s, g, CDDP_MIN(cddp__ms_left(end), 250));
    if (r != CDDP_TIMEOUT || cddp__ms_left(end) == 0) return r;
    void *v = NULL;
    size_t len = 0;
    if (cddp_store_get(s, ev.s, &v, &len, 0) == CDDP_OK) {
      r = cddp__fail(CDDP_ABORTED, "the job ended while it waited below MIN: %.*s", (int)CDDP_MIN(len, 300), (char *)v);
      free(v);
      return r;
    }
    cddp__clear_error();
  }
}

cddp_result_t cddp__gen_form(cddp_store_t *s, int rank, int world, int round, const cddp_comm_config_t *cfg,
                             int64_t min_gen, uint64_t deadline, cddp__gen_place_t *place, cddp_comm_t **comm,
                             cddp_store_t **view, int64_t *gen) {
  *comm = NULL, *view = NULL;
  for (;;) {
    int64_t g;
    CDDP_CHECK(cddp__gen_latest(s, &g));
    if (g < min_gen) g = min_gen;
    int rk = rank, wd = world;
    int wait_ms;
    CDDP_CHECK(find_place(s, g, place, &rk, &wd, &wait_ms));
    if (wait_ms > 0) { /* below MIN: wait for the generation that takes nodes in, or stops */
      int recover_ms = (int)cddp__knob_int(CDDP_KNOB_RECOVER_TIMEOUT_MS);
      CDDP_INFO(CDDP_SUB_ENV, "rank %d: generation %lld waits below MIN for up to %.1f s", rk, (long long)g,
                wait_ms / 1e3);
      cddp_result_t r = wait_below_min(s, g, round, wait_ms + recover_ms);
      if (r == CDDP_ABORTED) return r;
      if (r != CDDP_OK)
        return cddp__fail(r, "the job waited below MIN in generation %lld and nothing followed within %.1f s "
                          "(--rdzv-timeout + CDDP_RECOVER_TIMEOUT_MS): its agents are gone", (long long)g,
                          (wait_ms + recover_ms) / 1e3);
      deadline = CDDP_MAX(deadline, cddp__deadline_ms(recover_ms)); /* the wait does not eat the forming time */
      min_gen = g + 1;
      continue;
    }
    cddp_store_t *v;
    CDDP_CHECK(cddp__gen_view(&v, s, g, deadline));
    cddp_comm_t *c = NULL;
    cddp_result_t r = cddp_comm_init(&c, v, rk, wd, round, cfg);
    if (r == CDDP_OK) {
      cddp__gen_view_disarm(v);
      *comm = c, *view = v, *gen = g;
      if (place) place->rank = rk, place->world = wd;
      CDDP_INFO(CDDP_SUB_ENV, "rank %d of %d: communicator of generation %lld formed", rk, wd, (long long)g);
      return CDDP_OK;
    }
    char why[512];
    snprintf(why, sizeof why, "%s", cddp_last_error());
    cddp_store_close(v);
    cddp__jobkey_t complete = cddp__job_key(CDDP__JK_COMPLETE, 0, 0);
    const char *ck = complete.s;
    if (place && cddp_store_wait(s, &ck, 1, 0) == CDDP_OK) {
      place->gone = 3;
      return cddp__fail(CDDP_NOT_FOUND, "the job finished before generation %lld formed: nothing left to train",
                        (long long)g);
    }
    int64_t now = g;
    /* a peer died while this generation formed (a replacement meeting a worker killed just now,
     * before its agent announced the next generation): wait for that announcement */
    if ((r == CDDP_REMOTE || r == CDDP_ABORTED || r == CDDP_TIMEOUT) && cddp__ms_left(deadline) > 0)
      (void)cddp__gen_wait_past(s, g, CDDP_MIN(cddp__ms_left(deadline), (int)cddp__knob_int(CDDP_KNOB_RECOVER_TIMEOUT_MS)));
    if (cddp__gen_latest(s, &now) == CDDP_OK && now > g && cddp__ms_left(deadline) > 0) {
      CDDP_INFO(CDDP_SUB_ENV, "rank %d: generation %lld abandoned for %lld: %s", rk, (long long)g, (long long)now, why);
      continue;
    }
    return cddp__fail(r, "communicator of generation %lld: %s", (long long)g, why);
  }
}

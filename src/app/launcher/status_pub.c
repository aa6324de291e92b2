/* status_pub.c - the agent's node record for `cddp status`: each local worker's state, step,
 * step rate and last collective from its flight page; the events of losses and recoveries. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/log.h"
#include "launcher/status_pub.h"
#include "world/elastic.h"

void cddp__status_pub_begin(cddp__status_pub_t *p, cddp_store_t *s, const char *host, int agent_id, int replace) {
  memset(p, 0, sizeof *p);
  p->replace = replace;
  p->node = (cddp__status_node_t){.agent_id = agent_id, .pid = (int)getpid()};
  snprintf(p->node.host, sizeof p->node.host, "%s", host);
  if (cddp__status_slot(s, &p->node.slot) != CDDP_OK) {
    CDDP_INFO(CDDP_SUB_RUN, "no status record (cddp status): %s", cddp_last_error());
    return;
  }
  p->store = s;
}

/* One worker's entry from its page. */
static void rank_entry(cddp__status_pub_t *p, const cddp__worker_t *w, int i, uint64_t now, cddp__status_rank_t *r) {
  const cddp__flight_page_t *pg = w->progress.page;
  int live = pg && __atomic_load_n(&pg->magic, __ATOMIC_ACQUIRE) == CDDP__FLIGHT_MAGIC;
  *r = (cddp__status_rank_t){.rank = w->rank, .pid = w->exited ? 0 : (int)w->pid, .replaced = w->replaced};
  snprintf(r->last, sizeof r->last, "-");
  if (live) {
    uint64_t seq = __atomic_load_n(&pg->seq, __ATOMIC_ACQUIRE), done = __atomic_load_n(&pg->done, __ATOMIC_ACQUIRE);
    r->step = __atomic_load_n(&pg->step, __ATOMIC_ACQUIRE);
    r->coll = seq, r->in_coll = seq != done;
    if (seq) cddp__flight_describe(&pg->ring[(seq - 1) % CDDP__FLIGHT_RING], r->last, sizeof r->last);
  }
  if (w->exited) snprintf(r->state, sizeof r->state, "%s", w->hang[0] ? "hung" : w->status ? "failed" : "exited");
  else snprintf(r->state, sizeof r->state, "%s", live && r->coll ? "alive" : "starting");
  /* the rate over the last tick, per process (a new one starts counting afresh) */
  if (p->prev_pid[i] == r->pid && p->prev_ns[i] && now > p->prev_ns[i] && r->step >= p->prev_step[i])
    r->rate = (double)(r->step - p->prev_step[i]) * 1e9 / (double)(now - p->prev_ns[i]);
  p->prev_pid[i] = r->pid, p->prev_ns[i] = now, p->prev_step[i] = r->step;
}

/* Every local worker made a step since the loss (a new process: any step): recovered. */
static void check_recovered(cddp__status_pub_t *p, uint64_t now) {
  if (!p->lost_ns) return;
  for (int i = 0; i < p->node.nranks; i++) {
    const cddp__status_rank_t *r = &p->node.ranks[i];
    if (!r->pid || !r->step || (r->pid == p->lost_pid[i] && r->step <= p->lost_step[i])) return;
  }
  (void)cddp__status_event(p->store, "node %s recovered %.1f s after that loss (every rank of it made a step since)",
                           p->node.host, (double)(now - p->lost_ns) / 1e9);
  p->lost_ns = 0;
}

void cddp__status_pub_tick(cddp__workers_t *ws, void *arg) {
  cddp__status_pub_t *p = arg;
  if (!p->store) return;
  uint64_t now = cddp__now_ns();
  p->node.nranks = CDDP_MIN(ws->n, CDDP__STATUS_RANKS);
  for (int i = 0; i < p->node.nranks; i++) rank_entry(p, &ws->w[i], i, now, &p->node.ranks[i]);
  snprintf(p->node.state, sizeof p->node.state, "running");
  if (p->replace) (void)cddp__gen_latest(p->store, &p->node.gen);
  if (cddp__status_post(p->store, &p->node) != CDDP_OK)
    CDDP_INFO(CDDP_SUB_RUN, "status record not posted: %s", cddp_last_error());
  check_recovered(p, now);
}

void cddp__status_pub_state(cddp__status_pub_t *p, const char *state) {
  if (!p->store) return;
  snprintf(p->node.state, sizeof p->node.state, "%s", state);
  for (int i = 0; i < p->node.nranks; i++) /* their last word stays; none runs now */
    if (!strcmp(p->node.ranks[i].state, "alive") || !strcmp(p->node.ranks[i].state, "starting"))
      snprintf(p->node.ranks[i].state, sizeof p->node.ranks[i].state, "exited");
  (void)cddp__status_post(p->store, &p->node);
}

void cddp__status_pub_lost(cddp__status_pub_t *p, const cddp__workers_t *ws, const char *fmt, ...) {
  if (!p->store) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->lost_what, sizeof p->lost_what, fmt, ap);
  va_end(ap);
  (void)cddp__status_event(p->store, "%s", p->lost_what);
  p->lost_ns = cddp__now_ns();
  for (int i = 0; i < CDDP_MIN(ws->n, CDDP__STATUS_RANKS); i++) {
    const cddp__flight_page_t *pg = ws->w[i].progress.page;
    p->lost_step[i] = pg ? __atomic_load_n(&pg->step, __ATOMIC_ACQUIRE) : 0;
    p->lost_pid[i] = ws->w[i].exited ? 0 : (int)ws->w[i].pid;
  }
}

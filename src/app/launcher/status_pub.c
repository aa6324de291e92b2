/* status_pub.c - the agent's node record for `cddp status`: each local worker's state, step,
 * step rate and last collective from its flight page; the events of losses and recoveries;
 * posted by a thread over its own store connection (see status_pub.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"
#include "launcher/hang_probe.h"
#include "launcher/status_pub.h"
#include "job/elastic.h"

#define POST_TIMEOUT_MS 2000 /* the poster's bound on one store call */
#define RATE_WINDOW_NS 10000000000ull /* steps/s: averaged over about this long */

/* The generation moved from `from` to `to`: which nodes it lost and took in, one event for the
 * job (whichever agent posts it first); a loss starts the agent's recovery clock. */
static void gen_event(cddp__status_pub_t *p, int64_t from, int64_t to) {
  cddp__members_t *a = malloc(sizeof *a), *b = malloc(sizeof *b);
  char text[300];
  int len = 0, lost = 0, joined = 0;
  if (!a || !b || cddp__members_read(p->store, from, a) != CDDP_OK || cddp__members_read(p->store, to, b) != CDDP_OK) {
    CDDP_INFO(CDDP_SUB_RUN, "no status event for generation %lld: %s", (long long)to, cddp_last_error());
    goto out;
  }
  len = snprintf(text, sizeof text, "generation %lld:", (long long)to);
  for (int k = 0; k < 2; k++) { /* k 0: in a, not in b (lost); k 1: in b, not in a (joined) */
    const cddp__members_t *x = k ? b : a, *y = k ? a : b;
    for (int i = 0; i < x->n && len < (int)sizeof text; i++) {
      if (cddp__members_find(y, x->m[i].id, NULL, NULL) >= 0) continue;
      len += snprintf(text + len, sizeof text - (size_t)len, " node %s (agent %d) %s;", x->m[i].host, x->m[i].id,
                      k ? "joined" : "lost");
      *(k ? &joined : &lost) += 1;
    }
  }
  if ((!lost && !joined && !b->stop) || len >= (int)sizeof text) goto out; /* a worker replaced: its own event */
  if (b->stop) snprintf(text + len, sizeof text - (size_t)len, " the job stops: %.200s", b->line);
  else snprintf(text + len, sizeof text - (size_t)len, " %d node%s, world %d%s", b->n, b->n == 1 ? "" : "s",
                cddp__members_world(b), b->wait_ms > 0 ? ", waiting for nodes" : "");
  (void)cddp__status_event_once(p->store, to, text);
  if (lost) __atomic_store_n(&p->loss_ns, cddp__now_ns(), __ATOMIC_RELEASE);
out:
  free(a);
  free(b);
}

/* Where this agent's workers are in generation rec->gen (a loss moves the nodes after it down):
 * its index among the members, its ranks and the world, from the member record (read once per
 * generation; placed caches it). */
typedef struct placed { int64_t gen; int index, rank_base, world; } placed_t;
static void place(cddp__status_pub_t *p, cddp__status_node_t *rec, placed_t *pl) {
  if (p->node.agent_id < 0) return;
  if (pl->gen != rec->gen) {
    cddp__members_t *m = malloc(sizeof *m);
    pl->gen = rec->gen, pl->index = -1;
    if (m && cddp__members_read(p->store, rec->gen, m) == CDDP_OK)
      pl->index = cddp__members_find(m, p->node.agent_id, &pl->rank_base, &pl->world);
    free(m);
  }
  if (pl->index < 0) return; /* not a member (dropped, pending): as the agent last said */
  rec->node_rank = pl->index, rec->rank_base = pl->rank_base, rec->world = pl->world;
  for (int i = 0; i < rec->nranks; i++) rec->ranks[i].rank = pl->rank_base + i;
}

/* While the watchdog wants them: the other nodes' fresh records, and since when the longest
 * waiting of their ranks has been inside one collective. */
static void track_remote(cddp__status_pub_t *p, int my_slot) {
  if (!__atomic_load_n(&p->remote_wanted, __ATOMIC_ACQUIRE)) {
    __atomic_store_n(&p->remote_since, 0, __ATOMIC_RELEASE);
    return;
  }
  size_t cells = (size_t)CDDP__STATUS_NODES * CDDP__STATUS_RANKS;
  if (!p->seen_coll) p->seen_coll = calloc(cells, sizeof *p->seen_coll), p->seen_ns = calloc(cells, sizeof *p->seen_ns);
  cddp__status_node_t *all = NULL;
  int n = 0;
  if (!p->seen_coll || !p->seen_ns || cddp__status_read(p->store, &all, &n) != CDDP_OK) return;
  struct timespec real;
  clock_gettime(CLOCK_REALTIME, &real);
  uint64_t wall_ms = (uint64_t)real.tv_sec * 1000 + (uint64_t)real.tv_nsec / 1000000, now = cddp__now_ns(), oldest = 0;
  for (int k = 0; k < n; k++) {
    const cddp__status_node_t *nd = &all[k];
    int fresh = nd->wall_ms + 3000ull * (unsigned)p->post_every > wall_ms && !strcmp(nd->state, "running"); /* a silent node says nothing */
    if (nd->slot == my_slot || nd->slot < 0 || nd->slot >= CDDP__STATUS_NODES || !fresh) continue;
    for (int i = 0; i < nd->nranks && i < CDDP__STATUS_RANKS; i++) {
      size_t c = (size_t)nd->slot * CDDP__STATUS_RANKS + (size_t)i;
      const cddp__status_rank_t *r = &nd->ranks[i];
      if (!r->in_coll) {
        p->seen_ns[c] = 0;
        continue;
      }
      if (!p->seen_ns[c] || p->seen_coll[c] != r->coll) p->seen_coll[c] = r->coll, p->seen_ns[c] = now;
      if (!oldest || p->seen_ns[c] < oldest) oldest = p->seen_ns[c];
    }
  }
  free(all);
  __atomic_store_n(&p->remote_since, oldest, __ATOMIC_RELEASE);
}

static void *poster_main(void *arg) {
  cddp__status_pub_t *p = arg;
  placed_t placed = {.gen = -1};
  cddp__status_node_t *rec = malloc(sizeof *rec);
  int slot = -1; /* the poster's own: the agent's thread copies p->node meanwhile */
  if (!rec || cddp__status_slot(p->store, &slot) != CDDP_OK) {
    CDDP_INFO(CDDP_SUB_RUN, "no status record (cddp status): %s", cddp_last_error());
    free(rec);
    pthread_mutex_lock(&p->mu);
    __atomic_store_n(&p->on, 0, __ATOMIC_RELEASE); /* the tick stops handing records over */
    pthread_mutex_unlock(&p->mu);
    return NULL;
  }
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && !p->out_new && !p->nevents) pthread_cond_wait(&p->cv, &p->mu);
    if (!p->out_new && !p->nevents) break; /* stopping, and all is posted */
    int have = p->out_new, nev = p->nevents;
    char ev[CDDP__STATUS_QUEUE][300];
    if (have) *rec = p->out, rec->slot = slot;
    memcpy(ev, p->events, sizeof ev);
    p->out_new = 0, p->nevents = 0;
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < nev; i++) (void)cddp__status_event(p->store, "%s", ev[i]);
    if (have && p->agent_gen) {
      if (p->gen_seen >= 0 && rec->gen > p->gen_seen) gen_event(p, p->gen_seen, rec->gen);
      p->gen_seen = rec->gen;
      place(p, rec, &placed);
    }
    if (have && cddp__status_post(p->store, rec) != CDDP_OK)
      CDDP_INFO(CDDP_SUB_RUN, "status record not posted: %s", cddp_last_error());
    if (have) track_remote(p, slot);
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  free(rec);
  free(p->seen_coll), free(p->seen_ns);
  p->seen_coll = p->seen_ns = NULL;
  return NULL;
}

void cddp__status_pub_begin(cddp__status_pub_t *p, const char *store_host, int store_port, const char *token,
                            const char *run_id, const char *host, int agent_id, const int64_t *agent_gen) {
  memset(p, 0, sizeof *p);
  p->agent_gen = agent_gen;
  p->post_every = (int)CDDP_MAX(1, cddp__knob_int(CDDP_KNOB_HEARTBEAT_TIMEOUT_MS) / 3000);
  p->gen_seen = -1;
  p->node = (cddp__status_node_t){.agent_id = agent_id, .pid = (int)getpid()};
  snprintf(p->node.host, sizeof p->node.host, "%s", host);
  cddp_store_t *base = NULL;
  char prefix[160];
  snprintf(prefix, sizeof prefix, "%s/", run_id);
  if (cddp_store_tcp_connect(&base, store_host, store_port, token, 5000) != CDDP_OK ||
      cddp_store_prefix_create(&p->store, base, prefix, 1) != CDDP_OK) {
    CDDP_INFO(CDDP_SUB_RUN, "no status record (cddp status): %s", cddp_last_error());
    if (!p->store) cddp_store_close(base);
    p->store = NULL;
    return;
  }
  cddp_store_set_timeout(base, POST_TIMEOUT_MS); /* a store that stops answering costs the poster only */
  /* the generation this agent starts in: the first change after it is an event */
  if (agent_gen && cddp__gen_latest(p->store, &p->gen_seen) != CDDP_OK) p->gen_seen = -1;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  __atomic_store_n(&p->on, 1, __ATOMIC_RELEASE);
  if (pthread_create(&p->th, NULL, poster_main, p) != 0) {
    p->on = 0;
    cddp_store_close(p->store);
    p->store = NULL;
  }
}

/* Hands the record (p->node) to the poster. */
static void hand_over(cddp__status_pub_t *p) {
  pthread_mutex_lock(&p->mu);
  if (p->on) {
    p->out = p->node;
    p->out_new = 1;
    pthread_cond_signal(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
}

static void event(cddp__status_pub_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void event(cddp__status_pub_t *p, const char *fmt, ...) {
  pthread_mutex_lock(&p->mu);
  if (p->on && p->nevents < CDDP__STATUS_QUEUE) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->events[p->nevents++], sizeof p->events[0], fmt, ap);
    va_end(ap);
    pthread_cond_signal(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
}

/* One worker's entry from its page. */
void cddp__status_pub_rate(cddp__status_pub_t *p, int i, cddp__status_rank_t *r, uint64_t now) {
  uint64_t *ns = p->rate_ns[i], *step = p->rate_step[i], n = p->rate_n[i];
  enum { K = CDDP__STATUS_RATE_POINTS };
  if (p->prev_pid[i] != r->pid || !n || r->step < step[(n - 1) % K]) {
    p->prev_pid[i] = r->pid, p->rate_n[i] = 1, ns[0] = now, step[0] = r->step;
    return;
  }
  if (r->step > step[(n - 1) % K]) ns[n % K] = now, step[n % K] = r->step, n = ++p->rate_n[i];
  uint64_t last = n - 1, first = last;
  while (first > 0 && last - first + 1 < K && (first == last || now - ns[(first - 1) % K] <= RATE_WINDOW_NS)) first--;
  if (first == last || ns[last % K] <= ns[first % K]) return;
  r->rate = (double)(step[last % K] - step[first % K]) / ((double)(ns[last % K] - ns[first % K]) / 1e9);
  double since = now > ns[last % K] ? (double)(now - ns[last % K]) / 1e9 : 0;
  if (since > 0 && r->rate > 1.0 / since) r->rate = 1.0 / since;
}

/* The process behind slot i as /proc and its output show it: CPU % since the last tick, memory,
 * its last line and how long ago, and how long the watchdog has seen it make no progress. */
static void proc_entry(cddp__status_pub_t *p, const cddp__worker_t *w, int i, uint64_t now, cddp__status_rank_t *r) {
  static long tick_ns;
  if (!tick_ns) tick_ns = 1000000000L / sysconf(_SC_CLK_TCK);
  uint64_t ticks;
  char state;
  r->cpu_pct = -1;
  r->out_age_ms = w->out_ns && now > w->out_ns ? (int64_t)((now - w->out_ns) / 1000000u) : w->out_ns ? 0 : -1;
  snprintf(r->out, sizeof r->out, "%s", w->out[0] ? w->out : "-");
  if (w->exited || cddp__proc_stat(w->pid, &ticks, &state) != 0) return;
  r->rss_kb = cddp__proc_rss_kb(w->pid);
  if (p->prev_ticks_pid[i] == (int)w->pid && now > p->prev_ticks_ns[i] && ticks >= p->prev_ticks[i])
    r->cpu_pct = 100.0 * (double)((ticks - p->prev_ticks[i]) * (uint64_t)tick_ns) / (double)(now - p->prev_ticks_ns[i]);
  p->prev_ticks_pid[i] = (int)w->pid, p->prev_ticks[i] = ticks, p->prev_ticks_ns[i] = now;
  if (w->probe.pid == w->pid && w->probe.since_ns && now > w->probe.since_ns)
    r->idle_ms = (int64_t)((now - w->probe.since_ns) / 1000000u);
}

static void rank_entry(cddp__status_pub_t *p, const cddp__worker_t *w, int i, uint64_t now, int hang_ms,
                       cddp__status_rank_t *r) {
  const cddp__flight_page_t *pg = w->progress.page;
  int live = pg && __atomic_load_n(&pg->magic, __ATOMIC_ACQUIRE) == CDDP__FLIGHT_MAGIC;
  *r = (cddp__status_rank_t){.rank = w->rank, .pid = w->exited ? 0 : (int)w->pid, .replaced = w->replaced};
  snprintf(r->last, sizeof r->last, "-");
  if (live) {
    uint64_t seq = __atomic_load_n(&pg->seq, __ATOMIC_ACQUIRE), done = __atomic_load_n(&pg->done, __ATOMIC_ACQUIRE);
    r->step = __atomic_load_n(&pg->step, __ATOMIC_ACQUIRE);
    r->coll = seq, r->in_coll = seq != done;
    if (seq) cddp__flight_describe(&pg->ring[(seq - 1) % CDDP__FLIGHT_RING], r->last, sizeof r->last);
  } else if (cddp__probe_waiting(&w->probe)) { /* no page: idle inside torch.distributed, by its stack */
    r->coll = w->probe.since_ns, r->in_coll = 1; /* one wait, one number: the other nodes time it */
    snprintf(r->last, sizeof r->last, "%.60s (its Python stack)", w->probe.where.coll);
  } else if (w->probe.where.user[0] && cddp__probe_state(&w->probe, now, 0)) { /* idle in its own code */
    snprintf(r->last, sizeof r->last, "in %.70s (its Python stack)", w->probe.where.user);
  }
  proc_entry(p, w, i, now, r);
  /* a program without a page: the watchdog's reading, from half its timeout on (hang_probe.h) */
  const char *seen = live || w->probe.pid != w->pid ? NULL : cddp__probe_state(&w->probe, now, (uint64_t)hang_ms * 500000ull);
  if (w->exited) snprintf(r->state, sizeof r->state, "%s", w->hang[0] ? "hung" : w->status ? "failed" : "exited");
  else if (seen) snprintf(r->state, sizeof r->state, "%s", seen);
  else snprintf(r->state, sizeof r->state, "%s", (live && r->coll) || (!live && w->out_ns) ? "alive" : "starting");
  cddp__status_pub_rate(p, i, r, now);
}

/* A loss at `at`: recovered once every local worker made a step past where it was. */
static void start_clock(cddp__status_pub_t *p, const cddp__workers_t *ws, uint64_t at) {
  p->lost_ns = at;
  for (int i = 0; i < CDDP_MIN(ws->n, CDDP__STATUS_RANKS); i++) {
    const cddp__flight_page_t *pg = ws->w[i].progress.page;
    p->lost_step[i] = pg ? __atomic_load_n(&pg->step, __ATOMIC_ACQUIRE) : 0;
    p->lost_pid[i] = ws->w[i].exited ? 0 : (int)ws->w[i].pid;
  }
}

/* Every local worker made a step since the loss (a new process: any step): recovered. */
static void check_recovered(cddp__status_pub_t *p, uint64_t now) {
  if (!p->lost_ns) return;
  for (int i = 0; i < p->node.nranks; i++) {
    const cddp__status_rank_t *r = &p->node.ranks[i];
    if (!r->pid || !r->step || (r->pid == p->lost_pid[i] && r->step <= p->lost_step[i])) return;
  }
  event(p, "node %s recovered %.1f s after that loss (every rank of it made a step since)", p->node.host,
        (double)(now - p->lost_ns) / 1e9);
  p->lost_ns = 0;
}

void cddp__status_pub_tick(cddp__workers_t *ws, void *arg) {
  cddp__status_pub_t *p = arg;
  if (!__atomic_load_n(&p->on, __ATOMIC_ACQUIRE)) return;
  uint64_t now = cddp__now_ns(), loss = __atomic_load_n(&p->loss_ns, __ATOMIC_ACQUIRE);
  if (loss && loss != p->loss_seen) { /* a node lost elsewhere: this node's ranks re-form too */
    p->loss_seen = loss;
    start_clock(p, ws, loss);
  }
  p->node.nranks = CDDP_MIN(ws->n, CDDP__STATUS_RANKS);
  for (int i = 0; i < p->node.nranks; i++) rank_entry(p, &ws->w[i], i, now, ws->hang_ms, &p->node.ranks[i]);
  snprintf(p->node.state, sizeof p->node.state, "running");
  if (p->agent_gen) p->node.gen = *p->agent_gen;
  if (p->ticks++ % (unsigned)p->post_every == 0) hand_over(p);
  check_recovered(p, now);
}

void cddp__status_pub_state(cddp__status_pub_t *p, const char *state) {
  if (!__atomic_load_n(&p->on, __ATOMIC_ACQUIRE)) return;
  snprintf(p->node.state, sizeof p->node.state, "%s", state);
  for (int i = 0; i < p->node.nranks; i++) /* their last word stays; none runs now */
    if (!strcmp(p->node.ranks[i].state, "alive") || !strcmp(p->node.ranks[i].state, "starting"))
      snprintf(p->node.ranks[i].state, sizeof p->node.ranks[i].state, "exited");
  hand_over(p);
}

void cddp__status_pub_lost(cddp__status_pub_t *p, const cddp__workers_t *ws, const char *fmt, ...) {
  if (!__atomic_load_n(&p->on, __ATOMIC_ACQUIRE)) return;
  char what[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  event(p, "%s", what);
  start_clock(p, ws, cddp__now_ns());
}

void cddp__status_pub_end(cddp__status_pub_t *p) {
  if (!p->store) return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
  /* a store that stopped answering would keep the poster up to POST_TIMEOUT_MS per call: wait a
   * little, then leave it (the process is ending) */
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 1;
  if (pthread_timedjoin_np(p->th, NULL, &until) != 0) return; /* it still holds the store: leave both */
  cddp_store_close(p->store);
  p->store = NULL;
  __atomic_store_n(&p->on, 0, __ATOMIC_RELEASE);
}

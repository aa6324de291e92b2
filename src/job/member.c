/* member.c - the agent's membership monitor: heartbeat, will, and the detection of crashed or
 * silent member agents (cddp run --restart-mode replace). Each agent watches only its ring
 * successors (the next RING_WATCH members), so the store serves O(1) requests per agent per
 * beat at any job size; the watcher that finds a loss makes the next generation, and the
 * others learn of it through their one parked wait on its announcement. */
#include <pthread.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/log.h"
#include "job/events.h"
#include "job/member.h"
#include "store/failover.h"
#include "store/store_internal.h"

#define KEY(kind, a) cddp__job_key(CDDP__JK_##kind, a, 0).s

#define RING_WATCH 2     /* successors each member watches: two adjacent losses at once are still seen */
#define PARK_MIN_MS 250 /* the wait on the next announcement spans half a beat, at least this: */
                        /* a stop takes up to that long, and the store serves two waits a beat */
#define SLOW_BEATS 4     /* the job-wide keys (stop, pending agents) are looked at every this many beats */
#define HB_FLAT_N 1024    /* up to this many members the beat is CDDP_HEARTBEAT_MS; past it, it grows with N */
#define HB_MAX_LATE_MS 2000 /* the longest beat: a loss is still seen within the timeout + 2 s */
#define MAX_AGENT_IDS 16384 /* pending agents are looked for among ids below this */

typedef struct watched {
  int id, reported;
  int beat_here;       /* its counter moved between two reads on this store epoch: it is a client of it */
  int64_t last;        /* heartbeat counter last read (-1: never) */
  uint64_t changed_at; /* when it was last seen moving */
} watched_t;

struct cddp__monitor {
  pthread_t th;
  pthread_mutex_t mu; /* guards the watch list and gen */
  cddp_store_t *raw, *s; /* raw: the connection with the will; s: "<run_id>/" over it */
  int self, hb_ms, timeout_ms, fd, stop;
  int base_hb_ms;      /* CDDP_HEARTBEAT_MS: the beat at small N (cddp__heartbeat_ms scales it) */
  int64_t gen, gen_seen;
  uint64_t deadline; /* "waited" after this (0: none) */
  const int *hosting; /* cddp__monitor_lease */
  int64_t epoch;      /* the store's epoch this monitor last saw (store/failover.h) */
  int moved;          /* the epoch changed since the last beat: the pending record is published again */
  char pending[96];   /* this agent's pending record while it waits to be taken in ("": none): */
  size_t pending_len; /* published again when the store moves (its new host never saw it) */
  int lease_gone; /* "minority" or "froze" was said: once */
  int n_dropped;  /* members a later generation left out, still counted by the lease (below) */
  uint64_t dropped_at[CDDP__MAX_MEMBERS];
  int n;
  unsigned beats;
  watched_t w[CDDP__MAX_MEMBERS];
  int ring[RING_WATCH], nring;       /* indices in w of the successors this agent watches */
  unsigned char said[MAX_AGENT_IDS]; /* a pending agent reported since the last watch */
  unsigned char member[MAX_AGENT_IDS]; /* a member of the watched generation (not pending) */
};

/* A store that moved: nobody could beat while it did, so every member starts afresh, and
 * none has beaten on the new store yet (the lease counts only those that have, below). Called
 * with mu held, by the beat and by a watch (which may come first after a take-over). */
static void follow_epoch(cddp__monitor_t *m, uint64_t now) {
  int64_t epoch = cddp__failover_epoch();
  if (epoch == m->epoch) return;
  m->epoch = epoch, m->moved = 1;
  for (int i = 0; i < m->n; i++) m->w[i].changed_at = now, m->w[i].last = -1, m->w[i].beat_here = 0;
}

/* The store host watches every member (its split-brain guard counts who is alive); the
 * others their ring successors. Called with mu held. */
static int looks_at_all(const cddp__monitor_t *m) { return m->hosting && __atomic_load_n(m->hosting, __ATOMIC_ACQUIRE); }

/* An event for the agent's main loop (events.h). */
#define SAY(m, kind, id, n, value, ...) cddp__agent_ev_say((m)->fd, kind, id, n, value, __VA_ARGS__)

static int exists(cddp_store_t *s, const char *key) {
  const char *k = key;
  int r = cddp_store_wait(s, &k, 1, 0) == CDDP_OK;
  cddp__clear_error();
  return r;
}

/* Agent id is registered in elastic/pending/<id>, and neither dead nor gone. */
static int pending_alive(cddp_store_t *s, int id) {
  return exists(s, KEY(PENDING, id)) && !exists(s, KEY(DEAD, id)) && !exists(s, KEY(LEFT, id));
}

/* Agents that wait to be taken in: registered in elastic/pending/<id>, not dead, not gone. */
static cddp_result_t scan_pending(cddp__monitor_t *m) {
  int64_t n;
  CDDP_CHECK(cddp_store_add(m->s, KEY(AGENTS, 0), 0, &n));
  if (exists(m->s, KEY(COMPLETE, 0))) return CDDP_OK;
  for (int id = 0; id < n && id < MAX_AGENT_IDS; id++) {
    pthread_mutex_lock(&m->mu);
    int skip = id == m->self || m->said[id] || m->member[id];
    pthread_mutex_unlock(&m->mu);
    if (skip || !pending_alive(m->s, id)) continue;
    pthread_mutex_lock(&m->mu);
    m->said[id] = 1;
    pthread_mutex_unlock(&m->mu);
    SAY(m, CDDP__AEV_PENDING, id, 0, 0, NULL);
  }
  return CDDP_OK;
}

int cddp__heartbeat_timeout_ms(int max_nodes, int base_ms, int floor_ms) {
  if (base_ms <= 0) base_ms = 500;
  /* four of the beat max_nodes members get (below), so that beat is not cut by the timeout */
  int64_t grown = CDDP_MIN(4 * (int64_t)base_ms * CDDP_MAX(max_nodes, 0) / HB_FLAT_N, 4 * (int64_t)HB_MAX_LATE_MS);
  return (int)CDDP_MAX((int64_t)floor_ms, grown);
}

int cddp__heartbeat_ms(int n, int base_ms, int timeout_ms) {
  if (base_ms <= 0) return 500;
  int64_t beat = n > HB_FLAT_N ? (int64_t)base_ms * n / HB_FLAT_N : base_ms;
  /* a member silent for half the timeout must still span two beats (the cut guard), and a loss
   * is seen within the timeout + one beat, which the issue bounds by 2 s */
  int64_t cap = CDDP_MIN((int64_t)timeout_ms / 4, (int64_t)HB_MAX_LATE_MS);
  return (int)CDDP_MAX((int64_t)base_ms, CDDP_MIN(beat, cap));
}

/* One heartbeat period: beat, then read the counters of the members watched (the ring
 * successors, or every member on the store's host); the others count as just seen, so a
 * member starts its full timeout when it comes into view. */
static cddp_result_t beat(cddp__monitor_t *m, uint64_t now) {
  int64_t v;
  CDDP_CHECK(cddp_store_add(m->s, KEY(HEARTBEAT, m->self), 1, &v));
  pthread_mutex_lock(&m->mu);
  char pending[sizeof m->pending];
  size_t pending_len = 0;
  follow_epoch(m, now);
  if (m->moved) {
    m->moved = 0;
    pending_len = m->pending_len;
    memcpy(pending, m->pending, pending_len);
  }
  int n_lost = 0, lost[CDDP__MAX_MEMBERS], all = looks_at_all(m);
  unsigned char willed[CDDP__MAX_MEMBERS]; /* lost[k] left its will (its connection closed) */
  unsigned char look[CDDP__MAX_MEMBERS];
  memset(look, all, (size_t)m->n);
  for (int k = 0; k < m->nring; k++) look[m->ring[k]] = 1;
  for (int i = 0; i < m->n; i++) {
    watched_t *w = &m->w[i];
    if (!look[i]) w->last = -1, w->changed_at = now;
    if (w->reported || !look[i]) continue;
    if (cddp_store_add(m->s, KEY(HEARTBEAT, w->id), 0, &v) != CDDP_OK) break;
    if (v != w->last) {
      if (w->last >= 0) w->beat_here = 1; /* -1: the first read, a baseline only */
      w->last = v, w->changed_at = now;
      continue;
    }
    /* still since the last beat: a crash leaves its will (a counter that moved needs no look,
     * so a crash is seen within two beats at one request per watched member per beat) */
    if (exists(m->s, KEY(DEAD, w->id))) { /* reported below, under the lease like the silent */
      willed[n_lost] = 1, lost[n_lost++] = i;
      continue;
    }
    uint64_t still = (now - w->changed_at) / 1000000ull;
    if (still < (uint64_t)m->timeout_ms) continue;
    if (exists(m->s, KEY(LEFT, w->id))) continue; /* it left properly */
    willed[n_lost] = 0, lost[n_lost++] = i;
  }
  /* the store's host judges its lease before it drops anyone: a host cut off sees the others
   * go silent one beat apart, and dropping the first would leave it a "majority" of the smaller
   * generation while they vote with the larger one; so when someone is lost, a member silent
   * for half the timeout counts as gone too. A will counts the same way: a member that gave the
   * store up closes its connection, and after a link flap that close arrives while the rest are
   * still silent (docs/store.md, "A link flap") */
  /* a member dropped lately may be alive, cut off, and voting with the generation it last saw:
   * it stays in the count, not alive, for as long as a take-over can count its vote (the next in
   * line loses the store up to two heartbeat timeouts after it, then waits three and 1 s). Only
   * a client of this store can vote against it (a vote is for the epoch after the one its voter
   * lost), so monitor_watch keeps only members seen beating here: not the host this one took
   * the store from, whose vote could only be for the epoch this host already holds
   * (docs/store.md, "The old host stops when it is the minority") */
  uint64_t vote_ns = (uint64_t)(5 * m->timeout_ms + 1000) * 1000000ull;
  int kept = 0;
  for (int k = 0; k < m->n_dropped; k++)
    if (now - m->dropped_at[k] < vote_ns) m->dropped_at[kept++] = m->dropped_at[k];
  m->n_dropped = kept;
  int alive = m->n + 1, members = m->n + 1 + kept;
  uint64_t gone_after = (uint64_t)(n_lost ? m->timeout_ms / 2 : m->timeout_ms);
  for (int i = 0; i < m->n; i++)
    if ((now - m->w[i].changed_at) / 1000000ull >= gone_after) alive--;
  int minority = m->hosting && __atomic_load_n(m->hosting, __ATOMIC_ACQUIRE) && 2 * alive < members &&
                 !m->lease_gone;
  if (minority) m->lease_gone = 1;
  for (int k = 0; k < n_lost && !m->lease_gone; k++) {
    watched_t *w = &m->w[lost[k]];
    w->reported = 1;
    if (willed[k]) SAY(m, CDDP__AEV_LOST, w->id, 0, 0, "its connection closed");
    else SAY(m, CDDP__AEV_LOST, w->id, 0, 0, "no heartbeat for %llu ms", (unsigned long long)((now - w->changed_at) / 1000000ull));
  }
  pthread_mutex_unlock(&m->mu);
  if (minority) SAY(m, CDDP__AEV_MINORITY, alive, members, 0, NULL);
  if (pending_len) { /* the new host knows the agent ids of the members only: ours too, so it is scanned */
    int64_t ids = 0;
    if (cddp_store_add(m->s, KEY(AGENTS, 0), 0, &ids) == CDDP_OK && ids <= m->self)
      (void)cddp_store_add(m->s, KEY(AGENTS, 0), m->self + 1 - ids, &ids);
    (void)cddp_store_set(m->s, KEY(PENDING, m->self), pending, pending_len);
  }
  if (m->beats++ % SLOW_BEATS) return CDDP_OK;
  if (exists(m->s, KEY(STOP, 0))) SAY(m, CDDP__AEV_STOP, 0, 0, 0, NULL);
  return scan_pending(m);
}

/* The store stopped answering: says "cut <why>" (the failure that broke the connection, not
 * the later "unusable" of the call that found it broken). */
static void say_cut(cddp__monitor_t *m, const char *first) {
  const char *e = cddp_last_error();
  SAY(m, CDDP__AEV_CUT, 0, 0, 0, "%s", strstr(e, "unusable") && first[0] ? first : e);
}

static void *monitor_main(void *arg) {
  cddp__monitor_t *m = arg;
  uint64_t next_beat = 0, last_turn = cddp__now_ns();
  int hosted = 0; /* at the last turn (a monitor that just took the store over was busy doing so) */
  char first[200] = "";
  while (!__atomic_load_n(&m->stop, __ATOMIC_ACQUIRE)) {
    uint64_t now = cddp__now_ns();
    /* the store's host stood still past the heartbeat timeout (SIGSTOP, starved): the others may
     * have taken the store over meanwhile, and requests they sent before may land now and look
     * like heartbeats, so its lease is gone whatever they say */
    pthread_mutex_lock(&m->mu);
    int hosting = m->hosting && __atomic_load_n(m->hosting, __ATOMIC_ACQUIRE);
    int froze = hosted && hosting && !m->lease_gone && now - last_turn >= (uint64_t)m->timeout_ms * 1000000ull;
    if (froze) m->lease_gone = 1;
    pthread_mutex_unlock(&m->mu);
    hosted = hosting;
    if (froze) SAY(m, CDDP__AEV_FROZE, 0, 0, (int64_t)((now - last_turn) / 1000000ull), NULL);
    last_turn = now;
    if (now >= next_beat) {
      if (beat(m, now) != CDDP_OK) { /* no answer within timeout_ms: the others drop this node */
        say_cut(m, first);
        break;
      }
      next_beat = now + (uint64_t)__atomic_load_n(&m->hb_ms, __ATOMIC_RELAXED) * 1000000ull;
    }
    pthread_mutex_lock(&m->mu);
    int64_t g = CDDP_MAX(m->gen, m->gen_seen);
    int waited = m->deadline && cddp__now_ns() >= m->deadline;
    if (waited) m->deadline = 0;
    uint64_t until = m->deadline && m->deadline < next_beat ? m->deadline : next_beat;
    pthread_mutex_unlock(&m->mu);
    if (waited) SAY(m, CDDP__AEV_WAITED, 0, 0, 0, NULL);
    cddp__jobkey_t next = cddp__job_key(CDDP__JK_GEN_ANNOUNCE, g + 1, 0);
    const char *k = next.s;
    /* parked on the next announcement until the next beat or the deadline: one request */
    uint64_t t = cddp__now_ns();
    uint64_t park_max = (uint64_t)CDDP_MAX(PARK_MIN_MS, __atomic_load_n(&m->hb_ms, __ATOMIC_RELAXED) / 2);
    int park_ms = until > t ? (int)CDDP_MIN((until - t) / 1000000ull + 1, park_max) : 1;
    cddp_result_t r = cddp_store_wait(m->s, &k, 1, park_ms);
    if (r == CDDP_OK) {
      pthread_mutex_lock(&m->mu);
      m->gen_seen = g + 1;
      pthread_mutex_unlock(&m->mu);
      SAY(m, CDDP__AEV_GEN, 0, 0, g + 1, NULL);
    } else if (r != CDDP_TIMEOUT) {
      say_cut(m, first);
      break;
    } else {
      snprintf(first, sizeof first, "%s", cddp_last_error()); /* "no answer in time" breaks it */
    }
  }
  return NULL;
}

cddp_result_t cddp__monitor_start(cddp__monitor_t **out, const char *host, int port, const char *token,
                                  const char *run_id, int self_id, int hb_ms, int timeout_ms, int notify_fd) {
  *out = NULL;
  cddp__monitor_t *m = calloc(1, sizeof *m);
  if (!m) return cddp__fail(CDDP_SYSTEM, "out of memory");
  m->self = self_id, m->hb_ms = hb_ms > 0 ? hb_ms : 500, m->timeout_ms = timeout_ms > 0 ? timeout_ms : 3000;
  m->base_hb_ms = m->hb_ms;
  m->fd = notify_fd;
  pthread_mutex_init(&m->mu, NULL);
  char prefix[160];
  snprintf(prefix, sizeof prefix, "%s/", run_id);
  cddp__jobkey_t will = cddp__job_key_in(run_id, CDDP__JK_DEAD, self_id);
  cddp_result_t r = cddp_store_tcp_connect(&m->raw, host, port, token, 10000);
  /* a call unanswered for the heartbeat timeout means this node is cut off (its link, a
   * partition): the others drop it after the same time, so it stops instead of hanging */
  if (r == CDDP_OK) cddp_store_set_timeout(m->raw, m->timeout_ms);
  if (r == CDDP_OK) r = cddp__store_tcp_will(m->raw, will.s, CDDP__JOB_WILL, strlen(CDDP__JOB_WILL));
  if (r == CDDP_OK) r = cddp_store_prefix_create(&m->s, m->raw, prefix, 1);
  if (r == CDDP_OK && pthread_create(&m->th, NULL, monitor_main, m) != 0)
    r = cddp__fail(CDDP_SYSTEM, "cannot start the membership monitor thread");
  if (r != CDDP_OK) {
    if (m->s) cddp_store_close(m->s);
    else cddp_store_close(m->raw);
    pthread_mutex_destroy(&m->mu);
    free(m);
    return r;
  }
  *out = m;
  return CDDP_OK;
}

void cddp__monitor_watch(cddp__monitor_t *m, const cddp__members_t *members, int64_t gen) {
  if (!m) return;
  uint64_t now = cddp__now_ns();
  watched_t *old = malloc(sizeof *old * CDDP__MAX_MEMBERS);
  if (!old) return; /* the last watch stays */
  pthread_mutex_lock(&m->mu);
  follow_epoch(m, now);
  int nold = m->n, at = -1;
  memcpy(old, m->w, sizeof(watched_t) * (size_t)nold);
  m->n = 0, m->nring = 0;
  memset(m->member, 0, sizeof m->member);
  for (int i = 0; i < members->n; i++) {
    int id = members->m[i].id;
    if (id >= 0 && id < MAX_AGENT_IDS) m->member[id] = 1;
    if (id == m->self) {
      at = m->n; /* self's successors start at this index of w */
      continue;
    }
    watched_t w = {.id = id, .last = -1, .changed_at = now};
    for (int j = 0; j < nold; j++) /* keep what is known of a member still watched */
      if (old[j].id == w.id) w.last = old[j].last, w.changed_at = old[j].changed_at, w.beat_here = old[j].beat_here;
    m->w[m->n++] = w;
  }
  for (int k = 0; at >= 0 && k < RING_WATCH && k < m->n; k++) m->ring[m->nring++] = (at + k) % m->n;
  for (int j = 0; j < nold; j++) /* dropped by this generation: the lease counts it a while (beat) */
    if (old[j].id != m->self && old[j].beat_here && cddp__members_find(members, old[j].id, NULL, NULL) < 0 &&
        m->n_dropped < CDDP__MAX_MEMBERS)
      m->dropped_at[m->n_dropped++] = now;
  m->gen = gen;
  /* N is the record's: every agent beats alike (the thread reads it unlocked) */
  int hb_ms = cddp__heartbeat_ms(members->n, m->base_hb_ms, m->timeout_ms);
  if (hb_ms != m->hb_ms)
    CDDP_INFO(CDDP_SUB_RDZV, "%d members: heartbeat every %d ms (CDDP_HEARTBEAT_MS %d, timeout %d ms), so the store's steady load stays flat",
              members->n, hb_ms, m->base_hb_ms, m->timeout_ms);
  __atomic_store_n(&m->hb_ms, hb_ms, __ATOMIC_RELAXED);
  memset(m->said, 0, sizeof m->said); /* a new generation: pending agents are looked at again */
  pthread_mutex_unlock(&m->mu);
  free(old);
}

void cddp__monitor_pending(cddp__monitor_t *m, const char *rec, size_t len) {
  if (!m) return;
  pthread_mutex_lock(&m->mu);
  m->pending_len = rec && len <= sizeof m->pending ? len : 0;
  if (m->pending_len) memcpy(m->pending, rec, len);
  pthread_mutex_unlock(&m->mu);
}

void cddp__monitor_lease(cddp__monitor_t *m, const int *hosting) {
  if (!m) return;
  pthread_mutex_lock(&m->mu);
  m->hosting = hosting;
  pthread_mutex_unlock(&m->mu);
}

void cddp__monitor_deadline(cddp__monitor_t *m, uint64_t deadline_ns) {
  if (!m) return;
  pthread_mutex_lock(&m->mu);
  m->deadline = deadline_ns;
  pthread_mutex_unlock(&m->mu);
}

void cddp__monitor_stop(cddp__monitor_t *m, int goodbye) {
  if (!m) return;
  __atomic_store_n(&m->stop, 1, __ATOMIC_RELEASE);
  pthread_join(m->th, NULL);
  if (goodbye) {
    (void)cddp_store_set(m->s, KEY(LEFT, m->self), CDDP__JOB_FLAG, CDDP__JOB_FLAG_LEN);
    cddp_store_close(m->s);
  } else {
    cddp__store_tcp_abandon(m->raw); /* prefix view leaks with the process; the will stays */
  }
  pthread_mutex_destroy(&m->mu);
  free(m);
}

/* ---- the agent's side ---- */

#define LINE_OF(...) snprintf(ms->line, sizeof ms->line, __VA_ARGS__)

cddp_result_t cddp__membership_begin(cddp__membership_t *ms, const cddp__rdzv_node_t *nodes, int n) {
  cddp__members_t *m = malloc(sizeof *m);
  if (!m) return cddp__fail(CDDP_SYSTEM, "out of memory");
  cddp_result_t r = cddp__members_of_nodes(nodes, n, m) != 0
                        ? cddp__fail(CDDP_INVALID_ARG, "--restart-mode replace handles at most %d nodes", CDDP__MAX_MEMBERS)
                        : cddp__members_write(ms->store, 0, m);
  free(m);
  if (r == CDDP_OK) cddp__membership_refresh(ms);
  return r;
}

cddp_result_t cddp__membership_pend(cddp__membership_t *ms, int nproc) {
  char val[96];
  cddp__member_t me = {.id = ms->self, .nproc = nproc};
  snprintf(me.host, sizeof me.host, "%s", ms->host);
  size_t len = cddp__job_pending_format(&me, val, sizeof val);
  ms->pending = 1, ms->joined = 0, ms->ending = 0;
  memset(&ms->cur, 0, sizeof ms->cur);
  CDDP_CHECK(cddp_store_set(ms->store, KEY(PENDING, ms->self), val, len));
  cddp__monitor_pending(ms->mon, val, len);
  cddp__membership_refresh(ms);
  return CDDP_OK;
}

void cddp__membership_refresh(cddp__membership_t *ms) {
  int64_t g;
  cddp__members_t *m = malloc(sizeof *m);
  if (!m || cddp__gen_latest(ms->store, &g) != CDDP_OK || g < ms->gen) {
    free(m);
    return;
  }
  cddp_result_t r = cddp__members_read(ms->store, g, m);
  if (r == CDDP_NOT_FOUND && g > 0) { /* a replacement made without a record: same members */
    ms->gen = g;
    cddp__monitor_watch(ms->mon, &ms->cur, g);
  } else if (r == CDDP_OK && m->stop) {
    ms->ending = 2;
    LINE_OF("%s", m->line);
  } else if (r == CDDP_OK && cddp__members_find(m, ms->self, NULL, NULL) < 0 && ms->pending) {
    ms->gen = g; /* still waiting to be taken in */
  } else if (r == CDDP_OK && cddp__members_find(m, ms->self, NULL, NULL) < 0) {
    ms->ending = 1;
    LINE_OF("node %s (agent %d) was dropped from the job: generation %lld goes on without it (it was declared lost); "
            "its workers stop", ms->host, ms->self, (long long)g);
  } else if (r == CDDP_OK) {
    if (ms->pending) { /* taken in */
      (void)cddp_store_delete(ms->store, KEY(PENDING, ms->self), NULL);
      cddp__monitor_pending(ms->mon, NULL, 0);
      ms->pending = 0, ms->joined = 1;
    }
    ms->cur = *m, ms->gen = g;
    cddp__monitor_watch(ms->mon, &ms->cur, g);
    cddp__store_move_note(ms->mv, &ms->cur, g);
    if (m->wait_ms > 0 && ms->wait_gen != g) /* below MIN: the wait starts when this agent sees it */
      cddp__monitor_deadline(ms->mon, cddp__now_ns() + (uint64_t)m->wait_ms * 1000000ull);
    else if (m->wait_ms <= 0 && ms->wait_gen >= 0)
      cddp__monitor_deadline(ms->mon, 0);
    if (m->wait_ms > 0 && ms->wait_gen != g) ms->wait_gen = g;
    else if (m->wait_ms <= 0) ms->wait_gen = -1;
  }
  free(m);
  cddp__clear_error();
}

/* The pending agents (elastic/pending/<id>, alive) in the order they registered; *worlds gets
 * elastic/worlds (malloc'd, or NULL). */
static int read_pending(cddp__membership_t *ms, cddp__member_t *cand, int max, char **worlds) {
  int64_t n = 0;
  int k = 0;
  *worlds = NULL;
  if (cddp_store_add(ms->store, KEY(AGENTS, 0), 0, &n) != CDDP_OK) n = 0;
  for (int id = 0; id < n && id < MAX_AGENT_IDS && k < max; id++) {
    void *v = NULL;
    size_t len = 0;
    if (cddp_store_get(ms->store, KEY(PENDING, id), &v, &len, 0) != CDDP_OK) continue;
    cddp__member_t *c = &cand[k];
    c->id = id;
    int bad = cddp__job_pending_parse(v, len, c);
    free(v);
    if (bad || exists(ms->store, KEY(DEAD, id)) || exists(ms->store, KEY(LEFT, id))) continue;
    k++;
  }
  void *v = NULL;
  size_t len = 0;
  if (cddp_store_get(ms->store, KEY(WORLDS, 0), &v, &len, 0) == CDDP_OK && (*worlds = malloc(len + 1))) {
    memcpy(*worlds, v, len);
    (*worlds)[len] = '\0';
  }
  free(v);
  cddp__clear_error();
  return k;
}

/* "0 -> 0, 2 -> 1" style rank map of the members kept (ranges for nproc > 1); a newcomer: "new 2". */
static void rank_map(const cddp__members_t *a, const cddp__members_t *b, char *buf, size_t size) {
  size_t o = 0;
  buf[0] = '\0';
  for (int i = 0; i < b->n && o + 40 < size; i++) {
    int ob, nb;
    int was = cddp__members_find(a, b->m[i].id, &ob, NULL);
    cddp__members_find(b, b->m[i].id, &nb, NULL);
    int k = b->m[i].nproc - 1;
    const char *sep = o ? ", " : "";
    if (was < 0 && k) o += (size_t)snprintf(buf + o, size - o, "%snew %d-%d", sep, nb, nb + k);
    else if (was < 0) o += (size_t)snprintf(buf + o, size - o, "%snew %d", sep, nb);
    else if (k) o += (size_t)snprintf(buf + o, size - o, "%s%d-%d -> %d-%d", sep, ob, ob + k, nb, nb + k);
    else o += (size_t)snprintf(buf + o, size - o, "%s%d -> %d", sep, ob, nb);
  }
}

/* A pending agent not taken in: one line, once in the job (elastic/spare/<id> decides who says it). */
static void say_refused(cddp__membership_t *ms, const cddp__change_t *c) {
  if (c->refused_id < 0) return;
  char host[64] = "?";
  void *cur = NULL;
  size_t len = 0;
  char me[24];
  size_t ml = cddp__job_int_format(ms->self, me, sizeof me);
  if (cddp_store_compare_set(ms->store, KEY(SPARE, c->refused_id), NULL, 0, me, ml, &cur, &len) == CDDP_OK && len == ml &&
      !memcmp(cur, me, len)) {
    for (int k = 0; k < c->ncand; k++)
      if (c->cand[k].id == c->refused_id) snprintf(host, sizeof host, "%s", c->cand[k].host);
    fprintf(stderr, "cddp run: node %s (agent %d) waits as a spare: %s\n", host, c->refused_id, c->refused);
  }
  free(cur);
  cddp__clear_error();
}

/* Proposes the next generation: without the lost agent (lost >= 0) and with the pending
 * agents that fit. Exactly one agent makes it; that one logs the line. */
static void propose(cddp__membership_t *ms, int lost, const char *why, int expired) {
  if (ms->ending || ms->pending) return;
  cddp__member_t *cand = malloc(sizeof *cand * CDDP__MAX_MEMBERS);
  char *worlds = NULL;
  if (!cand) return;
  cddp__change_t c = {.self = ms->self, .lost = lost, .why = why, .min_nodes = ms->min_nodes,
                      .max_nodes = ms->max_nodes, .cand = cand, .refused_id = -1,
                      .wait_ms = ms->wait_ms, .expired = expired};
  c.ncand = read_pending(ms, cand, CDDP__MAX_MEMBERS, &worlds);
  c.worlds = worlds;
  char host[64] = "?";
  int at = lost >= 0 ? cddp__members_find(&ms->cur, lost, NULL, NULL) : -1;
  if (at >= 0) snprintf(host, sizeof host, "%s", ms->cur.m[at].host);
  c.ann.kind = CDDP__GEN_LOSS;
  snprintf(c.ann.what, sizeof c.ann.what, "node %s (agent %d, %s)", host, lost, why ? why : "");
  int64_t g = 0;
  cddp__members_t before = ms->cur;
  cddp_result_t r = cddp__gen_change(ms->store, &c.ann, ms->self, cddp__members_next, &c, &g);
  if (r != CDDP_OK && r != CDDP_ABORTED) {
    if (lost >= 0)
      fprintf(stderr, "cddp run: node %s (agent %d) lost (%s) but no new generation could be made: %s\n", host, lost,
              why, cddp_last_error());
    else
      fprintf(stderr, "cddp run: a node waits to join but no new generation could be made: %s\n", cddp_last_error());
  }
  if (g == 0) say_refused(ms, &c);
  cddp__membership_refresh(ms);
  if (g > 0 && c.proposed_wait) {
    fprintf(stderr, "cddp run: job below MIN: %d of at least %d nodes after losing %s (agent %d, %s); waiting up to "
            "%.1f s for a node to join (--rdzv-timeout)\n", ms->cur.n, ms->min_nodes, host, lost, why, ms->wait_ms / 1e3);
  } else if (g > 0 && c.ended_wait) {
    char map[300];
    rank_map(&before, &ms->cur, map, sizeof map);
    fprintf(stderr, "cddp run: %s: generation %lld: world %d -> %d, ranks %s (the job goes on)\n", c.ann.what, (long long)g,
            cddp__members_world(&before), cddp__members_world(&ms->cur), map);
  } else if (g > 0 && !c.proposed_stop) {
    char map[300];
    rank_map(&before, &ms->cur, map, sizeof map);
    char *spare = c.spare_at >= 0 ? c.ann.what + c.spare_at : NULL; /* "; spare node H (agent B) takes its place" */
    if (spare) *spare = '\0';
    if (lost >= 0)
      fprintf(stderr, "cddp run: node %s (agent %d) lost: %s%s%s; generation %lld: world %d -> %d, ranks %s\n", host, lost,
              why, spare ? "; " : "", spare ? spare + 2 : "", (long long)g, cddp__members_world(&before),
              cddp__members_world(&ms->cur), map);
    else
      fprintf(stderr, "cddp run: join %s: generation %lld: world %d -> %d, ranks %s (taken in at the workers' next step "
              "boundary)\n", c.ann.what, (long long)g, cddp__members_world(&before), cddp__members_world(&ms->cur), map);
  }
  free(cand), free(worlds);
  if (!ms->ending) cddp__membership_done(ms, 0);
}

static void on_lost(cddp__membership_t *ms, int id, const char *why) {
  if (cddp__members_find(&ms->cur, id, NULL, NULL) < 0) return;
  propose(ms, id, why, 0);
}

void cddp__membership_events(cddp__membership_t *ms) {
  cddp__agent_ev_t ev[16];
  int n = cddp__agent_ev_recv(ms->pipe[0], ev, 16);
  for (int i = 0; i < n; i++) {
    const cddp__agent_ev_t *e = &ev[i];
    switch (e->kind) {
    case CDDP__AEV_LOST: on_lost(ms, e->id, e->why); break;
    case CDDP__AEV_PENDING: propose(ms, -1, NULL, 0); break;
    case CDDP__AEV_WAITED: propose(ms, -1, NULL, 1); break;
    case CDDP__AEV_GEN:
      cddp__membership_refresh(ms);
      if (!ms->ending) cddp__membership_done(ms, 0);
      break;
    case CDDP__AEV_STORE_MOVED: /* the done marks stayed with the old store: this node's again */
      if (ms->marked && !ms->ending) cddp__membership_done(ms, 1);
      break;
    default: break;
    }
    if (ms->ending) continue; /* the first reason to end is the one said */
    switch (e->kind) {
    case CDDP__AEV_CUT:
      ms->ending = 1;
      LINE_OF("node %s (agent %d) is cut off from the job (%s): the others go on without it after "
              "CDDP_HEARTBEAT_TIMEOUT_MS; its workers stop", ms->host, ms->self, e->why);
      break;
    case CDDP__AEV_STORE_STOP:
      ms->ending = 2;
      LINE_OF("node %s (agent %d) %s", ms->host, ms->self, cddp__store_move_line(ms->mv));
      break;
    case CDDP__AEV_STORE_CUT:
      ms->ending = 1;
      LINE_OF("node %s (agent %d) is cut off from the job (%s): the others go on without it; its workers stop",
              ms->host, ms->self, cddp__store_move_line(ms->mv));
      break;
    case CDDP__AEV_FROZE:
      ms->ending = 2, ms->fence = 1;
      LINE_OF("node %s (agent %d) hosts the job's store but stood still for %lld ms (frozen or starved, past the "
              "heartbeat timeout): the others may have taken the store over, so it stops (split-brain guard)",
              ms->host, ms->self, (long long)e->value);
      break;
    case CDDP__AEV_MINORITY:
      ms->ending = 2, ms->fence = 1;
      LINE_OF("node %s (agent %d) hosts the job's store but hears from only %d of its %d nodes: it stops, so that "
              "the others, a majority, may take the store over and go on (split-brain guard)", ms->host, ms->self,
              e->id, e->n);
      break;
    case CDDP__AEV_STOP: {
      void *v = NULL;
      size_t len = 0;
      if (cddp_store_get(ms->store, KEY(STOP, 0), &v, &len, 0) == CDDP_OK) {
        ms->ending = 2;
        LINE_OF("%.*s", (int)len, (char *)v);
      }
      free(v);
      break;
    }
    default: break;
    }
  }
}

void cddp__membership_done(cddp__membership_t *ms, int mark) {
  if (ms->pending || ms->cur.n == 0) return; /* not a member: not ours to say */
  if (mark && cddp_store_set(ms->store, cddp__job_key(CDDP__JK_RDZV_DONE, ms->round, ms->self).s, CDDP__JOB_FLAG,
                             CDDP__JOB_FLAG_LEN) != CDDP_OK)
    return;
  if (mark) ms->marked = 1;
  /* the count of marks gates the exact look at every member's flag: without it each agent
   * would read N flags at each change and at the end, N^2 requests for the job */
  int64_t marked = 0;
  if (cddp_store_add(ms->store, cddp__job_key(CDDP__JK_RDZV_NDONE, ms->round, 0).s, mark ? 1 : 0, &marked) != CDDP_OK ||
      marked < ms->cur.n)
    return;
  for (int i = 0; i < ms->cur.n; i++)
    if (!exists(ms->store, cddp__job_key(CDDP__JK_RDZV_DONE, ms->round, ms->cur.m[i].id).s)) return;
  cddp__job_event_t done = {.kind = CDDP__EV_DONE};
  (void)cddp__rdzv_post(ms->store, ms->round, &done, NULL);
}

/* member.c - the agent's membership monitor: heartbeat, will, and the detection of crashed or
 * silent member agents (cddp run --restart-mode replace). */
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
#include "run/member.h"
#include "store/store_internal.h"

#define TICK_MS 50 /* how often wills and announcements are looked at */

typedef struct watched {
  int id, reported;
  int64_t last;        /* heartbeat counter last read (-1: never) */
  uint64_t changed_at; /* when it was last seen moving */
} watched_t;

struct cddp__monitor {
  pthread_t th;
  pthread_mutex_t mu; /* guards the watch list and gen */
  cddp_store_t *raw, *s; /* raw: the connection with the will; s: "<run_id>/" over it */
  int self, hb_ms, timeout_ms, fd, stop;
  int64_t gen, gen_seen;
  int n;
  watched_t w[CDDP__MAX_MEMBERS];
};

static void say(cddp__monitor_t *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(cddp__monitor_t *m, const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n > (int)sizeof buf - 2) n = (int)sizeof buf - 2;
  buf[n++] = '\n';
  ssize_t w = write(m->fd, buf, (size_t)n);
  (void)w;
}

static int exists(cddp_store_t *s, const char *key) {
  const char *k = key;
  int r = cddp_store_wait(s, &k, 1, 0) == CDDP_OK;
  cddp__clear_error();
  return r;
}

/* One heartbeat period: beat, then read every watched counter. */
static cddp_result_t beat(cddp__monitor_t *m, uint64_t now) {
  char key[64];
  int64_t v;
  snprintf(key, sizeof key, "elastic/hb/%d", m->self);
  CDDP_CHECK(cddp_store_add(m->s, key, 1, &v));
  pthread_mutex_lock(&m->mu);
  for (int i = 0; i < m->n; i++) {
    watched_t *w = &m->w[i];
    if (w->reported) continue;
    snprintf(key, sizeof key, "elastic/hb/%d", w->id);
    if (cddp_store_add(m->s, key, 0, &v) != CDDP_OK) break;
    if (v != w->last) {
      w->last = v, w->changed_at = now;
      continue;
    }
    uint64_t still = (now - w->changed_at) / 1000000ull;
    if (still < (uint64_t)m->timeout_ms) continue;
    snprintf(key, sizeof key, "elastic/left/%d", w->id);
    if (exists(m->s, key)) continue; /* it left properly */
    w->reported = 1;
    say(m, "lost %d no heartbeat for %llu ms", w->id, (unsigned long long)still);
  }
  pthread_mutex_unlock(&m->mu);
  if (exists(m->s, "elastic/stop")) say(m, "stop");
  return CDDP_OK;
}

/* The store stopped answering: says "cut <why>" (the failure that broke the connection, not
 * the later "unusable" of the call that found it broken). */
static void say_cut(cddp__monitor_t *m, const char *first) {
  const char *e = cddp_last_error();
  say(m, "cut %s", strstr(e, "unusable") && first[0] ? first : e);
}

static void *monitor_main(void *arg) {
  cddp__monitor_t *m = arg;
  uint64_t next_beat = 0;
  char first[200] = "";
  while (!__atomic_load_n(&m->stop, __ATOMIC_ACQUIRE)) {
    uint64_t now = cddp__now_ns();
    if (now >= next_beat) {
      if (beat(m, now) != CDDP_OK) { /* no answer within timeout_ms: the others drop this node */
        say_cut(m, first);
        break;
      }
      next_beat = now + (uint64_t)m->hb_ms * 1000000ull;
    }
    char key[64];
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < m->n; i++) {
      watched_t *w = &m->w[i];
      snprintf(key, sizeof key, "elastic/dead/%d", w->id);
      if (!w->reported && exists(m->s, key)) {
        w->reported = 1;
        say(m, "lost %d its connection closed", w->id);
      }
    }
    int64_t g = CDDP_MAX(m->gen, m->gen_seen);
    pthread_mutex_unlock(&m->mu);
    snprintf(key, sizeof key, "elastic/gen/%lld", (long long)g + 1);
    const char *k = key;
    cddp_result_t r = cddp_store_wait(m->s, &k, 1, TICK_MS);
    if (r == CDDP_OK) {
      pthread_mutex_lock(&m->mu);
      m->gen_seen = g + 1;
      pthread_mutex_unlock(&m->mu);
      say(m, "gen %lld", (long long)g + 1);
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
  m->fd = notify_fd;
  pthread_mutex_init(&m->mu, NULL);
  char key[256], prefix[160];
  snprintf(prefix, sizeof prefix, "%s/", run_id);
  snprintf(key, sizeof key, "%selastic/dead/%d", prefix, self_id);
  cddp_result_t r = cddp_store_tcp_connect(&m->raw, host, port, token, 10000);
  /* a call unanswered for the heartbeat timeout means this node is cut off (its link, a
   * partition): the others drop it after the same time, so it stops instead of hanging */
  if (r == CDDP_OK) cddp_store_set_timeout(m->raw, m->timeout_ms);
  if (r == CDDP_OK) r = cddp__store_tcp_will(m->raw, key, "connection closed", 17);
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
  pthread_mutex_lock(&m->mu);
  watched_t old[CDDP__MAX_MEMBERS];
  int nold = m->n;
  memcpy(old, m->w, sizeof(watched_t) * (size_t)nold);
  m->n = 0;
  for (int i = 0; i < members->n; i++) {
    if (members->m[i].id == m->self) continue;
    watched_t w = {.id = members->m[i].id, .last = -1, .changed_at = now};
    for (int j = 0; j < nold; j++) /* keep what is known of a member still watched */
      if (old[j].id == w.id) w.last = old[j].last, w.changed_at = old[j].changed_at;
    m->w[m->n++] = w;
  }
  m->gen = gen;
  pthread_mutex_unlock(&m->mu);
}

void cddp__monitor_stop(cddp__monitor_t *m, int goodbye) {
  if (!m) return;
  __atomic_store_n(&m->stop, 1, __ATOMIC_RELEASE);
  pthread_join(m->th, NULL);
  if (goodbye) {
    char key[64];
    snprintf(key, sizeof key, "elastic/left/%d", m->self);
    (void)cddp_store_set(m->s, key, "1", 1);
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
  cddp__members_t *m = calloc(1, sizeof *m);
  if (!m) return cddp__fail(CDDP_SYSTEM, "out of memory");
  for (int i = 0; i < n && i < CDDP__MAX_MEMBERS; i++) {
    m->m[i].id = nodes[i].id, m->m[i].nproc = nodes[i].nproc;
    snprintf(m->m[i].host, sizeof m->m[i].host, "%s", nodes[i].host);
  }
  m->n = CDDP_MIN(n, CDDP__MAX_MEMBERS);
  cddp_result_t r = n > CDDP__MAX_MEMBERS
                        ? cddp__fail(CDDP_INVALID_ARG, "--restart-mode replace handles at most %d nodes", CDDP__MAX_MEMBERS)
                        : cddp__members_write(ms->store, 0, m);
  free(m);
  if (r == CDDP_OK) cddp__membership_refresh(ms);
  return r;
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
  } else if (r == CDDP_OK && cddp__members_find(m, ms->self, NULL, NULL) < 0) {
    ms->ending = 1;
    LINE_OF("node %s (agent %d) was dropped from the job: generation %lld goes on without it (it was declared lost); "
            "its workers stop", ms->host, ms->self, (long long)g);
  } else if (r == CDDP_OK) {
    ms->cur = *m, ms->gen = g;
    cddp__monitor_watch(ms->mon, &ms->cur, g);
  }
  free(m);
  cddp__clear_error();
}

typedef struct loss {
  cddp__membership_t *ms;
  int id, proposed_stop;
  const char *why;
} loss_t;

/* The next member record without the lost agent (or a stop record below min_nodes). */
static int drop_member(const cddp__members_t *cur, cddp__members_t *next, void *ctx) {
  loss_t *l = ctx;
  int at = cddp__members_find(cur, l->id, NULL, NULL);
  if (at < 0 || cddp__members_find(cur, l->ms->self, NULL, NULL) < 0) return 1; /* done already / not ours */
  memset(next, 0, sizeof *next);
  for (int i = 0; i < cur->n; i++)
    if (i != at) next->m[next->n++] = cur->m[i];
  if (next->n < l->ms->min_nodes) {
    next->stop = 1, l->proposed_stop = 1;
    snprintf(next->line, sizeof next->line, "job stopped: %d of at least %d nodes left after losing %s (agent %d, %s)",
             next->n, l->ms->min_nodes, cur->m[at].host, l->id, l->why);
  }
  return 0;
}

/* "0 -> 0, 2 -> 1" style rank map of the members kept (ranges for nproc > 1). */
static void rank_map(const cddp__members_t *a, const cddp__members_t *b, char *buf, size_t size) {
  size_t o = 0;
  buf[0] = '\0';
  for (int i = 0; i < b->n && o + 40 < size; i++) {
    int ob, nb;
    cddp__members_find(a, b->m[i].id, &ob, NULL);
    cddp__members_find(b, b->m[i].id, &nb, NULL);
    int k = b->m[i].nproc - 1;
    if (k) o += (size_t)snprintf(buf + o, size - o, "%s%d-%d -> %d-%d", o ? ", " : "", ob, ob + k, nb, nb + k);
    else o += (size_t)snprintf(buf + o, size - o, "%s%d -> %d", o ? ", " : "", ob, nb);
  }
}

static void on_lost(cddp__membership_t *ms, int id, const char *why) {
  int at = cddp__members_find(&ms->cur, id, NULL, NULL);
  if (at < 0 || ms->ending) return;
  char host[64], what[200];
  snprintf(host, sizeof host, "%s", ms->cur.m[at].host);
  snprintf(what, sizeof what, "node %s (agent %d, %s)", host, id, why);
  loss_t l = {ms, id, 0, why};
  int64_t g = 0;
  cddp__members_t before = ms->cur;
  cddp_result_t r = cddp__gen_change(ms->store, what, ms->self, drop_member, &l, &g);
  if (r != CDDP_OK && r != CDDP_ABORTED)
    fprintf(stderr, "cddp run: node %s (agent %d) lost (%s) but no new generation could be made: %s\n", host, id, why,
            cddp_last_error());
  cddp__membership_refresh(ms);
  if (g > 0 && !l.proposed_stop) {
    char map[300];
    rank_map(&before, &ms->cur, map, sizeof map);
    fprintf(stderr, "cddp run: node %s (agent %d) lost: %s; generation %lld: world %d -> %d, ranks %s\n", host, id,
            why, (long long)g, cddp__members_world(&before), cddp__members_world(&ms->cur), map);
  }
  if (!ms->ending) cddp__membership_done(ms, 0);
}

void cddp__membership_events(cddp__membership_t *ms) {
  char buf[4096];
  ssize_t n = read(ms->pipe[0], buf, sizeof buf - 1);
  if (n <= 0) return;
  buf[n] = '\0';
  for (char *line = buf, *nl; *line; line = nl + 1) {
    if (!(nl = strchr(line, '\n'))) break;
    *nl = '\0';
    int id, used = 0;
    if (sscanf(line, "lost %d %n", &id, &used) == 1 && used) {
      on_lost(ms, id, line + used);
    } else if (!strncmp(line, "gen ", 4)) {
      cddp__membership_refresh(ms);
      if (!ms->ending) cddp__membership_done(ms, 0);
    } else if (!strncmp(line, "cut ", 4) && !ms->ending) {
      ms->ending = 1;
      LINE_OF("node %s (agent %d) is cut off from the job (%s): the others go on without it after "
              "CDDP_HEARTBEAT_TIMEOUT_MS; its workers stop", ms->host, ms->self, line + 4);
    } else if (!strcmp(line, "stop") && !ms->ending) {
      void *v = NULL;
      size_t len = 0;
      if (cddp_store_get(ms->store, "elastic/stop", &v, &len, 0) == CDDP_OK) {
        ms->ending = 2;
        LINE_OF("%.*s", (int)len, (char *)v);
      }
      free(v);
    }
  }
}

void cddp__membership_done(cddp__membership_t *ms, int mark) {
  char key[64];
  if (mark) {
    snprintf(key, sizeof key, "rdzv/%d/done/%d", ms->round, ms->self);
    if (cddp_store_set(ms->store, key, "1", 1) != CDDP_OK) return;
  }
  for (int i = 0; i < ms->cur.n; i++) {
    snprintf(key, sizeof key, "rdzv/%d/done/%d", ms->round, ms->cur.m[i].id);
    if (!exists(ms->store, key)) return;
  }
  void *now = NULL;
  size_t len;
  snprintf(key, sizeof key, "rdzv/%d/event", ms->round);
  (void)cddp_store_compare_set(ms->store, key, NULL, 0, "done", 4, &now, &len);
  free(now);
}

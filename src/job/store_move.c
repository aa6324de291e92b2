/* store_move.c - the job's store outlives its host: standby, vote, take-over (store_move.h). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"
#include "common/sock.h"
#include "job/events.h"
#include "job/store_move.h"
#include "job/worker_store.h"
#include "store/failover.h"
#include "store/store_internal.h"

#define VOTE_CONNECT_MS 1000 /* reaching the next in line to vote */
#define LEASE_MARGIN_MS 1000 /* past the heartbeat timeout: a cut-off host has stopped by then */
#define POLL_MS 50
#define PEERS_WAIT_MS 1000 /* for the host's list: an agent that hosts the store lists itself at once */
#define VOTE_TEXT_MAX (CDDP__MAX_MEMBERS * 80 + 64) /* a vote: the member record and a line */

struct cddp__store_move {
  pthread_mutex_t mu; /* guards cur, gen and line */
  char run_id[160], token[256];
  int self, hb_timeout_ms, notify_fd, restart_all;
  char store_host[256];
  int store_port;
  cddp_store_server_t *standby; /* this agent's server until it takes over (NULL: it hosts) */
  char host[256];               /* where the others reach this agent's server */
  char bound[64];               /* the address the standby listens on ("": every interface) */
  int port;
  int hosting;                  /* atomic */
  cddp__members_t cur;
  int64_t gen;
  cddp__rdzv_cfg_t rcfg;        /* the round this agent is in (rz.nodes: a copy; NULL: none yet) */
  cddp__rdzv_t rz;
  int running;                  /* atomic: the vote thread was started */
  cddp_store_t *raw;            /* reads the peers list again at each generation (main thread) */
  int raw_lent;                 /* raw is the agent's (cfg->conn): never closed here */
  cddp_store_t *own;            /* this agent's standby: it keeps a copy of the list, so a node
                                   pointed at this member finds the store's host */
  int64_t read_at_gen;
  int64_t restarts;             /* the most worker replacements seen counted (elastic/restarts) */
  char lost_host[256];
  int lost_port;
  int64_t lost_epoch;
  uint64_t lost_at;
  char line[512];
};

int cddp__store_move_wanted(int max_nodes, int standalone) {
  return max_nodes >= 2 && !standalone && cddp__knob_int(CDDP_KNOB_STORE_FAILOVER) != 0;
}

/* This agent's own server as it reaches it: the address its standby listens on, or the loopback. */
static const char *own_host(const cddp__store_move_t *mv) { return mv->bound[0] ? mv->bound : "127.0.0.1"; }

/* A raw client of host:port (the token's), and the job's view over it when view is wanted;
 * here: of that server only (a standby: it neither follows the list there nor fails over). */
static cddp_result_t open_store(const cddp__store_move_t *mv, const char *host, int port, int ms, int here,
                                cddp_store_t **raw, cddp_store_t **view) {
  CDDP_CHECK(here ? cddp__store_tcp_connect_here(raw, host, port, mv->token, ms)
                  : cddp_store_tcp_connect(raw, host, port, mv->token, ms));
  if (!view) return CDDP_OK;
  char prefix[170];
  snprintf(prefix, sizeof prefix, "%s/", mv->run_id);
  cddp_result_t r = cddp_store_prefix_create(view, *raw, prefix, 1);
  if (r != CDDP_OK) cddp_store_close(*raw);
  return r;
}

/* Adds (id, host, port) to the peers list (or renames an entry of host:port to id); first: the
 * store's host, listed first (clients go to the first entry), whoever listed before it. */
static cddp_result_t list_self(cddp_store_t *raw, int id, const char *host, int port, int first) {
  for (int tries = 0; tries < 100; tries++) {
    void *v = NULL, *won = NULL;
    size_t len = 0, wl = 0;
    cddp__peers_t *p = calloc(1, sizeof *p);
    if (!p) return cddp__fail(CDDP_SYSTEM, "out of memory");
    cddp_result_t r = cddp_store_get(raw, CDDP__PEERS_KEY, &v, &len, 0);
    if (r == CDDP_OK && cddp__peers_parse(v, len, p) != 0) r = cddp__fail(CDDP_REMOTE, "malformed %s", CDDP__PEERS_KEY);
    if (r == CDDP_TIMEOUT) r = CDDP_OK, v = NULL; /* none yet: epoch 0 */
    int at = r == CDDP_OK ? cddp__peers_find(p, host, port) : -1;
    if (r == CDDP_OK && at < 0 && p->n == CDDP__MAX_PEERS) r = cddp__fail(CDDP_INVALID_ARG, "more than %d nodes to list", CDDP__MAX_PEERS);
    char buf[CDDP__MAX_PEERS * 300];
    size_t bl = 0;
    if (r == CDDP_OK) {
      if (at < 0) at = p->n++;
      if (first && at > 0) { /* move it to the front */
        memmove(&p->p[1], &p->p[0], sizeof p->p[0] * (size_t)at);
        at = 0;
      }
      p->p[at].id = id, p->p[at].port = port;
      snprintf(p->p[at].host, sizeof p->p[at].host, "%s", host);
      if (!(bl = cddp__peers_format(p, buf, sizeof buf))) r = cddp__fail(CDDP_INVALID_ARG, "peers list too long");
    }
    if (r == CDDP_OK) r = cddp_store_compare_set(raw, CDDP__PEERS_KEY, v, v ? len : 0, buf, bl, &won, &wl);
    int done = r == CDDP_OK && wl == bl && !memcmp(won, buf, bl);
    if (done) cddp__failover_note(p); /* this process's clients may not have read it yet */
    free(v), free(won), free(p);
    if (r != CDDP_OK || done) return r;
  }
  return cddp__fail(CDDP_TIMEOUT, "could not add this node to %s (too much contention)", CDDP__PEERS_KEY);
}

/* ---- the vote (a thread started by the first client that finds the store gone) ---- */

/* Within 300 ms: 1 a listener, 0 a refusal (its host is up and nothing listens there, so a
 * store's process there is gone for sure: a cut-off host cannot be told from a dead one
 * otherwise), -1 no answer. */
static int knock(const char *host, int port) { return cddp__sock_knock(host, port, 300); }

/* Why this node gives up, one line (the agent prints it after "node H (agent A) "). */
static void set_line(cddp__store_move_t *mv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_line(cddp__store_move_t *mv, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&mv->mu);
  vsnprintf(mv->line, sizeof mv->line, fmt, ap);
  pthread_mutex_unlock(&mv->mu);
  va_end(ap);
}

/* Nobody takes the store over with this node: STORE_STOP when the store is gone for good (its
 * port refuses: its process died), else STORE_CUT (this node may be the one cut off: it comes
 * back when the store does, as a node cut off does). Either way the agent's calls end now
 * instead of waiting out CDDP_STORE_FAILOVER_MS. */
static void say_stop(cddp__store_move_t *mv) {
  int gone = !mv->lost_host[0] || knock(mv->lost_host, mv->lost_port) == 0;
  /* the verdict first: the give-up ends the watcher's call too, and the agent must find the
   * verdict waiting when it reads that "lost" (a node cut off comes back; agent.c, run_round) */
  cddp__agent_ev_say(mv->notify_fd, gone ? CDDP__AEV_STORE_STOP : CDDP__AEV_STORE_CUT, mv->self, 0, 0, NULL);
  cddp__failover_give_up();
}

/* The votes in this agent's server: *best = the vote of the latest generation (its restarts:
 * the most any vote saw), *n_for = how many of best's members voted, *max_id = the highest
 * agent id seen. */
static void count_votes(cddp_store_t *view, int64_t epoch, cddp__job_vote_t *best, int *n_for, int *max_id) {
  cddp__job_vote_t *v = malloc(sizeof *v);
  int ids[2 * CDDP__MAX_MEMBERS], nids = 0, voted[2 * CDDP__MAX_MEMBERS] = {0};
  if (!v) return;
  for (int i = 0; i < best->members.n; i++) ids[nids++] = best->members.m[i].id;
  for (int k = 0; k < nids; k++) { /* ids grows when a later generation brings members in */
    void *t = NULL;
    size_t len = 0;
    if (cddp_store_get(view, cddp__job_key(CDDP__JK_STORE_VOTE, epoch, ids[k]).s, &t, &len, 0) != CDDP_OK ||
        cddp__job_vote_parse(t, len, v) != 0) {
      free(t);
      continue;
    }
    free(t);
    voted[k] = 1;
    if (ids[k] > *max_id) *max_id = ids[k];
    int64_t restarts = CDDP_MAX(v->restarts, best->restarts);
    if (v->gen > best->gen) {
      *best = *v;
      for (int i = 0; i < best->members.n && nids < 2 * CDDP__MAX_MEMBERS; i++) {
        int known = 0;
        for (int j = 0; j < nids && !known; j++) known = ids[j] == best->members.m[i].id;
        if (!known) ids[nids++] = best->members.m[i].id;
      }
    }
    best->restarts = restarts;
  }
  cddp__clear_error();
  *n_for = 0;
  for (int k = 0; k < nids; k++)
    if (voted[k] && cddp__members_find(&best->members, ids[k], NULL, NULL) >= 0) (*n_for)++;
  for (int i = 0; i < best->members.n; i++)
    if (best->members.m[i].id > *max_id) *max_id = best->members.m[i].id;
  free(v);
}

/* This agent is next in line: waits for a majority of the latest generation's members (and
 * for the lost host's lease unless its process is gone for sure), rebuilds the job's state in
 * its own server, then publishes the next epoch's peers list. */
static void take_over(cddp__store_move_t *mv, const cddp__job_vote_t *mine, const cddp__peers_t *peers, int lost_id) {
  cddp_store_t *raw = NULL, *view = NULL;
  int64_t epoch = mv->lost_epoch + 1;
  cddp__job_vote_t *best = malloc(sizeof *best);
  char *buf = malloc(VOTE_TEXT_MAX);
  cddp_result_t r = best && buf ? open_store(mv, own_host(mv), mv->port, 2000, 1, &raw, &view) : CDDP_SYSTEM;
  if (r != CDDP_OK && best && buf) r = open_store(mv, mv->host, mv->port, 2000, 1, &raw, &view);
  size_t bl = r == CDDP_OK ? cddp__job_vote_format(mine, buf, VOTE_TEXT_MAX) : 0;
  if (r == CDDP_OK && bl) r = cddp_store_set(view, cddp__job_key(CDDP__JK_STORE_VOTE, epoch, mv->self).s, buf, bl);
  /* the lease runs from the last vote counted: a voter's process stopped speaking to the lost
   * host when it took that store for lost, before it voted (every client of it is cut then) */
  uint64_t heard = mv->lost_at;
  uint64_t deadline = mv->lost_at + (uint64_t)(3 * mv->hb_timeout_ms + LEASE_MARGIN_MS) * 1000000ull;
  int dead = 0, n_for = 0, counted = 0, max_id = mv->self, said = 0, conceded = 0;
  for (; r == CDDP_OK;) {
    *best = *mine;
    count_votes(view, epoch, best, &n_for, &max_id);
    if (n_for > counted) counted = n_for, heard = cddp__now_ns();
    uint64_t lease = heard + (uint64_t)(mv->hb_timeout_ms + LEASE_MARGIN_MS) * 1000000ull;
    if (!dead) dead = knock(mv->lost_host, mv->lost_port) == 0;
    /* of two members, the lost host cannot vote and this one cannot be a majority alone; but a
     * refused port proves the lost host's store process is gone, and with no third member no
     * one else can take over: its place counts for this agent. Not with three or more: two
     * survivors cut apart could each count it and each take over. */
    conceded = dead && best->members.n == 2 && lost_id >= 0 && cddp__members_find(&best->members, lost_id, NULL, NULL) >= 0;
    uint64_t now = cddp__now_ns();
    int majority = 2 * (n_for + conceded) > best->members.n;
    if (majority && (dead || now >= lease)) break;
    if (now >= deadline && !majority) {
      set_line(mv, "lost the store at %s:%d, and only %d of the %d nodes of generation %lld reached agent %d, next "
               "in line to host it: carrying on needs a majority (split-brain guard)", mv->lost_host, mv->lost_port,
               n_for, best->members.n, (long long)best->gen, mv->self);
      r = CDDP_TIMEOUT, said = 1;
      break;
    }
    usleep(POLL_MS * 1000);
  }
  /* the rebuild: the generation, the restart budget used, the agent ids handed out, the lost
   * host's will */
  cddp__job_announce_t what = cddp__job_announce_moved(mv->self);
  if (mv->restart_all) { /* a round's generation stays a restart: a node joining later finds the round */
    what = (cddp__job_announce_t){.kind = CDDP__GEN_RESTART};
    snprintf(what.what, sizeof what.what, "restart %lld", (long long)best->gen);
  }
  int64_t had = 0;
  if (r == CDDP_OK) r = cddp__gen_restore(view, best->gen, &what, &best->members);
  if (r == CDDP_OK) r = cddp_store_add(view, cddp__job_key(CDDP__JK_RESTARTS, 0, 0).s, 0, &had);
  if (r == CDDP_OK && had < best->restarts)
    r = cddp_store_add(view, cddp__job_key(CDDP__JK_RESTARTS, 0, 0).s, best->restarts - had, &had);
  if (r == CDDP_OK) r = cddp_store_add(view, cddp__job_key(CDDP__JK_AGENTS, 0, 0).s, 0, &had);
  if (r == CDDP_OK && had <= max_id) r = cddp_store_add(view, cddp__job_key(CDDP__JK_AGENTS, 0, 0).s, max_id + 1 - had, &had);
  if (r == CDDP_OK && lost_id >= 0 && cddp__members_find(&best->members, lost_id, NULL, NULL) >= 0)
    r = cddp_store_set(view, cddp__job_key(CDDP__JK_DEAD, lost_id, 0).s, CDDP__JOB_WILL, strlen(CDDP__JOB_WILL));
  pthread_mutex_lock(&mv->mu);
  if (r == CDDP_OK && mv->rz.nodes) r = cddp__rdzv_restore(view, &mv->rcfg, &mv->rz); /* late nodes come in */
  pthread_mutex_unlock(&mv->mu);
  /* said before the clients can move: a round this agent joins on the new store comes after it */
  if (r == CDDP_OK) cddp__agent_ev_say(mv->notify_fd, CDDP__AEV_STORE_MOVED, mv->self, 0, epoch, NULL);
  if (r == CDDP_OK) { /* open for business: the clients take the first server past the lost epoch */
    cddp__peers_t *next = malloc(sizeof *next);
    char text[CDDP__MAX_PEERS * 300];
    size_t tl = 0;
    if (next) {
      *next = *peers;
      next->epoch = epoch, next->n = 1; /* the host first: where a new client goes */
      next->p[0].id = mv->self, next->p[0].port = mv->port;
      snprintf(next->p[0].host, sizeof next->p[0].host, "%s", mv->host);
      for (int i = 0; i < peers->n; i++)
        if (!(peers->p[i].port == mv->lost_port && !strcmp(peers->p[i].host, mv->lost_host)) &&
            !(peers->p[i].port == mv->port && !strcmp(peers->p[i].host, mv->host)))
          next->p[next->n++] = peers->p[i];
      tl = cddp__peers_format(next, text, sizeof text);
    }
    r = tl ? cddp_store_set(raw, CDDP__PEERS_KEY, text, tl) : cddp__fail(CDDP_SYSTEM, "out of memory");
    free(next);
  }
  if (r == CDDP_OK) {
    __atomic_store_n(&mv->hosting, 1, __ATOMIC_RELEASE);
    fprintf(stderr, "cddp run: the store's host (agent %d at %s:%d) is lost; agent %d took the store over at %s:%d "
            "(epoch %lld, %d of the %d nodes of generation %lld voted%s, %.1f s after the loss)\n", lost_id, mv->lost_host,
            mv->lost_port, mv->self, mv->host, mv->port, (long long)epoch, n_for, best->members.n, (long long)best->gen,
            conceded ? ", and the lost host's port refuses: its store is gone" : "", (cddp__now_ns() - mv->lost_at) / 1e9);
  } else {
    if (!said)
      set_line(mv, "lost the store at %s:%d, and could not take it over: %s", mv->lost_host, mv->lost_port,
               cddp_last_error());
    say_stop(mv);
  }
  if (view) cddp_store_close(view);
  free(best), free(buf);
}

/* Votes for the first member in line (the latest generation's order) that is reachable, or
 * takes over when that is this agent. */
static void *vote_main(void *arg) {
  cddp__store_move_t *mv = arg;
  cddp__job_vote_t *mine = malloc(sizeof *mine);
  cddp__peers_t *peers = malloc(sizeof *peers);
  char *buf = malloc(VOTE_TEXT_MAX); /* up to CDDP__MAX_MEMBERS lines: too big for a thread's stack */
  if (!mine || !peers || !buf || cddp__failover_view(peers) != 0) goto out;
  pthread_mutex_lock(&mv->mu);
  mine->gen = mv->gen, mine->members = mv->cur, mine->restarts = mv->restarts;
  pthread_mutex_unlock(&mv->mu);
  if (mv->restart_all && mine->gen < 0) {
    /* restart-all, and no round of the job closed with this node in it: no generation to carry
     * on with, nothing to move (the nodes still gathering end as they did without a move) */
    set_line(mv, "lost the store at %s:%d before the job formed with this node", mv->lost_host, mv->lost_port);
    say_stop(mv);
    goto out;
  }
  if (cddp__members_find(&mine->members, mv->self, NULL, NULL) < 0) {
    /* not a member (a node waiting to be taken in): its vote would not count, and the move is
     * not its to judge; its clients follow the store to its new host by themselves */
    CDDP_INFO(CDDP_SUB_RUN, "store at %s:%d lost: agent %d waits to be taken in, and waits for the new host",
              mv->lost_host, mv->lost_port, mv->self);
    goto out;
  }
  int at = cddp__peers_find(peers, mv->lost_host, mv->lost_port), lost_id = at >= 0 ? peers->p[at].id : -1;
  size_t bl = cddp__job_vote_format(mine, buf, VOTE_TEXT_MAX);
  for (int i = 0; i < mine->members.n && bl; i++) {
    int id = mine->members.m[i].id, k = -1;
    for (int j = 0; j < peers->n && k < 0; j++)
      if (peers->p[j].id == id && j != at) k = j;
    if (id == lost_id || k < 0) continue;
    if (id == mv->self) {
      /* next in line because no one before answered: if no other member answers at all, this
       * node is the one cut off, and waiting for votes that cannot come only delays saying so */
      int others = 0, reached = 0;
      for (int j = 0; j < peers->n; j++)
        if (j != at && j != k && cddp__members_find(&mine->members, peers->p[j].id, NULL, NULL) >= 0) {
          others++;
          reached += knock(peers->p[j].host, peers->p[j].port) == 1;
        }
      if (others > 0 && reached == 0) {
        set_line(mv, "lost the store at %s:%d, and reaches none of the other %d members", mv->lost_host,
                 mv->lost_port, others);
        say_stop(mv);
        goto out;
      }
      take_over(mv, mine, peers, lost_id);
      goto out;
    }
    cddp_store_t *raw, *view;
    if (open_store(mv, peers->p[k].host, peers->p[k].port, VOTE_CONNECT_MS, 1, &raw, &view) != CDDP_OK) continue;
    cddp_result_t r = cddp_store_set(view, cddp__job_key(CDDP__JK_STORE_VOTE, mv->lost_epoch + 1, mv->self).s, buf, bl);
    cddp_store_close(view);
    if (r == CDDP_OK) {
      CDDP_INFO(CDDP_SUB_RUN, "store at %s:%d lost: voted for agent %d at %s:%d to take it over", mv->lost_host,
                mv->lost_port, id, peers->p[k].host, peers->p[k].port);
      /* the store moves there (or this node's calls end when nobody takes it) */
      cddp__agent_ev_say(mv->notify_fd, CDDP__AEV_STORE_MOVED, id, 0, mv->lost_epoch + 1, NULL);
      /* after a link flap the others may still reach the old host, which keeps its majority, and
       * nobody takes over: this node left that epoch for good, so it is cut off, and says so once
       * the latest take-over could have happened (the next in line may lose the store two
       * heartbeat timeouts after this node, then waits three and its margin at most) */
      uint64_t until = mv->lost_at + (uint64_t)(5 * mv->hb_timeout_ms + 2 * LEASE_MARGIN_MS) * 1000000ull;
      while (cddp__failover_epoch() <= mv->lost_epoch && cddp__now_ns() < until) usleep(POLL_MS * 1000);
      if (cddp__failover_epoch() <= mv->lost_epoch) {
        set_line(mv, "lost the store at %s:%d and voted for agent %d to take it over, which did not within %.1f s "
                 "(the others still reach the old host: this node is the one cut off)", mv->lost_host, mv->lost_port,
                 id, (cddp__now_ns() - mv->lost_at) / 1e9);
        say_stop(mv);
      }
      goto out;
    }
  }
  set_line(mv, "lost the store at %s:%d, and no member next in line to host it could be reached", mv->lost_host,
           mv->lost_port);
  say_stop(mv);
out:
  cddp__clear_error();
  free(mine), free(peers), free(buf);
  __atomic_store_n(&mv->running, 0, __ATOMIC_RELEASE); /* last: a later move is voted on again */
  return NULL;
}

static void on_lost(const char *host, int port, int64_t epoch, void *arg) {
  cddp__store_move_t *mv = arg;
  if (__atomic_load_n(&mv->hosting, __ATOMIC_ACQUIRE) && port == mv->port && !strcmp(host, mv->host)) {
    /* this node's own calls to the store it serves went unanswered: it was frozen or starved
     * for longer than the others wait, and they may have taken the store over. It must not
     * follow them as if nothing happened (its workers' state is stale): it stops. */
    set_line(mv, "hosted the job's store but its own calls to it went unanswered for two heartbeat timeouts (it "
             "was frozen or starved): the others may have taken the store over, so it stops (split-brain guard)");
    say_stop(mv);
    return;
  }
  if (__atomic_exchange_n(&mv->running, 1, __ATOMIC_ACQ_REL)) return;
  snprintf(mv->lost_host, sizeof mv->lost_host, "%s", host);
  mv->lost_port = port, mv->lost_epoch = epoch, mv->lost_at = cddp__now_ns();
  pthread_t th;
  if (pthread_create(&th, NULL, vote_main, mv) == 0) pthread_detach(th);
}

/* ---- set-up ---- */

/* Closes what mv holds; mv itself stays (a vote thread, or a client's hook called just before
 * it was unset, may still read it; the process ends next). */
static void release(cddp__store_move_t *mv) {
  if (mv->raw && !mv->raw_lent) cddp_store_close(mv->raw);
  if (mv->own) cddp_store_close(mv->own);
  cddp_store_server_stop(mv->standby);
  mv->raw = mv->own = NULL, mv->standby = NULL;
}

cddp_result_t cddp__store_move_list_host(const char *host, int port, const char *token) {
  cddp_store_t *raw;
  CDDP_CHECK(cddp_store_tcp_connect(&raw, host, port, token, 10000));
  cddp_result_t r = list_self(raw, -1, host, port, 1);
  cddp_store_close(raw);
  return r;
}

/* the standby serves what the store it may replace serves: torch's protocol beside cddp's when the
 * workers meet there */
static cddp_result_t standby_start(cddp__store_move_t *mv, const cddp__store_move_cfg_t *cfg, const char *bind,
                                   int port) {
  return cfg->torch ? cddp__job_torch_store_start(&mv->standby, bind, port, mv->token, cfg->run_id)
                    : cddp_store_server_start(&mv->standby, bind, port, mv->token);
}

cddp_result_t cddp__store_move_start(cddp__store_move_t **out, const cddp__store_move_cfg_t *cfg) {
  *out = NULL;
  cddp__store_move_t *mv = calloc(1, sizeof *mv);
  if (!mv) return cddp__fail(CDDP_SYSTEM, "out of memory");
  pthread_mutex_init(&mv->mu, NULL);
  snprintf(mv->run_id, sizeof mv->run_id, "%s", cfg->run_id);
  snprintf(mv->token, sizeof mv->token, "%s", cfg->token ? cfg->token : "");
  snprintf(mv->store_host, sizeof mv->store_host, "%s", cfg->store_host);
  mv->self = cfg->self, mv->store_port = cfg->store_port, mv->hb_timeout_ms = cfg->hb_timeout_ms;
  mv->notify_fd = cfg->notify_fd, mv->gen = -1, mv->read_at_gen = -1, mv->restart_all = cfg->restart_all;
  mv->raw = cfg->conn, mv->raw_lent = cfg->conn != NULL;
  cddp_result_t r = CDDP_OK;
  if (!cfg->hosting) { /* only a store an agent hosts can move: it lists itself as it starts serving */
    void *v = NULL;
    size_t len = 0;
    if (!mv->raw) r = open_store(mv, cfg->store_host, cfg->store_port, 10000, 0, &mv->raw, NULL);
    /* a `cddp store` says it never moves: no wait (1 s at every agent's start, before) */
    int fixed = r == CDDP_OK && cddp_store_get(mv->raw, CDDP__FIXED_KEY, &v, &len, 0) == CDDP_OK;
    free(v), v = NULL;
    cddp__clear_error();
    cddp_result_t g = fixed ? CDDP_TIMEOUT
                      : r == CDDP_OK ? cddp_store_get(mv->raw, CDDP__PEERS_KEY, &v, &len, PEERS_WAIT_MS) : r;
    free(v);
    if (g == CDDP_TIMEOUT) {
      CDDP_INFO(CDDP_SUB_RUN, "the store at %s:%d is not an agent's (%s): it cannot move", cfg->store_host,
                cfg->store_port, fixed ? "a `cddp store`" : "it lists no peers");
      cddp__clear_error();
      release(mv);
      free(mv);
      return CDDP_OK;
    }
    if (r == CDDP_OK) r = g;
  }
  if (r == CDDP_OK && cfg->hosting) { /* listed as the clients reach it */
    snprintf(mv->host, sizeof mv->host, "%s", cfg->store_host);
    mv->port = cfg->store_port, mv->hosting = 1;
  } else if (r == CDDP_OK) {
    /* the store's port when this host has it free: a node started later may name any member. It
     * listens where it is listed, the address the others reach this host at, as the store does */
    cddp__sock_addr_toward(cfg->store_host, cfg->store_port, mv->host, sizeof mv->host);
    char why[400];
    const char *bind = cddp__sock_listen_addr_for(mv->host, mv->bound, sizeof mv->bound, why, sizeof why) ? mv->bound
                                                                                                      : NULL;
    if (!bind && why[0]) CDDP_INFO(CDDP_SUB_RUN, "the standby store listens on every interface: %s", why);
    r = standby_start(mv, cfg, bind, cfg->store_port);
    if (r != CDDP_OK) r = standby_start(mv, cfg, bind, 0);
    if (r == CDDP_OK) mv->port = cddp_store_server_port(mv->standby);
  }
  if (r == CDDP_OK && !mv->raw) r = open_store(mv, cfg->store_host, cfg->store_port, 10000, 0, &mv->raw, NULL);
  if (r == CDDP_OK && mv->standby) r = open_store(mv, own_host(mv), mv->port, 10000, 1, &mv->own, NULL);
  if (r == CDDP_OK) r = list_self(mv->raw, mv->self, mv->host, mv->port, cfg->hosting);
  if (r != CDDP_OK) {
    release(mv);
    free(mv);
    return cddp__fail(r, "the store's failover: %s", cddp_last_error());
  }
  cddp__failover_set_hook(on_lost, mv);
  CDDP_INFO(CDDP_SUB_RUN, "store failover on: agent %d %s %s:%d", mv->self, cfg->hosting ? "hosts the store at" :
            "serves a standby at", mv->host, mv->port);
  *out = mv;
  return CDDP_OK;
}

void cddp__store_move_restarts(cddp__store_move_t *mv, int64_t restarts) {
  if (!mv) return;
  pthread_mutex_lock(&mv->mu);
  if (restarts > mv->restarts) mv->restarts = restarts;
  pthread_mutex_unlock(&mv->mu);
}

void cddp__store_move_note(cddp__store_move_t *mv, const cddp__members_t *m, int64_t gen) {
  if (!mv || m->stop || m->n == 0) return;
  pthread_mutex_lock(&mv->mu);
  int fresh = gen > mv->read_at_gen || mv->gen < 0;
  if (gen >= mv->gen) mv->cur = *m, mv->gen = gen;
  pthread_mutex_unlock(&mv->mu);
  if (!fresh) return;
  /* a generation's members listed their standbys before they joined it: read the list again,
   * so that the vote knows where each of them is */
  void *v = NULL;
  size_t len = 0;
  cddp__peers_t *p = malloc(sizeof *p);
  if (p && cddp_store_get(mv->raw, CDDP__PEERS_KEY, &v, &len, 0) == CDDP_OK && cddp__peers_parse(v, len, p) == 0) {
    cddp__failover_note(p);
    mv->read_at_gen = gen;
    if (mv->own && !__atomic_load_n(&mv->hosting, __ATOMIC_ACQUIRE)) /* a copy: it names the host first */
      (void)cddp_store_set(mv->own, CDDP__PEERS_KEY, v, len);
  }
  free(v), free(p);
  cddp__clear_error();
}

void cddp__store_move_round(cddp__store_move_t *mv, const cddp__rdzv_cfg_t *cfg, const cddp__rdzv_t *rz) {
  if (!mv || !rz->nodes || rz->nnodes <= 0) return;
  cddp__rdzv_node_t *copy = malloc((size_t)rz->nnodes * sizeof *copy);
  if (!copy) return;
  memcpy(copy, rz->nodes, (size_t)rz->nnodes * sizeof *copy);
  pthread_mutex_lock(&mv->mu);
  free(mv->rz.nodes);
  mv->rcfg = *cfg, mv->rz = *rz, mv->rz.nodes = copy;
  pthread_mutex_unlock(&mv->mu);
}

void cddp__store_move_notify(cddp__store_move_t *mv, int fd) {
  if (mv) mv->notify_fd = fd;
}

cddp_result_t cddp__store_move_rejoin(cddp__store_move_t *mv, int new_id) {
  if (!mv) return CDDP_OK;
  mv->self = new_id;
  __atomic_store_n(&mv->running, 0, __ATOMIC_RELEASE); /* it reached the store again: a later loss is voted on */
  /* the old connection broke with the cut: a fresh one, where the store is now */
  char host[256];
  int port = mv->store_port;
  snprintf(host, sizeof host, "%s", mv->store_host);
  (void)cddp__failover_current(host, sizeof host, &port);
  cddp_store_t *fresh;
  CDDP_CHECK(open_store(mv, host, port, 10000, 0, &fresh, NULL));
  if (!mv->raw_lent) cddp_store_close(mv->raw); /* a lent one broke with the agent's: left to it */
  mv->raw = fresh, mv->raw_lent = 0;
  return list_self(mv->raw, mv->self, mv->host, mv->port, __atomic_load_n(&mv->hosting, __ATOMIC_ACQUIRE));
}

int cddp__store_move_hosting(const cddp__store_move_t *mv) {
  return mv ? __atomic_load_n(&mv->hosting, __ATOMIC_ACQUIRE) : 0;
}

const int *cddp__store_move_hosting_flag(const cddp__store_move_t *mv) { return mv ? &mv->hosting : NULL; }

const char *cddp__store_move_line(const cddp__store_move_t *mv) { return mv ? mv->line : ""; }

void cddp__store_move_stop(cddp__store_move_t *mv) {
  if (!mv) return;
  cddp__failover_set_hook(NULL, NULL);
  release(mv);
}

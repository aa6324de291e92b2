/* members.c - who is in the next generation: a lost agent dropped, pending agents taken in
 * while the job has room and a world its batch splits over, or a wait or a stop below MIN. */
#include <stdio.h>
#include <string.h>

#include "job/elastic.h"

int cddp__members_world(const cddp__members_t *m) {
  int w = 0;
  for (int i = 0; i < m->n; i++) w += m->m[i].nproc;
  return w;
}

int cddp__members_of_nodes(const cddp__job_node_t *nodes, int n, cddp__members_t *out) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < n && out->n < CDDP__MAX_MEMBERS; i++) {
    cddp__member_t *p = &out->m[out->n++];
    p->id = nodes[i].id, p->nproc = nodes[i].nproc;
    snprintf(p->host, sizeof p->host, "%s", nodes[i].host);
  }
  return n > CDDP__MAX_MEMBERS ? -1 : 0;
}

int cddp__members_find(const cddp__members_t *m, int agent_id, int *rank_base, int *world) {
  int base = 0, at = -1;
  for (int i = 0; i < m->n; i++) {
    if (m->m[i].id == agent_id && at < 0) at = i;
    if (at < 0) base += m->m[i].nproc;
  }
  if (rank_base) *rank_base = at < 0 ? -1 : base;
  if (world) *world = cddp__members_world(m);
  return at;
}

int cddp__members_next(const cddp__members_t *cur, cddp__members_t *next, void *ctx) {
  cddp__change_t *c = ctx;
  c->ann.what[0] = c->refused[0] = '\0';
  c->ann.kind = CDDP__GEN_LOSS;
  c->added = c->proposed_stop = c->proposed_wait = c->ended_wait = 0, c->refused_id = -1, c->spare_at = -1;
  if (cddp__members_find(cur, c->self, NULL, NULL) < 0) return 1; /* not ours to change */
  if (c->expired) { /* the wait is over: nobody (enough) came */
    if (cur->wait_ms <= 0) return 1; /* nodes came in time (or no wait): nothing to stop */
    memset(next, 0, sizeof *next);
    next->stop = 1, c->proposed_stop = 1;
    snprintf(next->line, sizeof next->line, "job stopped: %d of at least %d nodes left after losing %.200s; no node "
             "joined within %.1f s (--rdzv-timeout)", cur->n, c->min_nodes, cur->line, cur->wait_ms / 1e3);
    c->ann.kind = CDDP__GEN_STOP;
    snprintf(c->ann.what, sizeof c->ann.what, "no node joined within %.1f s", cur->wait_ms / 1e3);
    return 0;
  }
  int at = c->lost >= 0 ? cddp__members_find(cur, c->lost, NULL, NULL) : -1;
  memset(next, 0, sizeof *next);
  for (int i = 0; i < cur->n; i++)
    if (i != at) next->m[next->n++] = cur->m[i];
  size_t o = 0;
  if (at >= 0)
    o = (size_t)snprintf(c->ann.what, sizeof c->ann.what, "node %s (agent %d, %s)", cur->m[at].host, c->lost, c->why);
  for (int k = 0; k < c->ncand && next->n < CDDP__MAX_MEMBERS; k++) {
    const cddp__member_t *p = &c->cand[k];
    if (cddp__members_find(next, p->id, NULL, NULL) >= 0 || p->id == c->lost) continue;
    if (next->n >= c->max_nodes) {
      if (c->refused_id < 0)
        c->refused_id = p->id, snprintf(c->refused, sizeof c->refused, "the job has its --nnodes maximum of %d nodes",
                                        c->max_nodes);
      continue;
    }
    int w = cddp__members_world(next) + p->nproc;
    if (!cddp__job_worlds_allow(c->worlds, w)) {
      if (c->refused_id < 0)
        c->refused_id = p->id, snprintf(c->refused, sizeof c->refused, "a world of %d ranks cannot split the global "
                                        "batch (world sizes that work: %s)", w, c->worlds);
      continue;
    }
    next->m[next->n++] = *p;
    if (at >= 0 && !c->added && o < sizeof c->ann.what) c->spare_at = (int)o;
    if (o < sizeof c->ann.what)
      o += (size_t)snprintf(c->ann.what + o, sizeof c->ann.what - o, "%snode %s (agent %d)",
                            c->added ? ", " : at >= 0 ? "; spare " : "", p->host, p->id);
    c->added++;
  }
  if (at >= 0 && c->added && o < sizeof c->ann.what)
    snprintf(c->ann.what + o, sizeof c->ann.what - o, " takes its place");
  if (at < 0 && !c->added) return 1;
  if (at < 0) c->ann.kind = CDDP__GEN_JOIN;
  if (next->n < c->min_nodes && at < 0) { /* waiting below MIN: too few pending yet */
    c->refused_id = -1;
    return 1;
  }
  if (next->n < c->min_nodes && c->wait_ms > 0) { /* wait for pending nodes (none took the place) */
    if (c->added) { /* too few: they stay pending */
      next->n = 0;
      for (int i = 0; i < cur->n; i++)
        if (i != at) next->m[next->n++] = cur->m[i];
      c->added = 0, c->spare_at = -1;
    }
    next->wait_ms = c->wait_ms, c->proposed_wait = 1;
    snprintf(next->line, sizeof next->line, "%s (agent %d, %s)", cur->m[at].host, c->lost, c->why);
    c->ann.kind = CDDP__GEN_WAIT;
    snprintf(c->ann.what, sizeof c->ann.what, "node %s (agent %d, %s); below MIN, waiting up to %.1f s for a node to join",
             cur->m[at].host, c->lost, c->why, c->wait_ms / 1e3);
  } else if (next->n < c->min_nodes) {
    memset(next, 0, sizeof *next);
    next->stop = 1, c->proposed_stop = 1;
    c->ann.kind = CDDP__GEN_STOP; /* what names the loss */
    snprintf(next->line, sizeof next->line, "job stopped: %d of at least %d nodes left after losing %s (agent %d, %s)",
             cur->n - 1, c->min_nodes, cur->m[at].host, c->lost, c->why);
  } else if (cur->wait_ms > 0 && at < 0) { /* the wait ends: the lost node's loss, then the joiners */
    c->ended_wait = 1, c->ann.kind = CDDP__GEN_LOSS; /* the loss the wait was for, complete */
    char joined[400];
    snprintf(joined, sizeof joined, "%s", c->ann.what);
    snprintf(c->ann.what, sizeof c->ann.what, "node %.200s; %.170s joined in time", cur->line, joined);
  }
  return 0;
}

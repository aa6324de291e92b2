/* store_reach.c - an agent finds its job's store (at its endpoint, or on the Slurm step's node it
 * moved to), connects the job's view and reconnects it after a break. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/nodelist.h"
#include "common/sock.h"
#include "job/jobkeys.h"
#include "job/store_reach.h"
#include "store/failover.h"

cddp_result_t cddp__job_store_candidates(cddp__job_store_t *js, const char *nodes) {
  return cddp__nodelist_candidates(nodes, js->host, &js->cand, &js->ncand);
}

void cddp__job_store_release(cddp__job_store_t *js) {
  cddp__nodelist_free(js->cand, js->ncand);
  js->cand = NULL, js->ncand = 0;
}

void cddp__job_store_now(const cddp__job_store_t *js, char *host, size_t size, int *port) {
  snprintf(host, size, "%s", js->host);
  *port = js->port;
  (void)cddp__failover_current(host, size, port);
}

/* A server counts only when it serves the job's peers list: an agent's store, or a standby
 * that named the store's host (the client went there). An idle standby (one just started, by a
 * restarted node on the step's first node too, before it saw a generation) does not. */
static int serves_peers(cddp_store_t *base) {
  void *v = NULL;
  size_t len = 0;
  int ok = cddp_store_get(base, CDDP__PEERS_KEY, &v, &len, 0) == CDDP_OK;
  free(v);
  cddp__clear_error();
  return ok;
}

/* A node of the step other than the endpoint counts only when this job lives in the store it
 * leads to (its agent counter, which a take-over writes back): at the start, while the endpoint
 * is slow, and when another job's store holds the same port there, it does not. */
static int job_here(const cddp__job_store_t *js, cddp_store_t *base) {
  char prefix[160];
  cddp_store_t *v = NULL;
  snprintf(prefix, sizeof prefix, "%s/", js->run_id);
  cddp__jobkey_t key = cddp__job_key(CDDP__JK_AGENTS, 0, 0);
  const char *k = key.s;
  int ok = cddp_store_prefix_create(&v, base, prefix, 0) == CDDP_OK && cddp_store_wait(v, &k, 1, 0) == CDDP_OK;
  if (v) cddp_store_close(v);
  cddp__clear_error();
  return ok;
}

cddp_result_t cddp__job_store_reach(cddp__job_store_t *js, int timeout_ms, int probe, cddp_store_t **base) {
  if (js->ncand < 2) return cddp_store_tcp_connect(base, js->host, js->port, js->token, timeout_ms);
  uint64_t deadline = cddp__deadline_ms(timeout_ms);
  char why[320] = "no attempt", tried[512] = "";
  size_t n = 0;
  for (int i = 0; i < js->ncand && n < sizeof tried; i++)
    if (strcmp(js->cand[i], js->host))
      n += (size_t)snprintf(tried + n, sizeof tried - n, "%s%s", n ? ", " : "", js->cand[i]);
  for (;;) {
    for (int i = probe ? 0 : -1; i < js->ncand; i++) {
      const char *h = i < 0 ? js->host : js->cand[i];
      if (i >= 0 && (!strcmp(h, js->host) || cddp__sock_knock(h, js->port, 300) != 1)) continue;
      int ms = probe ? 1000 : CDDP_MAX(1, CDDP_MIN(1000, cddp__ms_left(deadline)));
      cddp_result_t r = cddp_store_tcp_connect(base, h, js->port, js->token, ms);
      if (r == CDDP_AUTH) return r;
      if (r == CDDP_OK && (!serves_peers(*base) || (i >= 0 && !job_here(js, *base)))) {
        cddp_store_close(*base);
        r = cddp__fail(CDDP_NOT_FOUND, "%s:%d leads to no store of job %s (a standby that does not know the store yet, "
                       "or another job's)", h, js->port, js->run_id);
      }
      if (r == CDDP_OK) {
        if (i >= 0 && !probe)
          fprintf(stderr, "cddp run: the store's endpoint %s:%d does not answer: reached the job's store through %s, "
                  "the step's next node that answers\n", js->host, js->port, h);
        cddp__peers_t *p = malloc(sizeof *p); /* where the client landed: the host its list names first */
        if (p && cddp__failover_view(p) == 0 && p->n > 0) {
          snprintf(js->host, sizeof js->host, "%s", p->p[0].host);
          js->port = p->p[0].port;
        } else if (i >= 0) {
          snprintf(js->host, sizeof js->host, "%s", h);
        }
        free(p);
        return CDDP_OK;
      }
      snprintf(why, sizeof why, "%s", cddp_last_error());
    }
    if (probe || cddp__ms_left(deadline) == 0) break;
    usleep(50000); /* a server that answers without a list: not in a tight loop */
  }
  return cddp__fail(CDDP_TIMEOUT, "%s:%d, nor through %s (the step's other nodes): %s", js->host, js->port, tried, why);
}

/* cddp__job_store_reach within --rdzv-timeout, saying every CDDP_RDZV_SAY_MS what it waits for
 * while the store is not up yet (node 0 not started: no wait is silent; rdzv_watch.h says the
 * same of the rendezvous after). */
static cddp_result_t reach_saying(cddp__job_store_t *js, cddp_store_t **base) {
  int64_t say_ms = cddp__knob_int(CDDP_KNOB_RDZV_SAY_MS);
  if (say_ms <= 0 || say_ms >= js->timeout_ms || js->ncand >= 2)
    return cddp__job_store_reach(js, js->timeout_ms, 0, base);
  uint64_t t0 = cddp__now_ns(), deadline = cddp__deadline_ms(js->timeout_ms);
  for (int says = 1;; says++) {
    int left = cddp__ms_left(deadline);
    cddp_result_t r = cddp__job_store_reach(js, (int)CDDP_MIN(say_ms, left), 0, base);
    if (r != CDDP_TIMEOUT || cddp__ms_left(deadline) == 0) return r;
    fprintf(stderr, "cddp run: %swaiting for the rendezvous store at %s:%d (%llu s of %d): %s\n",
            says >= 3 ? "warning: still " : "", js->host, js->port,
            (unsigned long long)((cddp__now_ns() - t0) / 1000000000u), js->timeout_ms / 1000, cddp_last_error());
  }
}

cddp_result_t cddp__job_store_connect(cddp__job_store_t *js, cddp_store_t **view) {
  return cddp__job_store_connect_base(js, view, NULL);
}

cddp_result_t cddp__job_store_connect_base(cddp__job_store_t *js, cddp_store_t **view, cddp_store_t **raw) {
  cddp_store_t *base;
  char why[512];
  uint64_t t0 = cddp__now_ns();
  cddp_result_t r = reach_saying(js, &base);
  if (r != CDDP_OK) {
    snprintf(why, sizeof why, "%s", cddp_last_error()); /* the detail goes into the next line */
    if (r == CDDP_AUTH)
      return cddp__fail(r, "the store at %s:%d refused our token (check CDDP_TOKEN / CDDP_TOKEN_FILE): %s", js->host,
                        js->port, why);
    /* a host that does not resolve fails at once: the line says how long it really tried */
    char waited[96];
    double secs = (double)(cddp__now_ns() - t0) / 1e9, limit = js->timeout_ms / 1e3;
    if (secs >= limit) snprintf(waited, sizeof waited, "within --rdzv-timeout %.1f s", limit);
    else snprintf(waited, sizeof waited, "gave up after %.1f s of --rdzv-timeout %.1f s", secs, limit);
    if (js->ncand >= 2) return cddp__fail(r, "cannot reach the rendezvous store at %s (%s)", why, waited);
    return cddp__fail(r, "cannot reach the rendezvous store at %s:%d (%s): %s", js->host, js->port, waited, why);
  }
  char prefix[160];
  snprintf(prefix, sizeof prefix, "%s/", js->run_id);
  r = cddp_store_prefix_create(view, base, prefix, 1);
  if (r != CDDP_OK) cddp_store_close(base);
  else if (raw) *raw = base;
  return r;
}

int cddp__job_store_reconnect(cddp__job_store_t *js, cddp_store_t **view) {
  int64_t v;
  /* a probe of a cut connection would wait the whole store timeout: a heartbeat timeout is
   * enough to tell, and the fresh connection gets --rdzv-timeout */
  cddp_store_set_timeout(*view, (int)cddp__knob_int(CDDP_KNOB_HEARTBEAT_TIMEOUT_MS));
  if (cddp_store_add(*view, cddp__job_key(CDDP__JK_AGENTS, 0, 0).s, 0, &v) == CDDP_OK) {
    cddp_store_set_timeout(*view, js->timeout_ms);
    return 0;
  }
  cddp_store_t *fresh;
  if (cddp__job_store_connect(js, &fresh) != CDDP_OK) return -1;
  *view = fresh;
  return 1;
}

int cddp__job_token_random(char *buf, size_t size) {
  unsigned char b[16];
  buf[0] = '\0';
  if (size < 2 * sizeof b + 1 || getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) return -1;
  for (size_t i = 0; i < sizeof b; i++) snprintf(buf + 2 * i, 3, "%02x", b[i]);
  return 0;
}

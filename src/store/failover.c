/* failover.c - the peers list of a store that may move, and the process's view of it (see
 * failover.h; the clients' side of the move is in store_tcp.c). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/failover.h"

int cddp__peers_parse(const void *text, size_t len, cddp__peers_t *out) {
  char buf[CDDP__MAX_PEERS * 300 + 64];
  if (!text || len >= sizeof buf) return -1;
  memcpy(buf, text, len);
  buf[len] = 0;
  memset(out, 0, sizeof *out);
  char *save = NULL, *line = strtok_r(buf, "\n", &save);
  long long e;
  int used = 0;
  if (!line || sscanf(line, "epoch %lld%n", &e, &used) != 1 || line[used] || e < 0) return -1;
  out->epoch = e;
  while ((line = strtok_r(NULL, "\n", &save))) {
    if (out->n == CDDP__MAX_PEERS) return -1;
    cddp__peer_t *p = &out->p[out->n];
    if (sscanf(line, "%d %255s %d%n", &p->id, p->host, &p->port, &used) != 3 || line[used] || p->port <= 0 ||
        p->port > 65535)
      return -1;
    out->n++;
  }
  return 0;
}

size_t cddp__peers_format(const cddp__peers_t *p, char *buf, size_t size) {
  size_t n = (size_t)snprintf(buf, size, "epoch %lld", (long long)p->epoch);
  for (int i = 0; i < p->n && n < size; i++)
    n += (size_t)snprintf(buf + n, size - n, "\n%d %s %d", p->p[i].id, p->p[i].host, p->p[i].port);
  return n < size ? n : 0;
}

int cddp__peers_find(const cddp__peers_t *p, const char *host, int port) {
  for (int i = 0; i < p->n; i++)
    if (p->p[i].port == port && !strcmp(p->p[i].host, host)) return i;
  return -1;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static cddp__peers_t view;
static int have_view;
static cddp__failover_hook_t hook;
static void *hook_arg;
static int64_t hooked = -1; /* the last epoch whose loss the hook heard of */
static struct {
  char host[256];
  int port;
  int64_t epoch;
} seen[CDDP__MAX_PEERS * 2]; /* every server any list named, and the latest epoch it was named at */
static int nseen;

static void remember(const cddp__peers_t *p) {
  for (int i = 0; i < p->n; i++) {
    int k = 0;
    while (k < nseen && !(seen[k].port == p->p[i].port && !strcmp(seen[k].host, p->p[i].host))) k++;
    if (k == nseen) {
      if (nseen == (int)(sizeof seen / sizeof *seen)) continue;
      nseen++;
      snprintf(seen[k].host, sizeof seen[k].host, "%s", p->p[i].host);
      seen[k].port = p->p[i].port, seen[k].epoch = -1;
    }
    if (p->epoch > seen[k].epoch) seen[k].epoch = p->epoch;
  }
}

int64_t cddp__failover_epoch_of(const char *host, int port) {
  int64_t e = -1;
  pthread_mutex_lock(&mu);
  for (int k = 0; k < nseen; k++)
    if (seen[k].port == port && !strcmp(seen[k].host, host)) e = seen[k].epoch;
  pthread_mutex_unlock(&mu);
  return e;
}

static int64_t view_epoch = -1; /* atomic copy of view.epoch */

int64_t cddp__failover_epoch(void) { return __atomic_load_n(&view_epoch, __ATOMIC_ACQUIRE); }

void cddp__failover_note(const cddp__peers_t *p) {
  pthread_mutex_lock(&mu);
  remember(p);
  if (!have_view || p->epoch > view.epoch || (p->epoch == view.epoch && p->n >= view.n)) view = *p, have_view = 1;
  __atomic_store_n(&view_epoch, view.epoch, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&mu);
}

int cddp__failover_current(char *host, size_t size, int *port) {
  pthread_mutex_lock(&mu);
  int moved = have_view && view.epoch > 0 && view.n > 0;
  if (moved) snprintf(host, size, "%s", view.p[0].host), *port = view.p[0].port;
  pthread_mutex_unlock(&mu);
  return moved ? 0 : -1;
}

int cddp__failover_view(cddp__peers_t *out) {
  pthread_mutex_lock(&mu);
  int ok = have_view;
  if (ok) *out = view;
  pthread_mutex_unlock(&mu);
  return ok ? 0 : -1;
}

void cddp__failover_set_hook(cddp__failover_hook_t fn, void *arg) {
  pthread_mutex_lock(&mu);
  hook = fn, hook_arg = arg;
  pthread_mutex_unlock(&mu);
}

void cddp__failover_lost(const char *host, int port, int64_t epoch) {
  pthread_mutex_lock(&mu);
  cddp__failover_hook_t fn = epoch > hooked ? hook : NULL;
  void *arg = hook_arg;
  if (epoch > hooked) hooked = epoch;
  pthread_mutex_unlock(&mu);
  if (fn) fn(host, port, epoch, arg);
}

static int64_t era;

void cddp__failover_give_up(void) { __atomic_add_fetch(&era, 1, __ATOMIC_ACQ_REL); }

int64_t cddp__failover_era(void) { return __atomic_load_n(&era, __ATOMIC_ACQUIRE); }

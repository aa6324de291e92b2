/* peers.c - the communicator's peer exchange in O(N) store requests (see peers.h). */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/peers.h"
#include "common/check.h"
#include "common/clock.h"

#define LIST_KEY "peer/all"
#define LIST_MAGIC "peers"
#define WAIT_SLICE_MS 200 /* between two looks at rank 0 while its list is due */

size_t cddp__peer_record_format(const cddp__peer_t *me, int check, char *buf, size_t size) {
  int n = snprintf(buf, size, "%s\n%s\n%d\n%d", me->host, me->host_id, me->pid, check ? 1 : 0);
  return n > 0 && (size_t)n < size ? (size_t)n : 0;
}

/* Copies [s, s+n) into dst (size bytes) as a C string: -1 when it does not fit or holds a NUL. */
static int copy_field(char *dst, size_t size, const char *s, size_t n) {
  if (n >= size || memchr(s, '\0', n)) return -1;
  memcpy(dst, s, n);
  dst[n] = '\0';
  return 0;
}

/* copy_field for a name of the list: no space or control character (rank 0 wrote none) */
static int copy_word(char *dst, size_t size, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] <= ' ') return -1;
  return copy_field(dst, size, s, n);
}

/* A whole decimal number in [0, max] from [s, s+n): -1 when it is not one. */
static long long number(const char *s, size_t n, long long max) {
  if (n == 0) return -1;
  long long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9' || v > (max - (s[i] - '0')) / 10) return -1; /* never past max */
    v = v * 10 + (s[i] - '0');
  }
  return v <= max ? v : -1;
}

int cddp__peer_record_parse(const void *rec, size_t len, cddp__peer_t *p, int *check) {
  const char *s = rec, *end = s + len, *f[4] = {0};
  size_t n[4] = {0};
  int nf = 0;
  while (nf < 4) { /* three or four fields (a record without the check has it off) */
    const char *nl = nf < 3 ? memchr(s, '\n', (size_t)(end - s)) : NULL;
    f[nf] = s, n[nf++] = (size_t)((nl ? nl : end) - s);
    if (!nl) break;
    s = nl + 1;
  }
  if (nf < 3) return -1;
  long long pid = number(f[2], n[2], INT32_MAX), chk = nf == 4 ? number(f[3], n[3], 1) : 0;
  if (copy_field(p->host, sizeof p->host, f[0], n[0]) || copy_field(p->host_id, sizeof p->host_id, f[1], n[1]) ||
      pid < 0 || chk < 0)
    return -1;
  p->pid = (int)pid, *check = (int)chk;
  return 0;
}

/* Appends s to the list with every space and control character as '_' (the list's separators). */
static size_t put_word(char *out, const char *s) {
  size_t n = strlen(s);
  for (size_t i = 0; i < n; i++) out[i] = (unsigned char)s[i] <= ' ' ? '_' : s[i];
  return n;
}

char *cddp__peer_list_format(const cddp__peer_t *peers, int world, int check, size_t *len) {
  int *host_of = malloc(sizeof *host_of * (size_t)world), *first = malloc(sizeof *first * (size_t)world);
  size_t cap = 64 + (size_t)world * (sizeof peers->host + sizeof peers->host_id + 24);
  char *out = malloc(cap);
  if (!host_of || !first || !out) {
    free(host_of), free(first), free(out);
    return NULL;
  }
  int nhosts = 0, last = -1;
  for (int r = 0; r < world; r++) { /* a host's ranks are mostly in a row: its last one first */
    int h = last >= 0 && !strcmp(peers[first[last]].host_id, peers[r].host_id) &&
                    !strcmp(peers[first[last]].host, peers[r].host) ? last : -1;
    for (int k = 0; k < nhosts && h < 0; k++)
      if (!strcmp(peers[first[k]].host_id, peers[r].host_id) && !strcmp(peers[first[k]].host, peers[r].host)) h = k;
    if (h < 0) h = nhosts, first[nhosts++] = r;
    host_of[r] = last = h;
  }
  size_t o = (size_t)snprintf(out, cap, LIST_MAGIC " %d %d %d\n", world, nhosts, check ? 1 : 0);
  for (int k = 0; k < nhosts; k++) {
    o += put_word(out + o, peers[first[k]].host_id);
    out[o++] = ' ';
    o += put_word(out + o, peers[first[k]].host);
    out[o++] = '\n';
  }
  for (int r = 0; r < world; r++) o += (size_t)snprintf(out + o, cap - o, "%d %d\n", host_of[r], peers[r].pid);
  free(host_of), free(first);
  *len = o;
  return out;
}

/* The next line of [*s, end) (without its '\n') into *line, *n: -1 when none is left. */
static int next_line(const char **s, const char *end, const char **line, size_t *n) {
  if (*s >= end) return -1;
  const char *nl = memchr(*s, '\n', (size_t)(end - *s));
  if (!nl) return -1;
  *line = *s, *n = (size_t)(nl - *s);
  *s = nl + 1;
  return 0;
}

/* Splits a line into at most max words at single spaces: the count. */
static int words(const char *line, size_t n, const char **w, size_t *wn, int max) {
  int k = 0;
  const char *s = line, *end = line + n;
  while (s < end && k < max) {
    const char *sp = memchr(s, ' ', (size_t)(end - s));
    const char *e = sp ? sp : end;
    w[k] = s, wn[k++] = (size_t)(e - s);
    s = sp ? sp + 1 : end;
    if (sp && s == end) return -1; /* a trailing space */
  }
  return s < end ? -1 : k;
}

int cddp__peer_list_parse(const void *text, size_t len, int world, cddp__peer_t *out, int *check, const char **why) {
  const char *s = text, *end = s + len, *line, *w[4];
  size_t n, wn[4];
  cddp__peer_t *hosts = NULL;
  int rc = -1;
  *why = "no header";
  if (next_line(&s, end, &line, &n) || words(line, n, w, wn, 4) != 4 || wn[0] != strlen(LIST_MAGIC) ||
      memcmp(w[0], LIST_MAGIC, wn[0]))
    return -1;
  long long nw = number(w[1], wn[1], INT32_MAX), nh = number(w[2], wn[2], INT32_MAX), chk = number(w[3], wn[3], 1);
  *why = "a header that is not for this communicator";
  if (nw != world || nh < 1 || nh > world || chk < 0) return -1;
  hosts = calloc((size_t)nh, sizeof *hosts);
  *why = "out of memory";
  if (!hosts) return -1;
  *why = "a malformed host line";
  for (long long k = 0; k < nh; k++)
    if (next_line(&s, end, &line, &n) || words(line, n, w, wn, 2) != 2 ||
        copy_word(hosts[k].host_id, sizeof hosts[k].host_id, w[0], wn[0]) ||
        copy_word(hosts[k].host, sizeof hosts[k].host, w[1], wn[1]))
      goto out;
  *why = "a malformed rank line";
  for (int r = 0; r < world; r++) {
    if (next_line(&s, end, &line, &n) || words(line, n, w, wn, 2) != 2) goto out;
    long long h = number(w[0], wn[0], nh - 1), pid = number(w[1], wn[1], INT32_MAX);
    if (h < 0 || pid < 0) goto out;
    out[r] = hosts[h];
    out[r].pid = (int)pid;
  }
  *why = "bytes after the last rank";
  if (s != end) goto out;
  *check = (int)chk;
  rc = 0;
out:
  free(hosts);
  return rc;
}

/* The first rank that has not published its record (-1: all have), looked at once each. */
static int first_missing(cddp_store_t *view, int world) {
  char key[32];
  for (int r = 0; r < world; r++) {
    snprintf(key, sizeof key, "peer/%d", r);
    const char *k = key;
    if (cddp_store_wait(view, &k, 1, 0) != CDDP_OK) return r;
  }
  return -1;
}

static cddp_result_t never_joined(cddp_store_t *view, int world, int round, int timeout_ms, int missing) {
  if (missing < 0) missing = first_missing(view, world);
  cddp__clear_error();
  if (missing < 0)
    return cddp__fail(CDDP_TIMEOUT, "rank 0 did not publish the communicator's peer list (round %d) within %d ms",
                      round, timeout_ms);
  return cddp__fail(CDDP_TIMEOUT, "rank %d of %d (round %d) never joined the communicator within %d ms", missing,
                    world, round, timeout_ms);
}

/* Rank 0 published its record and then exited on this host (killed while the communicator
 * formed): REMOTE naming it; OK while it lives, is elsewhere, or has not published yet. Its
 * record is read from the store until it is there (*known), then only its pid is looked at. */
static cddp_result_t rank0_alive(cddp_store_t *view, const cddp__peer_t *me, int round, cddp__peer_t *r0, int *known) {
  if (!*known) {
    void *v = NULL;
    size_t len = 0;
    int chk;
    *known = cddp_store_get(view, "peer/0", &v, &len, 0) == CDDP_OK && cddp__peer_record_parse(v, len, r0, &chk) == 0;
    free(v);
    cddp__clear_error();
  }
  int gone = *known && !strcmp(r0->host_id, me->host_id) && r0->pid > 0 && kill(r0->pid, 0) != 0 && errno == ESRCH;
  return gone ? cddp__fail(CDDP_REMOTE, "comm init: rank 0 (host %s) exited (pid %d) before it published the "
                                        "communicator's peer list (round %d)", r0->host, r0->pid, round)
              : CDDP_OK;
}

/* Rank 0: every rank's record, then the list for the others. */
static cddp_result_t gather(cddp_store_t *view, int world, int round, int timeout_ms, uint64_t deadline,
                            cddp__peer_t *out, int *check) {
  char key[32];
  for (int r = 0; r < world; r++) {
    void *v = NULL;
    size_t len = 0;
    int chk = 0;
    snprintf(key, sizeof key, "peer/%d", r);
    cddp_result_t res = cddp_store_get(view, key, &v, &len, cddp__ms_left(deadline));
    if (res == CDDP_TIMEOUT) return never_joined(view, world, round, timeout_ms, r);
    CDDP_CHECK(res);
    int bad = cddp__peer_record_parse(v, len, &out[r], &chk);
    free(v);
    if (bad) return cddp__fail(CDDP_REMOTE, "rank %d published a malformed peer record", r);
    *check &= chk;
  }
  size_t len = 0;
  const char *why = "";
  char *list = cddp__peer_list_format(out, world, *check, &len);
  if (!list) return cddp__fail(CDDP_SYSTEM, "comm init: out of memory for the peer list of %d ranks", world);
  /* rank 0 takes the list as the others will read it (names made safe), so every rank holds the
   * same table and decides the same transport from it */
  cddp_result_t r = cddp__peer_list_parse(list, len, world, out, check, &why) != 0
                        ? cddp__fail(CDDP_INTERNAL, "comm init: the peer list does not read back: %s", why)
                        : cddp_store_set(view, LIST_KEY, list, len);
  free(list);
  return r;
}

cddp_result_t cddp__peers_exchange(cddp_store_t *view, int rank, int world, int round, int timeout_ms,
                                   const cddp__peer_t *me, int my_check, cddp__peer_t *out, int *check) {
  char rec[sizeof me->host + sizeof me->host_id + 32], key[32];
  size_t n = cddp__peer_record_format(me, my_check, rec, sizeof rec);
  if (!n) return cddp__fail(CDDP_INTERNAL, "comm init: this rank's peer record does not fit");
  snprintf(key, sizeof key, "peer/%d", rank);
  CDDP_CHECK(cddp_store_set(view, key, rec, n));
  uint64_t deadline = cddp__deadline_ms(timeout_ms);
  *check = my_check ? 1 : 0;
  if (rank == 0) return gather(view, world, round, timeout_ms, deadline, out, check);
  void *v = NULL;
  size_t len = 0;
  cddp_result_t res;
  cddp__peer_t r0;
  int r0_known = 0;
  for (;;) { /* in slices: a rank 0 on this host that died while the list was due is seen at once */
    res = cddp_store_get(view, LIST_KEY, &v, &len, CDDP_MIN(cddp__ms_left(deadline), WAIT_SLICE_MS));
    if (res != CDDP_TIMEOUT) break;
    if (cddp__ms_left(deadline) == 0) return never_joined(view, world, round, timeout_ms, -1);
    CDDP_CHECK(rank0_alive(view, me, round, &r0, &r0_known));
  }
  CDDP_CHECK(res);
  const char *why = "";
  int bad = cddp__peer_list_parse(v, len, world, out, check, &why);
  free(v);
  return bad ? cddp__fail(CDDP_REMOTE, "the communicator's peer list (from rank 0, round %d) is malformed: %s", round, why)
             : CDDP_OK;
}

/* elastic.c - the generation protocol of in-place replacement: the claim that lets exactly one
 * agent make each generation, its member record and announcement, and waiting for the next. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "job/elastic.h"

#define KEY(kind, a) cddp__job_key(CDDP__JK_##kind, a, 0).s

/* elastic/gen/<gen>: set once generation gen is announced */
static cddp__jobkey_t announce_key(int64_t gen) { return cddp__job_key(CDDP__JK_GEN_ANNOUNCE, gen, 0); }

static cddp_result_t announce(cddp_store_t *s, int64_t gen, const cddp__job_announce_t *ann) {
  char text[480];
  size_t len = cddp__job_announce_format(ann, text, sizeof text);
  return cddp_store_set(s, announce_key(gen).s, text, len);
}

/* The longest member record: its lines (under 128 bytes each) and the wait line. Each agent
 * reads the record of every generation it sees, N copies of N lines at the store: it travels
 * deflated when long (job/jobkeys.h). */
#define MEMBERS_MAX_TEXT ((size_t)CDDP__MAX_MEMBERS * 128 + 1024)

cddp_result_t cddp__members_read(cddp_store_t *s, int64_t gen, cddp__members_t *out) {
  cddp__jobkey_t k = cddp__job_key(CDDP__JK_GEN_MEMBERS, gen, 0);
  const char *key = k.s;
  void *v = NULL;
  size_t len = 0;
  cddp_result_t r = cddp_store_get(s, key, &v, &len, 0);
  if (r == CDDP_TIMEOUT) return cddp__fail(CDDP_NOT_FOUND, "no member record %s", key);
  CDDP_CHECK(r);
  char *text = NULL;
  int bad = cddp__job_list_unpack(v, len, MEMBERS_MAX_TEXT, &text, &len) != 0;
  if (text) free(v), v = text;
  bad = bad || cddp__members_parse(v, len, out);
  free(v);
  if (bad) return cddp__fail(CDDP_REMOTE, "member record %s is malformed", key);
  return CDDP_OK;
}

cddp_result_t cddp__members_write(cddp_store_t *s, int64_t gen, const cddp__members_t *m) {
  size_t size = (size_t)m->n * 96 + 512;
  char *buf = malloc(size);
  if (!buf) return cddp__fail(CDDP_SYSTEM, "out of memory");
  size_t len = cddp__members_format(m, buf, size);
  if (len && cddp__job_list_pack(&buf, &len) != 0) {
    free(buf);
    return cddp__fail(CDDP_SYSTEM, "out of memory");
  }
  void *cur = NULL;
  size_t cl = 0;
  cddp_result_t r = len ? cddp_store_compare_set(s, KEY(GEN_MEMBERS, gen), NULL, 0, buf, len, &cur, &cl)
                        : cddp__fail(CDDP_INTERNAL, "member record of generation %lld too long", (long long)gen);
  free(cur), free(buf);
  return r;
}

cddp_result_t cddp__gen_latest(cddp_store_t *s, int64_t *gen) {
  CDDP_CHECK(cddp_store_add(s, KEY(GEN, 0), 0, gen));
  /* the announcement precedes the counter's bump: count the ones already announced */
  for (;;) {
    cddp__jobkey_t key = announce_key(*gen + 1);
    const char *k = key.s;
    cddp_result_t r = cddp_store_wait(s, &k, 1, 0);
    if (r == CDDP_TIMEOUT) break;
    CDDP_CHECK(r);
    ++*gen;
  }
  cddp__clear_error();
  return CDDP_OK;
}

#define CLAIM_WAIT_MS 10000 /* a claimer that never announces: give up after this */

cddp_result_t cddp__gen_change(cddp_store_t *s, const cddp__job_announce_t *ann, int self_id,
                               int (*edit)(const cddp__members_t *cur, cddp__members_t *next, void *ctx),
                               void *ctx, int64_t *gen) {
  cddp__members_t *cur = malloc(sizeof *cur), *next = malloc(sizeof *next);
  cddp_result_t r = CDDP_OK;
  *gen = 0;
  if (!cur || !next) {
    r = cddp__fail(CDDP_SYSTEM, "out of memory");
    goto out;
  }
  for (;;) {
    int64_t g;
    CDDP_CHECK_GOTO(cddp__gen_latest(s, &g), r, out);
    r = cddp__members_read(s, g, cur);
    int have = r == CDDP_OK;
    if (r != CDDP_OK && r != CDDP_NOT_FOUND) goto out;
    cddp__clear_error();
    r = CDDP_OK;
    if (have && cur->stop) { /* the job is stopping: no more changes */
      r = cddp__fail(CDDP_ABORTED, "%s", cur->line);
      goto out;
    }
    if (edit) {
      if (!have) {
        r = cddp__fail(CDDP_NOT_FOUND, "generation %lld has no member record to change", (long long)g);
        goto out;
      }
      if (edit(cur, next, ctx)) goto out; /* nothing to do any more */
    } else {
      *next = *cur;
    }
    char me[160];
    size_t ml = cddp__job_claim_format(self_id, ann, me, sizeof me); /* unique: it names a pid or node */
    void *won = NULL;
    size_t wl = 0;
    CDDP_CHECK_GOTO(cddp_store_compare_set(s, KEY(GEN_CLAIM, g + 1), NULL, 0, me, ml, &won, &wl), r, out);
    int mine = wl == ml && !memcmp(won, me, wl);
    free(won);
    if (!mine) { /* another agent makes generation g+1: build on it */
      r = cddp__gen_wait_past(s, g, CLAIM_WAIT_MS);
      if (r != CDDP_OK) goto out;
      continue;
    }
    if (have || edit) CDDP_CHECK_GOTO(cddp__members_write(s, g + 1, next), r, out);
    CDDP_CHECK_GOTO(announce(s, g + 1, ann), r, out);
    int64_t counter;
    CDDP_CHECK_GOTO(cddp_store_add(s, KEY(GEN, 0), 1, &counter), r, out);
    *gen = g + 1;
    break;
  }
out:
  free(cur), free(next);
  return r;
}

/* restart-all: announces generation from + 1 as ann, once whoever calls it; *mine = 1 when this
 * caller's claim made it. */
static cddp_result_t gen_after_round(cddp_store_t *s, int64_t from, int self, const cddp__job_announce_t *ann,
                                     int *mine) {
  char me[160];
  size_t ml = cddp__job_claim_format(self, ann, me, sizeof me);
  void *won = NULL;
  size_t wl = 0;
  CDDP_CHECK(cddp_store_compare_set(s, KEY(GEN_CLAIM, from + 1), NULL, 0, me, ml, &won, &wl));
  *mine = wl == ml && !memcmp(won, me, wl);
  free(won);
  if (!*mine) return CDDP_OK;
  CDDP_CHECK(announce(s, from + 1, ann));
  int64_t counter;
  return cddp_store_add(s, KEY(GEN, 0), 1, &counter);
}

cddp_result_t cddp__gen_open_restart(cddp_store_t *s, int64_t from, int self) {
  cddp__job_announce_t ann = {.kind = CDDP__GEN_RESTART};
  snprintf(ann.what, sizeof ann.what, "restart %lld", (long long)from + 1);
  int mine;
  CDDP_CHECK(gen_after_round(s, from, self, &ann, &mine));
  return mine ? CDDP_OK : cddp__gen_wait_past(s, from, CLAIM_WAIT_MS); /* another agent opens it */
}

cddp_result_t cddp__gen_close_job(cddp_store_t *s, int64_t from, int self) {
  cddp__job_announce_t ann = {.kind = CDDP__GEN_END};
  snprintf(ann.what, sizeof ann.what, "after round %lld", (long long)from);
  int mine;
  return gen_after_round(s, from, self, &ann, &mine);
}

cddp_result_t cddp__gen_gathering(cddp_store_t *s, int64_t *gen) {
  CDDP_CHECK(cddp__gen_latest(s, gen));
  for (cddp__job_announce_t a; *gen > 0; --*gen)
    if (cddp__gen_what(s, *gen, &a) && (a.kind == CDDP__GEN_RESTART || a.kind == CDDP__GEN_END)) break;
  return CDDP_OK;
}

cddp_result_t cddp__gen_restore(cddp_store_t *s, int64_t gen, const cddp__job_announce_t *ann,
                                const cddp__members_t *m) {
  int64_t now;
  CDDP_CHECK(cddp__members_write(s, gen, m));
  if (gen > 0) CDDP_CHECK(announce(s, gen, ann));
  CDDP_CHECK(cddp_store_add(s, KEY(GEN, 0), 0, &now));
  return now < gen ? cddp_store_add(s, KEY(GEN, 0), gen - now, &now) : CDDP_OK;
}

cddp_result_t cddp__gen_bump(cddp_store_t *s, const cddp__job_announce_t *ann, int64_t *gen) {
  return cddp__gen_change(s, ann, -1, NULL, NULL, gen);
}

int cddp__gen_what(cddp_store_t *s, int64_t g, cddp__job_announce_t *out) {
  void *v = NULL;
  size_t len = 0;
  memset(out, 0, sizeof *out);
  if (cddp_store_get(s, announce_key(g).s, &v, &len, 0) != CDDP_OK) {
    cddp__clear_error();
    return 0;
  }
  int ok = !cddp__job_announce_parse(v, len, out);
  free(v);
  return ok;
}

cddp_result_t cddp__job_worlds_publish(cddp_store_t *s, const int *sizes, int n) {
  char buf[1024];
  size_t len = cddp__job_worlds_format(sizes, n, buf, sizeof buf);
  return len ? cddp_store_set(s, KEY(WORLDS, 0), buf, len) : CDDP_OK;
}

cddp_result_t cddp__job_stop(cddp_store_t *s, const char *line) {
  return cddp_store_set(s, KEY(STOP, 0), line, strlen(line));
}

cddp_result_t cddp__gen_wait_past(cddp_store_t *s, int64_t gen, int timeout_ms) {
  cddp__jobkey_t key = announce_key(gen + 1);
  const char *k = key.s;
  cddp_result_t r = cddp_store_wait(s, &k, 1, timeout_ms);
  if (r == CDDP_TIMEOUT)
    return cddp__fail(CDDP_TIMEOUT, "no generation after %lld was announced within %.1f s (%s absent)", (long long)gen,
                      timeout_ms / 1e3, key.s);
  return r;
}

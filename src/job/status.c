/* status.c - the records `cddp status` reads: node records and events in the store, and the
 * endpoint file of a launcher's folder, each as a type with its text form. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/durable.h"
#include "common/io.h"
#include "job/status.h"
#include "job/jobkeys.h"


static uint64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int all_printable(const char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < ' ' || (unsigned char)*s >= 127) return 0;
  return 1;
}

/* ---- node records ---- */

size_t cddp__status_format(const cddp__status_node_t *n, char *buf, size_t size) {
  size_t used = 0;
  int k = snprintf(buf, size, "node %d %d %d %d %d %d %lld %d %d %d %llu %s %s\n", n->slot, n->node_rank, n->agent_id,
                   n->pid, n->round, n->restarts, (long long)n->gen, n->nproc, n->rank_base, n->world,
                   (unsigned long long)n->wall_ms, n->state[0] ? n->state : "-", n->host[0] ? n->host : "?");
  for (int i = 0; k > 0 && (size_t)k < size - used && i <= n->nranks; i++) {
    used += (size_t)k;
    if (i == n->nranks) return used;
    const cddp__status_rank_t *r = &n->ranks[i];
    k = snprintf(buf + used, size - used, "rank %d %d %s %d %llu %.3f %llu %d %s\nproc %.1f %llu %lld %lld %s\n", r->rank,
                 r->pid, r->state[0] ? r->state : "-", r->replaced, (unsigned long long)r->step, r->rate,
                 (unsigned long long)r->coll, r->in_coll, r->last[0] ? r->last : "-", r->cpu_pct,
                 (unsigned long long)r->rss_kb, (long long)r->out_age_ms, (long long)r->idle_ms, r->out[0] ? r->out : "-");
  }
  return 0;
}

int cddp__status_parse(const char *text, size_t len, cddp__status_node_t *out) {
  char *s = strndup(text, len), *save = NULL;
  if (!s) return -1;
  memset(out, 0, sizeof *out);
  int ok = 0;
  unsigned long long wall;
  long long gen;
  char *line = strtok_r(s, "\n", &save);
  if (line && sscanf(line, "node %d %d %d %d %d %d %lld %d %d %d %llu %11s %63s", &out->slot, &out->node_rank,
                     &out->agent_id, &out->pid, &out->round, &out->restarts, &gen, &out->nproc, &out->rank_base,
                     &out->world, &wall, out->state, out->host) == 13) {
    out->gen = gen, out->wall_ms = wall, ok = 1;
    cddp__printable(out->state), cddp__printable(out->host);
    while (ok && (line = strtok_r(NULL, "\n", &save))) {
      if (!strncmp(line, "proc ", 5)) { /* the process of the rank above (a record without them: not read) */
        cddp__status_rank_t *r = out->nranks ? &out->ranks[out->nranks - 1] : NULL;
        unsigned long long rss;
        long long age, idle;
        int off = 0;
        ok = r && sscanf(line, "proc %lf %llu %lld %lld %n", &r->cpu_pct, &rss, &age, &idle, &off) == 4 && off > 0 && line[off];
        if (ok) r->rss_kb = rss, r->out_age_ms = age, r->idle_ms = idle, snprintf(r->out, sizeof r->out, "%.83s", line + off);
        continue;
      }
      if (out->nranks >= CDDP__STATUS_RANKS) { ok = 0; break; }
      cddp__status_rank_t *r = &out->ranks[out->nranks];
      unsigned long long step, coll;
      int off = 0;
      ok = sscanf(line, "rank %d %d %11s %d %llu %lf %llu %d %n", &r->rank, &r->pid, r->state, &r->replaced, &step,
                  &r->rate, &coll, &r->in_coll, &off) == 8 && off > 0 && line[off]; /* "-" at least */
      r->step = step, r->coll = coll, r->cpu_pct = -1, r->out_age_ms = -1;
      snprintf(r->last, sizeof r->last, "%s", line + off);
      cddp__printable(r->state), cddp__printable(r->last);
      out->nranks++;
    }
  }
  free(s);
  return ok ? 0 : -1;
}

cddp_result_t cddp__status_slot(cddp_store_t *s, int *slot) {
  int64_t n;
  CDDP_CHECK(cddp_store_add(s, cddp__job_key(CDDP__JK_STATUS_SLOTS, 0, 0).s, 1, &n));
  *slot = (int)n - 1;
  return CDDP_OK;
}

cddp_result_t cddp__status_post(cddp_store_t *s, const cddp__status_node_t *n) {
  char *buf = malloc(32768);
  if (!buf) return cddp__fail(CDDP_SYSTEM, "out of memory for a status record");
  cddp__status_node_t copy = *n;
  copy.wall_ms = wall_ms();
  size_t len = cddp__status_format(&copy, buf, 32768);
  cddp_result_t r = len ? cddp_store_set(s, cddp__job_key(CDDP__JK_STATUS_NODE, n->slot, 0).s, buf, len) : cddp__fail(CDDP_INTERNAL, "status record too long");
  free(buf);
  return r;
}

cddp_result_t cddp__status_read(cddp_store_t *s, cddp__status_node_t **out, int *n) {
  int64_t slots;
  *out = NULL, *n = 0;
  CDDP_CHECK(cddp_store_add(s, cddp__job_key(CDDP__JK_STATUS_SLOTS, 0, 0).s, 0, &slots));
  slots = CDDP_MIN(slots, CDDP__STATUS_NODES);
  cddp__status_node_t *v = calloc((size_t)CDDP_MAX(slots, 1), sizeof *v);
  if (!v) return cddp__fail(CDDP_SYSTEM, "out of memory for %lld status records", (long long)slots);
  for (int i = 0; i < slots; i++) {
    void *val = NULL;
    size_t len = 0;
    cddp_result_t r = cddp_store_get(s, cddp__job_key(CDDP__JK_STATUS_NODE, i, 0).s, &val, &len, 0);
    if (r == CDDP_OK && cddp__status_parse(val, len, &v[*n]) == 0) (*n)++;
    free(val);
    if (r != CDDP_OK && r != CDDP_NOT_FOUND && r != CDDP_TIMEOUT) { /* absent: a slot not posted yet */
      free(v);
      return r;
    }
  }
  cddp__clear_error();
  *out = v;
  return CDDP_OK;
}

/* ---- events ---- */

cddp_result_t cddp__status_event(cddp_store_t *s, const char *fmt, ...) {
  char text[300], val[340];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  int64_t i;
  CDDP_CHECK(cddp_store_add(s, cddp__job_key(CDDP__JK_STATUS_EVENTS, 0, 0).s, 1, &i));
  int len = snprintf(val, sizeof val, "%llu %s", (unsigned long long)wall_ms(), text);
  return cddp_store_set(s, cddp__job_key(CDDP__JK_STATUS_EVENT, i, 0).s, val, (size_t)CDDP_MIN(len, (int)sizeof val - 1));
}

cddp_result_t cddp__status_event_once(cddp_store_t *s, int64_t tag, const char *text) {
  char me[64];
  void *won = NULL;
  size_t len = 0;
  cddp__jobkey_t key = cddp__job_key(CDDP__JK_STATUS_ONCE, tag, 0);
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int n = snprintf(me, sizeof me, "%d %lld.%09ld", (int)getpid(), (long long)ts.tv_sec, ts.tv_nsec); /* ours alone */
  CDDP_CHECK(cddp_store_compare_set(s, key.s, NULL, 0, me, (size_t)n, &won, &len));
  int mine = won && len == (size_t)n && !memcmp(won, me, len);
  free(won);
  return mine ? cddp__status_event(s, "%s", text) : CDDP_OK;
}

cddp_result_t cddp__status_events(cddp_store_t *s, cddp__status_event_t *out, int max, int *n) {
  int64_t last;
  *n = 0;
  CDDP_CHECK(cddp_store_add(s, cddp__job_key(CDDP__JK_STATUS_EVENTS, 0, 0).s, 0, &last));
  /* last comes from the store: anyone's value. Count up to max from last - count + 1, which
   * neither overflows nor runs past last (INT64_MAX) nor writes past out[max - 1]. */
  int64_t count = last < 1 ? 0 : CDDP_MIN(last, (int64_t)max);
  for (int64_t k = 0; k < count && *n < max; k++) {
    int64_t i = last - count + 1 + k;
    void *val = NULL;
    size_t len = 0;
    if (cddp_store_get(s, cddp__job_key(CDDP__JK_STATUS_EVENT, i, 0).s, &val, &len, 0) != CDDP_OK) continue; /* being written */
    unsigned long long t;
    int off = 0;
    char *text = strndup(val, len);
    if (text && sscanf(text, "%llu %n", &t, &off) == 1 && off > 0) {
      out[*n].wall_ms = t;
      snprintf(out[*n].text, sizeof out[*n].text, "%s", text + off);
      cddp__printable(out[*n].text);
      (*n)++;
    }
    free(text);
    free(val);
  }
  cddp__clear_error();
  return CDDP_OK;
}

/* ---- the endpoint file ---- */

cddp_result_t cddp__endpoint_write(const char *dir, const cddp__endpoint_t *e) {
  char path[4200], text[1000];
  snprintf(path, sizeof path, "%s/endpoint", dir);
  int len = snprintf(text, sizeof text, "store %s:%d\nrun_id %s\ntoken %s\n", e->host, e->port, e->run_id,
                     e->token[0] ? e->token : "-");
  if (e->ended[0]) len += snprintf(text + len, sizeof text - (size_t)len, "ended %s\n", e->ended);
  return cddp__durable_save(path, 0600, text, (size_t)len); /* the token: its owner's eyes only */
}

cddp_result_t cddp__endpoint_read(const char *dir, cddp__endpoint_t *e) {
  char path[4200], text[1000];
  snprintf(path, sizeof path, "%s/endpoint", dir);
  int fd = cddp__open_regular(path);
  if (fd < 0) {
    if (errno == ENOENT)
      return cddp__fail(CDDP_NOT_FOUND, "%s has no job record (%s): not a folder of a job started by cddp run "
                        "(its --log-dir, or the trainer's run folder)", dir, path);
    if (errno == EINVAL) return cddp__fail(CDDP_INVALID_ARG, "%s is not a regular file (a job record is one)", path);
    return cddp__fail_errno(CDDP_SYSTEM, "cannot read %s", path);
  }
  ssize_t got = pread(fd, text, sizeof text - 1, 0);
  close(fd);
  size_t n = got > 0 ? (size_t)got : 0;
  text[n] = '\0';
  memset(e, 0, sizeof *e);
  char *colon, *end, store[300] = "";
  long port = 0;
  if (sscanf(text, "store %299s\nrun_id %127s\ntoken %255s", store, e->run_id, e->token) != 3 ||
      !all_printable(store) || !all_printable(e->run_id) || !all_printable(e->token) ||
      !(colon = strrchr(store, ':')) || (port = strtol(colon + 1, &end, 10)) <= 0 || port > 65535 || *end)
    return cddp__fail(CDDP_INVALID_ARG, "%s is malformed (want 'store HOST:PORT', 'run_id ID', 'token T')", path);
  *colon = '\0';
  e->port = (int)port;
  snprintf(e->host, sizeof e->host, "%.255s", store);
  if (!strcmp(e->token, "-")) e->token[0] = '\0';
  const char *ended = strstr(text, "\nended ");
  if (ended) { /* printable bytes up to the line's end, bounded by the field */
    ended += strlen("\nended ");
    size_t k = 0;
    while (k + 1 < sizeof e->ended && ended[k] >= ' ' && ended[k] < 127) k++;
    memcpy(e->ended, ended, k);
    e->ended[k] = '\0';
  }
  return CDDP_OK;
}

cddp_result_t cddp__endpoint_end(const char *dir, const char *fmt, ...) {
  cddp__endpoint_t e;
  CDDP_CHECK(cddp__endpoint_read(dir, &e));
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e.ended, sizeof e.ended, fmt, ap);
  va_end(ap);
  cddp__printable(e.ended); /* one line: an error's text may hold anything */
  return cddp__endpoint_write(dir, &e);
}

/* ---- a job's events, kept in its folder ---- */

#define EVENT_LINE_MAX 340 /* "WALL_MS " and an event's text */

cddp_result_t cddp__events_save(const char *dir, cddp_store_t *s) {
  cddp__status_event_t *ev = calloc(CDDP__EVENTS_KEPT, sizeof *ev);
  char *text = malloc((size_t)CDDP__EVENTS_KEPT * EVENT_LINE_MAX), path[4200];
  int n = 0;
  size_t len = 0;
  cddp_result_t r = ev && text ? cddp__status_events(s, ev, CDDP__EVENTS_KEPT, &n)
                               : cddp__fail(CDDP_SYSTEM, "out of memory for the job's events");
  for (int i = 0; r == CDDP_OK && i < n; i++)
    len += (size_t)snprintf(text + len, EVENT_LINE_MAX, "%llu %s\n", (unsigned long long)ev[i].wall_ms, ev[i].text);
  snprintf(path, sizeof path, "%s/events", dir);
  if (r == CDDP_OK && n > 0) r = cddp__durable_save(path, 0600, text, len);
  free(ev);
  free(text);
  return r;
}

cddp_result_t cddp__events_load(const char *dir, cddp__status_event_t *out, int max, int *n) {
  char path[4200];
  *n = 0;
  snprintf(path, sizeof path, "%s/events", dir);
  int fd = cddp__open_regular(path);
  if (fd < 0) {
    if (errno == ENOENT) return cddp__fail(CDDP_NOT_FOUND, "%s has no events file", dir);
    return cddp__fail_errno(CDDP_SYSTEM, "cannot read %s", path);
  }
  size_t cap = (size_t)CDDP__EVENTS_KEPT * EVENT_LINE_MAX;
  char *buf = malloc(cap + 1);
  ssize_t got = buf ? pread(fd, buf, cap, 0) : -1;
  close(fd);
  if (got < 0) {
    free(buf);
    return cddp__fail(CDDP_SYSTEM, "cannot read %s", path);
  }
  buf[got] = '\0';
  for (char *line = buf, *next; *line && max > 0; line = next) { /* each line once: bounded by the buffer */
    next = strchr(line, '\n');
    next = next ? (*next = '\0', next + 1) : line + strlen(line);
    unsigned long long t;
    int off = 0;
    if (sscanf(line, "%llu %n", &t, &off) != 1 || off <= 0 || !line[off]) continue; /* not one of ours */
    if (*n == max) memmove(out, out + 1, (size_t)(max - 1) * sizeof *out), (*n)--; /* the newest max */
    out[*n].wall_ms = t;
    snprintf(out[*n].text, sizeof out[*n].text, "%s", line + off);
    cddp__printable(out[*n].text);
    (*n)++;
  }
  free(buf);
  return CDDP_OK;
}

/* ---- a run folder's metrics ---- */

#define TAIL_BYTES 65536

/* The step of one metrics line ('{"step":N,...}'): 0, or -1 when it does not parse. */
static int line_step(const char *line, size_t len, uint64_t *step) {
  const char *k = memmem(line, len, "\"step\":", 7);
  if (len < 2 || line[0] != '{' || line[len - 1] != '}' || !k) return -1;
  const char *d = k + 7, *end = line + len;
  uint64_t v = 0;
  int digits = 0;
  for (; d < end && *d >= '0' && *d <= '9' && digits < 19; d++, digits++) v = v * 10 + (uint64_t)(*d - '0');
  if (!digits || d >= end || (*d != ',' && *d != '}')) return -1;
  *step = v;
  return 0;
}

cddp_result_t cddp__run_last_step(const char *dir, uint64_t *step, int *has_step, char *bad, size_t bad_size) {
  char path[4200];
  *step = 0, *has_step = 0;
  if (bad_size) bad[0] = '\0';
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  int fd = cddp__open_regular(path);
  FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
  if (!f) {
    if (fd >= 0) close(fd);
    if (errno == ENOENT) return cddp__fail(CDDP_NOT_FOUND, "%s has no metrics.jsonl", dir);
    if (errno == EINVAL) return cddp__fail(CDDP_INVALID_ARG, "%s is not a regular file", path);
    return cddp__fail_errno(CDDP_SYSTEM, "cannot read %s", path);
  }
  char *buf = malloc(TAIL_BYTES + 1);
  if (!buf) {
    fclose(f);
    return cddp__fail(CDDP_SYSTEM, "out of memory for %s", path);
  }
  long start = 0;
  if (fseek(f, 0, SEEK_END) == 0 && ftell(f) > TAIL_BYTES) start = ftell(f) - TAIL_BYTES;
  size_t n = fseek(f, start, SEEK_SET) == 0 ? fread(buf, 1, TAIL_BYTES, f) : 0;
  fclose(f);
  buf[n] = '\0';
  /* from the end back: the first line that parses; a cut first line (start > 0) is never judged */
  size_t end = n;
  while (end > 0 && !*has_step) {
    size_t b = end;
    while (b > 0 && buf[b - 1] != '\n') b--;
    if (b == 0 && start > 0) break;
    size_t len = end - b;
    if (len && buf[end - 1] == '\n') len--;
    if (len && line_step(buf + b, len, step) == 0) *has_step = 1;
    else if (len && bad_size && !bad[0]) { /* its printable start, to name it */
      size_t k = 0;
      for (; k + 1 < bad_size && k < len && k < 60; k++) bad[k] = buf[b + k] >= ' ' && buf[b + k] < 127 ? buf[b + k] : '?';
      bad[k] = '\0';
    }
    end = b > 0 ? b - 1 : 0;
    if (b == 0) break;
  }
  free(buf);
  return CDDP_OK;
}

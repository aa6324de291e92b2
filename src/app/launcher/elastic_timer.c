/* elastic_timer.c - serves torch.distributed.elastic.timer's FileTimerClient as torchrun's
 * FileTimerServer does (torch/distributed/elastic/timer/file_based_local_timer.py): requests
 * {"version": 1, "pid": P, "scope_id": S, "expiration_time": T, "signal": N} a line, T < 0 a
 * release. The pipe is hostile: lines are bounded, the JSON is checked key by key, and the
 * agent (workers.c) kills only a pid that is one of its own workers. */
#include "launcher/elastic_timer.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/check.h"
#include "common/log.h"

struct cddp__etimer {
  int fd, keep_fd;          /* read end; a write end of our own, so the pipe never reads EOF */
  char path[4200];
  char buf[CDDP__ETIMER_LINE_MAX + 1];
  size_t len;
  int skipping;             /* inside a line that outgrew buf: dropped up to its newline */
  int full_said;
  int n;
  cddp__etimer_req_t t[CDDP__ETIMER_MAX];
};

/* ---- one request line ---- */

static const char *ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
  return p;
}

/* A JSON string at p into out (printable ASCII, others as '?'); the byte after it, or NULL. */
static const char *jstring(const char *p, const char *end, char *out, size_t size) {
  size_t n = 0;
  if (p >= end || *p != '"') return NULL;
  for (p++; p < end && *p != '"'; p++) {
    unsigned char c = (unsigned char)*p;
    if (c < 0x20) return NULL;
    if (c == '\\') {
      if (++p >= end) return NULL;
      if (*p == 'u') {
        for (int k = 1; k <= 4; k++)
          if (p + k >= end || !strchr("0123456789abcdefABCDEF", p[k]) || !p[k]) return NULL;
        p += 4;
        c = '?';
      } else if (strchr("\"\\/", *p) && *p) c = (unsigned char)*p;
      else if (strchr("bfnrt", *p) && *p) c = ' ';
      else return NULL;
    }
    if (n + 1 < size) out[n++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
  }
  if (size) out[n < size ? n : size - 1] = '\0';
  return p < end ? p + 1 : NULL;
}

/* A JSON number at p; the byte after it, or NULL. */
static const char *jnumber(const char *p, const char *end, double *out) {
  char tmp[64];
  size_t n = 0;
  while (p + n < end && n < sizeof tmp - 1 && strchr("+-.0123456789eE", p[n]) && p[n]) n++;
  if (n == 0 || n == sizeof tmp - 1) return NULL;
  memcpy(tmp, p, n);
  tmp[n] = '\0';
  char *stop;
  errno = 0;
  *out = strtod(tmp, &stop);
  if (stop != tmp + n || errno || !isfinite(*out)) return NULL;
  return p + n;
}

int cddp__etimer_parse(const char *line, size_t len, cddp__etimer_req_t *out, char *err, size_t errlen) {
  const char *p = line, *end = line + len;
  int seen = 0; /* bits: pid, scope_id, expiration_time, signal */
  memset(out, 0, sizeof *out);
  p = ws(p, end);
  if (p >= end || *p++ != '{') return snprintf(err, errlen, "not a JSON object"), -1;
  for (int keys = 0;; keys++) {
    char key[32], text[2];
    double x = 0;
    p = ws(p, end);
    if (keys > 16 || !(p = jstring(p, end, key, sizeof key))) return snprintf(err, errlen, "a bad key"), -1;
    p = ws(p, end);
    if (p >= end || *p++ != ':') return snprintf(err, errlen, "no ':' after \"%s\"", key), -1;
    p = ws(p, end);
    const char *v = p;
    if (!strcmp(key, "scope_id")) p = jstring(p, end, out->scope, sizeof out->scope), seen |= 2;
    else if (p < end && *p == '"') p = jstring(p, end, text, sizeof text); /* a field we do not use */
    else p = jnumber(p, end, &x);
    if (!p) return snprintf(err, errlen, "a bad value for \"%s\"", key), -1;
    if (!strcmp(key, "pid") && *v != '"') {
      if (x < 1 || x > 4194304 || x != floor(x)) return snprintf(err, errlen, "pid %g is not a process id", x), -1;
      out->pid = (long long)x, seen |= 1;
    } else if (!strcmp(key, "expiration_time") && *v != '"') out->expiration_time = x, seen |= 4;
    else if (!strcmp(key, "signal") && *v != '"') {
      if (x < -1e9 || x > 64 || x != floor(x)) return snprintf(err, errlen, "signal %g is not a signal", x), -1;
      out->signal = (int)x, seen |= 8;
    }
    p = ws(p, end);
    if (p < end && *p == ',') { p++; continue; }
    if (p < end && *p == '}') { p++; break; }
    return snprintf(err, errlen, "no ',' or '}' after \"%s\"", key), -1;
  }
  if (ws(p, end) != end) return snprintf(err, errlen, "bytes after the object"), -1;
  if (seen != 15) return snprintf(err, errlen, "lacks %s", !(seen & 1) ? "pid" : !(seen & 2) ? "scope_id" : !(seen & 4) ? "expiration_time" : "signal"), -1;
  return 0;
}

/* ---- the table of timers ---- */

static void put(cddp__etimer_t *t, const cddp__etimer_req_t *r) {
  for (int i = 0; i < t->n; i++)
    if (t->t[i].pid == r->pid && !strcmp(t->t[i].scope, r->scope)) {
      if (r->expiration_time < 0) t->t[i] = t->t[--t->n]; /* a release */
      else t->t[i] = *r;
      return;
    }
  if (r->expiration_time < 0) return;
  if (t->n == CDDP__ETIMER_MAX) {
    if (!t->full_said++) CDDP_WARN("elastic timer: %d timers held already; timer '%s' of pid %lld dropped", t->n, r->scope, r->pid);
    return;
  }
  t->t[t->n++] = *r;
}

static void take_line(cddp__etimer_t *t, const char *line, size_t len) {
  cddp__etimer_req_t r;
  char err[128];
  if (len == 0) return;
  if (cddp__etimer_parse(line, len, &r, err, sizeof err) == 0) put(t, &r);
  else CDDP_WARN("elastic timer: a request in %s dropped: %s", t->path, err);
}

void cddp__etimer_read(cddp__etimer_t *t) {
  for (int rounds = 0; t && rounds < 64; rounds++) { /* bounded: a flood waits for the next poll */
    ssize_t r = read(t->fd, t->buf + t->len, CDDP__ETIMER_LINE_MAX - t->len);
    if (r <= 0) return;
    t->len += (size_t)r;
    size_t start = 0;
    for (size_t i = 0; i < t->len; i++) {
      if (t->buf[i] != '\n') continue;
      if (!t->skipping) take_line(t, t->buf + start, i - start);
      t->skipping = 0;
      start = i + 1;
    }
    memmove(t->buf, t->buf + start, t->len - start);
    t->len -= start;
    if (t->len == CDDP__ETIMER_LINE_MAX) { /* a line longer than any request: drop it */
      if (!t->skipping) CDDP_WARN("elastic timer: a line over %d bytes in %s dropped", CDDP__ETIMER_LINE_MAX, t->path);
      t->skipping = 1;
      t->len = 0;
    }
  }
}

double cddp__etimer_next(const cddp__etimer_t *t) {
  double next = 0;
  for (int i = 0; t && i < t->n; i++)
    if (next == 0 || t->t[i].expiration_time < next) next = t->t[i].expiration_time;
  return next;
}

void cddp__etimer_forget(cddp__etimer_t *t, pid_t pid) {
  for (int i = 0; t && i < t->n;)
    if (t->t[i].pid == pid) t->t[i] = t->t[--t->n];
    else i++;
}

int cddp__etimer_expired(cddp__etimer_t *t, double now, cddp__etimer_req_t *out) {
  int best = -1;
  for (int i = 0; t && i < t->n; i++)
    if (t->t[i].expiration_time <= now && (best < 0 || t->t[i].expiration_time < t->t[best].expiration_time)) best = i;
  if (best < 0) return 0;
  *out = t->t[best];
  cddp__etimer_forget(t, (pid_t)out->pid);
  return 1;
}

/* ---- the pipe ---- */

/* A pipe left at path by an earlier run of ours is made afresh (torch's server does the same);
 * anything else there is the user's and is never removed. */
static int make_fifo(const char *path) {
  if (mkfifo(path, 0600) == 0) return 0;
  struct stat st;
  if (errno != EEXIST || lstat(path, &st) != 0) return cddp__fail_errno(CDDP_SYSTEM, "cannot make the elastic timer's pipe %s", path), -1;
  if (!S_ISFIFO(st.st_mode) || st.st_uid != geteuid())
    return cddp__fail(CDDP_INVALID_USAGE, "%s exists and is no pipe of this user's: remove it or choose another path", path), -1;
  if (unlink(path) != 0 || mkfifo(path, 0600) != 0)
    return cddp__fail_errno(CDDP_SYSTEM, "cannot make the elastic timer's pipe %s afresh", path), -1;
  return 0;
}

cddp__etimer_t *cddp__etimer_open(const char *path) {
  cddp__etimer_t *t = calloc(1, sizeof *t);
  if (!t) return cddp__fail(CDDP_SYSTEM, "out of memory"), NULL;
  t->fd = t->keep_fd = -1;
  if (strlen(path) >= sizeof t->path) {
    cddp__fail(CDDP_INVALID_USAGE, "the elastic timer's pipe path is over %zu bytes", sizeof t->path - 1);
    free(t);
    return NULL;
  }
  snprintf(t->path, sizeof t->path, "%s", path);
  if (make_fifo(t->path) != 0) {
    free(t);
    return NULL;
  }
  t->fd = open(t->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  if (t->fd >= 0) t->keep_fd = open(t->path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  if (t->fd < 0 || t->keep_fd < 0) {
    cddp__fail_errno(CDDP_SYSTEM, "cannot open the elastic timer's pipe %s", t->path);
    cddp__etimer_close(t);
    return NULL;
  }
  return t;
}

void cddp__etimer_close(cddp__etimer_t *t) {
  if (!t) return;
  if (t->fd >= 0) close(t->fd);
  if (t->keep_fd >= 0) close(t->keep_fd);
  unlink(t->path);
  free(t);
}

int cddp__etimer_fd(const cddp__etimer_t *t) { return t ? t->fd : -1; }

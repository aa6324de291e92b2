/* metrics.c - progress line, JSONL records and rates of a training run. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/durable.h"
#include "common/io.h"
#include "common/clock.h"
#include "trainer/metrics.h"
#include "trainer/ranks.h"

static double now_s(void) { return (double)cddp__now_ns() * 1e-9; }

/* Wall clock (Unix seconds): lets a log line be put next to outside events (a kill). */
static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

cddp_result_t cddp__metrics_open(cddp_metrics_t *m, const char *jsonl_path, int append, int every) {
  memset(m, 0, sizeof *m);
  m->every = every > 0 ? every : 50;
  /* a terminal, ours or (CDDP_CONSOLE_LIVE) the one cddp run forwards our stderr to */
  const char *live = getenv("CDDP_CONSOLE_LIVE");
  m->live = isatty(STDERR_FILENO) || (live && !strcmp(live, "1"));
  m->first_step = -1;
  m->logged = -1;
  if (!jsonl_path) return CDDP_OK;
  m->jsonl = fopen(jsonl_path, append ? "a" : "w");
  snprintf(m->path, sizeof m->path, "%s", jsonl_path);
  if (!m->jsonl) return cddp__fail_errno(CDDP_SYSTEM, "cannot open metrics file %s", jsonl_path);
  return CDDP_OK;
}

cddp_result_t cddp__metrics_reopen(cddp_metrics_t *m, const char *jsonl_path) {
  if (m->jsonl) fclose(m->jsonl);
  m->jsonl = fopen(jsonl_path, "a");
  snprintf(m->path, sizeof m->path, "%s", jsonl_path);
  if (!m->jsonl) return cddp__fail_errno(CDDP_SYSTEM, "cannot open metrics file %s", jsonl_path);
  return CDDP_OK;
}

/* A whole step or eval line as write_step/metrics_eval write it: {...} with "step":<digits>.
 * The step, or -1 when the line does not parse. */
static long long line_step(const char *line, size_t n) {
  if (n < 3 || line[0] != '{' || line[n - 2] != '}' || memchr(line, '\0', n)) return -1;
  const char *k = strstr(line, "\"step\":");
  if (!k || k[7] < '0' || k[7] > '9') return -1;
  errno = 0;
  char *end;
  long long v = strtoll(k + 7, &end, 10);
  /* past int64, or digits that go on as a float (1e08, 3.5): not a step line, as the plot and the
   * resume's reader (cddp__metrics_num, strtod) would read another number there */
  return errno || (*end != ',' && *end != '}') ? -1 : v;
}

cddp_result_t cddp__metrics_trim(const char *path, int64_t step, int64_t need, int64_t *last) {
  char *line = NULL; /* whole lines, however long (a line with every rank's timings grows with the world) */
  size_t cap = 0;
  ssize_t n;
  int64_t high = -1, prev = -1;
  long long no = 0;
  if (last) *last = -1;
  int fd = cddp__open_regular(path); /* a FIFO there must not hang the resume */
  FILE *in = fd >= 0 ? fdopen(fd, "r") : NULL;
  if (!in) {
    if (fd >= 0) close(fd);
    if (errno == ENOENT) return CDDP_OK;
    if (errno == EINVAL) return cddp__fail(CDDP_INVALID_ARG, "%s is not a regular file: remove it", path);
    return cddp__fail_errno(CDDP_SYSTEM, "cannot read %s", path);
  }
  cddp__durable_t out;
  cddp_result_t r = cddp__durable_open(&out, path, 0666);
  if (r != CDDP_OK) r = cddp__fail_ctx(r, "cannot rewrite metrics");
  while (r == CDDP_OK && (n = getline(&line, &cap, in)) > 0) {
    no++;
    if (line[n - 1] != '\n') break; /* a torn last line (a write cut by a full disk or a kill): dropped */
    long long s = line_step(line, (size_t)n);
    int eval = strstr(line, "\"eval\"") != NULL;
    if (s < 0 && prev < step) {
      r = cddp__fail(CDDP_INVALID_ARG, "%s line %lld does not parse (not a step or eval line), before step %lld: "
                     "repair or remove the file", path, no, (long long)step);
    } else if (s >= 0 && !eval && prev >= 0 && s <= step && s - 1 != prev) { /* s - 1: no overflow at INT64_MAX */
      r = cddp__fail(CDDP_INVALID_ARG, "%s line %lld: step %lld follows step %lld (steps missing before step %lld): "
                     "repair or remove the file", path, no, s, (long long)prev, (long long)step);
    } else {
      if (s >= 0 && !eval && s > high) high = s;
      if (s >= 0 && !eval) prev = s;
      if (s >= 0 && s <= step && (r = cddp__durable_write(&out, line, (size_t)n)) != CDDP_OK)
        r = cddp__fail_ctx(r, "cannot rewrite metrics");
    }
  }
  free(line);
  fclose(in);
  if (r == CDDP_OK && high >= 0 && high < need)
    r = cddp__fail(CDDP_INVALID_ARG, "%s ends at step %lld, behind step %lld it resumes from (steps missing): "
                   "repair or remove the file", path, (long long)high, (long long)need);
  if (r != CDDP_OK) { /* refused or not written: the file stays as it was */
    cddp__durable_abort(&out);
    return r;
  }
  if ((r = cddp__durable_commit(&out)) != CDDP_OK) return cddp__fail_ctx(r, "cannot rewrite metrics");
  if (last) *last = high;
  return CDDP_OK;
}

static void fmt_eta(double s, char *buf, size_t cap) {
  long t = s > 0 && s < 1e7 ? (long)(s + 0.5) : 0;
  if (t >= 3600) snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

/* A line goes out whole or the run stops: a full disk must not leave a log cut short unseen.
 * ferror also catches what an fprintf lost before the flush. */
static cddp_result_t flushed(FILE *f, const char *path) {
  if (fflush(f) == 0 && !ferror(f)) return CDDP_OK;
  if (!errno) errno = EIO; /* the stream's error, its errno since overwritten */
  return cddp__fail_errno(CDDP_SYSTEM, "cannot write %s", path);
}

/* Every rank's timings at a gather step: the slowest, the spread, each rank, the straggler. */
static void write_ranks(FILE *f, const cddp__ranks_t *rk) {
  fprintf(f, ",\"slowest_rank\":%d,\"rank_spread\":%.3f,\"straggler\":%d,\"ranks\":[", rk->slowest, rk->spread,
          rk->straggler);
  for (int i = 0; i < rk->world; i++)
    fprintf(f, "%s{\"rank\":%d,\"compute_ms\":%.3f,\"data_ms\":%.3f,\"optim_ms\":%.3f,\"comm_ms\":%.3f,\"peak_rss_mb\":%.1f}",
            i ? "," : "", i, rk->all[i].compute_ms, rk->all[i].data_ms, rk->all[i].optim_ms, rk->all[i].comm_ms,
            rk->all[i].peak_rss_mb);
  fputc(']', f);
}

/* One step's line of metrics.jsonl. */
static cddp_result_t write_step(FILE *f, const char *path, const cddp_step_record_t *r) {
  errno = 0;
  double rate = r->step_s > 0 ? r->samples / r->step_s : 0;
  fprintf(f,
          "{\"step\":%lld,\"epoch\":%llu,\"loss\":%.7g,\"lr\":%.7g,\"grad_norm\":%.7g,"
          "\"samples\":%d,\"samples_per_s\":%.1f,\"tokens_per_s\":%.1f,\"step_ms\":%.3f,\"compute_ms\":%.3f,"
          "\"comm_ms\":%.3f,\"data_ms\":%.3f,\"bytes_sent\":%llu,\"compression\":%.2f,\"time\":%.3f",
          (long long)r->step, (unsigned long long)r->epoch + 1, r->loss, r->lr, r->grad_norm,
          r->samples, rate, rate * (r->units > 0 ? r->units : 1), r->step_s * 1e3, r->compute_s * 1e3, r->comm_s * 1e3,
          r->data_s * 1e3, (unsigned long long)r->bytes_sent, r->compression, wall_s());
  if (r->loss_scale > 0) fprintf(f, ",\"loss_scale\":%.9g,\"skipped\":%s", r->loss_scale, r->skipped ? "true" : "false");
  if (r->ranks) write_ranks(f, r->ranks);
  fputs("}\n", f);
  /* fflush, not fsync: a crash may lose the last lines, never the checkpoints */
  return flushed(f, path);
}

cddp_result_t cddp__metrics_take_over(cddp_metrics_t *m, const char *jsonl_path, int64_t step, int64_t *logged) {
  int64_t had = -1;
  CDDP_CHECK(cddp__metrics_trim(jsonl_path, step, -1, &had));
  CDDP_CHECK(cddp__metrics_reopen(m, jsonl_path));
  if (had < step && m->have_last && m->last.step == step) CDDP_CHECK(write_step(m->jsonl, m->path, &m->last));
  m->logged = had < step && !(m->have_last && m->last.step == step) ? had : step;
  if (logged) *logged = had;
  return CDDP_OK;
}

cddp_result_t cddp__metrics_step(cddp_metrics_t *m, const cddp_step_record_t *r) {
  double t = now_s();
  if (m->first_step < 0) m->first_step = r->step - 1, m->started_s = t - r->step_s;
  m->steps++;
  m->samples += r->samples;
  m->comm_s += r->comm_s;
  m->step_s += r->step_s;
  m->last = *r, m->last.ranks = NULL, m->have_last = 1;
  if (m->jsonl) {
    CDDP_CHECK(write_step(m->jsonl, m->path, r));
    m->logged = r->step;
    double avg = cddp__metrics_rate(m);
    double per_step = (t - m->started_s) / (double)(r->step - m->first_step);
    char eta[32];
    fmt_eta(per_step * (double)(r->total - r->step), eta, sizeof eta);
    int show = m->live || r->step % m->every == 0 || r->step == r->total;
    if (show) {
      int tokens = r->units > 1;
      fprintf(stderr, "%sepoch %llu/%d  step %lld/%lld  loss %.4f  lr %.4g  %.0f %s/s  ETA %s%s",
              m->live ? "\r" : "", (unsigned long long)r->epoch + 1, r->epochs, (long long)r->step,
              (long long)r->total, r->loss, r->lr, tokens ? avg * r->units : avg, tokens ? "tokens" : "samples",
              eta, m->live ? "\033[K" : "\n");
      m->pending_newline = m->live;
    }
    const cddp__ranks_t *rk = r->ranks;
    if (rk && rk->fresh && rk->straggler >= 0) { /* named once, when it becomes one */
      const cddp__rank_times_t *s = &rk->all[rk->straggler];
      cddp__metrics_break_line(m);
      double wait = 0; /* what the others lose to it: their exposed communication, on average */
      for (int i = 0; i < rk->world; i++) wait += i == rk->straggler ? 0 : rk->all[i].comm_ms / (rk->world - 1);
      fprintf(stderr, "straggler: rank %d's own work is %.0f%% above the other ranks' median for %d windows of %d steps "
              "(compute %.2f + data %.2f + optimizer %.2f ms a step); the others wait %.2f ms a step for it\n",
              rk->straggler, rk->straggler_pct, rk->windows, rk->every, s->compute_ms, s->data_ms, s->optim_ms, wait);
    }
  }
  return CDDP_OK;
}

cddp_result_t cddp__metrics_eval(cddp_metrics_t *m, uint64_t epoch, int epoch_end, int64_t step, double accuracy,
                                double loss, int samples) {
  if (!m->jsonl) return CDDP_OK;
  errno = 0;
  fprintf(m->jsonl, "{\"eval\":true,\"epoch\":%llu,\"step\":%lld,\"accuracy\":%.6f,\"loss\":%.7g,\"samples\":%d}\n",
          (unsigned long long)epoch + 1, (long long)step, accuracy, loss, samples);
  CDDP_CHECK(flushed(m->jsonl, m->path));
  cddp__metrics_break_line(m);
  char when[96];
  if (epoch_end) snprintf(when, sizeof when, "epoch %llu (step %lld)", (unsigned long long)epoch + 1, (long long)step);
  else snprintf(when, sizeof when, "step %lld (in epoch %llu)", (long long)step, (unsigned long long)epoch + 1);
  fprintf(stderr, "eval after %s: test accuracy %.4f  loss %.4f  (%d samples)\n", when, accuracy, loss, samples);
  return CDDP_OK;
}

double cddp__metrics_rate(const cddp_metrics_t *m) {
  return m->step_s > 0 ? (double)m->samples / m->step_s : 0;
}

double cddp__metrics_comm_fraction(const cddp_metrics_t *m) {
  return m->step_s > 0 ? m->comm_s / m->step_s : 0;
}

void cddp__metrics_break_line(cddp_metrics_t *m) {
  if (m->pending_newline) fputc('\n', stderr);
  m->pending_newline = 0;
}

void cddp__metrics_close(cddp_metrics_t *m) {
  cddp__metrics_break_line(m);
  if (m->jsonl) fclose(m->jsonl);
  m->jsonl = NULL;
}

int cddp__metrics_num(const char *line, const char *key, double *out) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(line, pat);
  if (!p) return 0;
  char *end;
  *out = strtod(p + strlen(pat), &end);
  return end != p + strlen(pat);
}

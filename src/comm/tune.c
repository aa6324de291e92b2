/* tune.c - the collective tuner's engine: measures a transport's mechanisms per size class on
 * every rank alike, takes every decision on figures agreed across the ranks (docs/tuner.md). */
#include "comm/tune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"

#define TUNE_TRIALS 3     /* interleaved trials per candidate; the best one counts */
#define TUNE_MARGIN 0.05  /* the default is left only for a candidate this much faster */
#define TUNE_SAFETY 2.0   /* a class's predicted first trial is scaled up by this (caches end) */

int cddp__tune_ncand(unsigned m) { return __builtin_popcount(m); }

int cddp__tune_knob_set(int knob) {
  const char *v = getenv(cddp__knob_var((cddp_knob_t)knob));
  return v && *v;
}

void cddp__tune_reset(cddp__tune_t *t, const cddp__tune_ops_t *ops, void *ctx, int world,
                      const uint64_t classes[CDDP_TUNE_ROWS][3]) {
  t->state = CDDP_TUNE_OFF;
  t->force = 0;
  t->world = world;
  for (int i = 0; i < CDDP_TUNE_ROWS; i++)
    t->row[i] = (cddp__tune_row_t){.max_bytes = classes[i][0], .probe_bytes = classes[i][1],
                                   .iters = (int)classes[i][2],
                                   .mech = ops->default_mech(ctx, classes[i][1])};
}

void cddp__tune_arm(cddp__tune_t *t, const cddp__tune_ops_t *ops, void *ctx) {
  t->state = CDDP_TUNE_OFF;
  for (int i = 0; i < CDDP_TUNE_ROWS; i++)
    if (cddp__tune_ncand(ops->candidates(ctx, i)) > 1) t->state = CDDP_TUNE_PENDING;
}

int cddp__tune_pick(const cddp__tune_t *t, int (*default_mech)(void *ctx, uint64_t bytes), void *ctx,
                    size_t bytes, size_t direct_max, int forced_direct, int cap) {
  if (t->force) return t->force - 1;
  if (t->state != CDDP_TUNE_DONE) return default_mech(ctx, bytes);
  if (forced_direct && bytes <= direct_max) return 0;
  int i = 0;
  while (i < CDDP_TUNE_ROWS - 1 && bytes > t->row[i].max_bytes) i++;
  int m = t->row[i].mech;
  if (m == 0 && cap && bytes > direct_max) m = default_mech(ctx, bytes);
  return m;
}

/* iters allreduces of bytes (f32 sum, in place) by the mechanism in t->force; *us per call. */
static cddp_result_t timed(const cddp__tune_ops_t *ops, void *ctx, void *buf, uint64_t bytes,
                           int iters, uint64_t deadline, double *us) {
  cddp__coll_t c = {.kind = CDDP__ALLREDUCE, .send = buf, .recv = buf, .count = bytes / 4,
                    .dt = CDDP_F32, .op = CDDP_SUM, .algo = CDDP_ALGO_AUTO, .deadline = deadline};
  cddp_result_t r = CDDP_OK;
  uint64_t t0 = cddp__now_ns();
  for (int k = 0; k < iters && r == CDDP_OK; k++) r = ops->run(ctx, &c);
  *us = (double)(cddp__now_ns() - t0) / 1e3 / iters;
  return r;
}

/* v[0..n) = the maximum over ranks, the same bits on every rank (the latency path). */
static cddp_result_t agree_max(const cddp__tune_ops_t *ops, void *ctx, double *v, size_t n,
                               uint64_t deadline) {
  cddp__coll_t c = {.kind = CDDP__ALLREDUCE, .send = v, .recv = v, .count = n, .dt = CDDP_F64,
                    .op = CDDP_MAX, .algo = CDDP_ALGO_DIRECT, .deadline = deadline};
  return ops->run(ctx, &c);
}

cddp_result_t cddp__tune_agree_max(const cddp__tune_ops_t *ops, void *ctx, double *v, size_t n,
                                   uint64_t deadline) {
  return agree_max(ops, ctx, v, n, deadline);
}

static const char *size_str(uint64_t b, char *buf, size_t size) {
  if (b >= (1u << 20)) snprintf(buf, size, "%llu MiB", (unsigned long long)(b >> 20));
  else snprintf(buf, size, "%llu KiB", (unsigned long long)(b >> 10));
  return buf;
}

static void log_table(const cddp__tune_t *t, const cddp__tune_ops_t *ops, void *ctx) {
  if (!cddp__log_enabled(CDDP_LOG_INFO, ops->sub)) return;
  char forced[160] = "", *f = forced;
  for (int b = 0; b < ops->nset; b++)
    if ((t->set & (1u << b)) && ops->set_names[b])
      f += snprintf(f, (size_t)(forced + sizeof forced - f), "%s%s", f == forced ? "; " : ", ", ops->set_names[b]);
  CDDP_INFO(ops->sub,
            "%s tune: allreduce of ordinary buffers, %d ranks, calibrated in %.1f ms (budget %u ms; "
            "per class the best of up to %d interleaved trials, slowest rank's time)%s%s",
            ops->name, t->world, t->took_ms, t->budget_ms, TUNE_TRIALS, forced, f == forced ? "" : " forced");
  double busf = 2.0 * (t->world - 1) / t->world;
  for (int i = 0; i < CDDP_TUNE_ROWS; i++) {
    const cddp__tune_row_t *r = &t->row[i];
    char cls[64], lo[24], hi[24], fig[192] = "", *p = fig;
    if (i == 0) snprintf(cls, sizeof cls, "<= %s", size_str(r->max_bytes, hi, sizeof hi));
    else if (i == CDDP_TUNE_ROWS - 1) snprintf(cls, sizeof cls, "> %s", size_str(t->row[i - 1].max_bytes, lo, sizeof lo));
    else snprintf(cls, sizeof cls, "%s-%s", size_str(t->row[i - 1].max_bytes, lo, sizeof lo), size_str(r->max_bytes, hi, sizeof hi));
    for (int m = 0; m < CDDP_TUNE_NMECH; m++)
      if (r->us[m] > 0)
        p += snprintf(p, (size_t)(fig + sizeof fig - p), "%s%s %.1f us %.2f GB/s", p == fig ? "" : ", ",
                      ops->mech_names[m], r->us[m], busf * (double)r->probe_bytes / (r->us[m] * 1e3));
    CDDP_INFO(ops->sub, "%s tune:   %-15s -> %-6s (%s%s%s)", ops->name, cls, ops->mech_names[r->mech],
              r->trials ? "at " : "", r->trials ? size_str(r->probe_bytes, lo, sizeof lo) : "",
              r->trials ? "" : (cddp__tune_ncand(ops->candidates(ctx, i)) > 1 ? "not measured: budget spent"
                                                                            : "the only choice left by the knobs"));
    if (r->trials)
      CDDP_INFO(ops->sub, "%s tune:                      %s; %d trial%s, %.1f ms", ops->name, fig, r->trials,
                r->trials > 1 ? "s" : "", r->ms);
  }
}

/* The time since t0_ms, the largest over ranks: what every budget decision is made on. */
static cddp_result_t agreed_elapsed(const cddp__tune_ops_t *ops, void *ctx, double t0_ms,
                                    uint64_t deadline, double *ms) {
  *ms = (double)cddp__now_ns() / 1e6 - t0_ms;
  return agree_max(ops, ctx, ms, 1, deadline);
}

/* Measures class i: interleaved trials of every candidate, as many as the budget allows. The
 * agreed clock is read after every candidate, so every rank stops at the same one: once past
 * the budget nothing more starts, and a first trial left incomplete leaves the class unmeasured
 * (trials 0). Fills its row from the agreed figures; *elapsed_ms is the agreed time at the end. */
static cddp_result_t measure(cddp__tune_t *t, const cddp__tune_ops_t *ops, void *ctx, int i,
                             unsigned cand, double t0_ms, uint64_t deadline, double *elapsed_ms) {
  cddp__tune_row_t *r = &t->row[i];
  double best[CDDP_TUNE_NMECH] = {0}, start = *elapsed_ms, before = start, now = start;
  int tr = 0, over = 0;
  while (tr < TUNE_TRIALS && !over) {
    for (int j = 0; j < CDDP_TUNE_NMECH && !over; j++) {
      int m = (tr + j) % CDDP_TUNE_NMECH; /* rotate the order: no candidate always goes first */
      if (!(cand & (1u << m))) continue;
      double us;
      t->force = 1 + m;
      cddp_result_t ret = tr ? CDDP_OK : timed(ops, ctx, t->buf, r->probe_bytes, 1, deadline, &us); /* warm-up */
      if (ret == CDDP_OK) ret = timed(ops, ctx, t->buf, r->probe_bytes, r->iters, deadline, &us);
      t->force = 0;
      CDDP_CHECK(ret);
      if (best[m] == 0 || us < best[m]) best[m] = us;
      CDDP_CHECK(agreed_elapsed(ops, ctx, t0_ms, deadline, &now));
      over = now > (double)t->budget_ms;
    }
    if (over) break;
    tr++;
    if (now + (now - before) > (double)t->budget_ms) break; /* one more trial would overrun */
    before = now;
  }
  *elapsed_ms = now;
  r->start_ms = start;
  r->ms = now - start;
  if (tr == 0) return CDDP_OK; /* not every candidate ran once: not measured */
  CDDP_CHECK(agree_max(ops, ctx, best, CDDP_TUNE_NMECH, deadline));
  memcpy(r->us, best, sizeof r->us);
  r->trials = tr;
  /* the default stays unless another candidate is clearly faster (noise must not flip it) */
  int inc = ops->default_mech(ctx, r->probe_bytes), win = inc;
  if (!(cand & (1u << inc))) win = inc = __builtin_ctz(cand);
  for (int m = 0; m < CDDP_TUNE_NMECH; m++)
    if ((cand & (1u << m)) && best[m] < best[win]) win = m;
  r->mech = best[win] < best[inc] * (1.0 - TUNE_MARGIN) ? win : inc;
  return CDDP_OK;
}

/* Maps this rank's calibration buffer for bytes (private anonymous memory, what malloc gives
 * for a large buffer; zeros, so sums stay zero), then agrees whether every rank could and
 * the time. */
static cddp_result_t map_buf(cddp__tune_t *t, const cddp__tune_ops_t *ops, void *ctx, size_t bytes,
                             double t0_ms, uint64_t deadline, double *elapsed_ms, int *failed) {
  if (t->buf) munmap(t->buf, t->buf_bytes);
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  t->buf = p == MAP_FAILED ? NULL : p;
  t->buf_bytes = t->buf ? bytes : 0;
  double v[2] = {t->buf ? 0 : 1, (double)cddp__now_ns() / 1e6 - t0_ms};
  CDDP_CHECK(agree_max(ops, ctx, v, 2, deadline));
  *failed = v[0] != 0;
  *elapsed_ms = v[1];
  if (*failed) CDDP_WARN("%s tune: a rank could not map %zu bytes to calibrate; stopped there", ops->name, bytes);
  return CDDP_OK;
}

/* The measured class whose probe size is nearest to class i's (in ratio), or -1. */
static int nearest(const cddp__tune_t *t, int i) {
  int best = -1;
  double bd = 0;
  for (int j = 0; j < CDDP_TUNE_ROWS; j++) {
    if (!t->row[j].trials) continue;
    double d = (double)t->row[i].probe_bytes / (double)t->row[j].probe_bytes;
    if (d < 1) d = 1 / d;
    if (best < 0 || d < bd) best = j, bd = d;
  }
  return best;
}

/* Predicted ms of class i's first trial (its warm-up included), from the agreed best times of
 * the nearest measured class scaled by bytes; plus mapping its buffer if it must grow. */
static double predict_ms(const cddp__tune_t *t, int i, unsigned cand, double map_ms_per_byte) {
  int j = nearest(t, i);
  if (j < 0) return 0;
  const cddp__tune_row_t *r = &t->row[i], *q = &t->row[j];
  double slowest = 0, sum = 0;
  for (int m = 0; m < CDDP_TUNE_NMECH; m++) slowest = CDDP_MAX(slowest, q->us[m]);
  for (int m = 0; m < CDDP_TUNE_NMECH; m++) /* a candidate not measured there: its slowest one */
    if (cand & (1u << m)) sum += q->us[m] > 0 ? q->us[m] : slowest;
  double scale = (double)r->probe_bytes / (double)q->probe_bytes;
  double grow = r->probe_bytes > t->buf_bytes ? (double)r->probe_bytes * map_ms_per_byte : 0;
  return sum * scale * (r->iters + 1) / 1e3 * TUNE_SAFETY + grow;
}

cddp_result_t cddp__tune_run(cddp__tune_t *t, const cddp__tune_ops_t *ops, void *ctx,
                             uint64_t deadline) {
  cddp_result_t ret = CDDP_OK;
  t->state = CDDP_TUNE_RUNNING;
  /* ranks reach this call at different times: the clock starts once all are here, so a late
   * rank's delay is not charged to the budget */
  double sync = 0;
  CDDP_CHECK_GOTO(agree_max(ops, ctx, &sync, 1, deadline), ret, exit);
  double t0_ms = (double)cddp__now_ns() / 1e6;
  /* agreed figures only (elapsed time, mapping cost, best times), so every rank measures the
   * same classes and the same trials */
  double elapsed = 0, map_ms_per_byte = 0;
  int stop = 0;
  for (int k = 0; k < CDDP_TUNE_ROWS; k++) {
    int i = ops->order[k];
    unsigned cand = ops->candidates(ctx, i);
    if (cddp__tune_ncand(cand) < 2 || stop) continue;
    if (elapsed + predict_ms(t, i, cand, map_ms_per_byte) > (double)t->budget_ms) continue;
    if (t->row[i].probe_bytes > t->buf_bytes) {
      double before = elapsed;
      CDDP_CHECK_GOTO(map_buf(t, ops, ctx, t->row[i].probe_bytes, t0_ms, deadline, &elapsed, &stop), ret, exit);
      map_ms_per_byte = (elapsed - before) / (double)t->row[i].probe_bytes;
      if (stop) continue;
    }
    CDDP_CHECK_GOTO(measure(t, ops, ctx, i, cand, t0_ms, deadline, &elapsed), ret, exit);
  }
  for (int i = 0; i < CDDP_TUNE_ROWS; i++) { /* the rest: only one choice, or not measured */
    cddp__tune_row_t *r = &t->row[i];
    unsigned cand = ops->candidates(ctx, i);
    int j = nearest(t, i);
    if (cddp__tune_ncand(cand) < 2) r->mech = __builtin_ctz(cand);
    else if (!r->trials && j >= 0 && r->mech != 0 && (cand & (1u << t->row[j].mech)))
      r->mech = t->row[j].mech; /* a bandwidth class follows its measured neighbour */
  }
  t->took_ms = elapsed;
  t->state = CDDP_TUNE_DONE;
  log_table(t, ops, ctx);
exit:
  if (t->buf) munmap(t->buf, t->buf_bytes);
  t->buf = NULL;
  t->buf_bytes = 0;
  t->force = 0;
  return ret;
}

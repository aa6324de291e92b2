/* shm_tune.c - the shm transport's tuner: for each size class of an allreduce of ordinary
 * buffers, which mechanism (direct, cross-memory attach, staged ring) is fastest on this host,
 * measured once per communicator and agreed across its ranks (docs/tuner.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "comm/shm.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"

#define TUNE_TRIALS 3     /* interleaved trials per candidate; the best one counts */
#define TUNE_MARGIN 0.05  /* the default is left only for a candidate this much faster */
#define TUNE_SAFETY 2.0   /* a class's predicted first trial is scaled up by this (caches end) */

/* The size classes, the size each is measured at, and calls per timed trial (each at least
 * ~8 us, so the clock's cost is small; few calls, as each is a sync point where a loaded host
 * can preempt a rank). */
static const struct {
  uint64_t max, probe;
  int iters;
} classes[SHM_TUNE_ROWS] = {
    {16 << 10, 16 << 10, 16}, {64 << 10, 64 << 10, 8}, {256 << 10, 256 << 10, 8},
    {1 << 20, 1 << 20, 4},    {4 << 20, 4 << 20, 2},    {UINT64_MAX, 16 << 20, 1},
};

static const char *const mech_names[SHM_NMECH] = {"direct", "cma", "staged"};

static int knob_set(cddp_knob_t k) {
  const char *v = getenv(cddp__knob_var(k));
  return v && *v;
}

uint32_t cddp__shm_tune_knobs(void) {
  uint32_t b = 0;
  if (knob_set(CDDP_KNOB_SHM_CMA)) b |= SHM_SET_CMA;
  if (knob_set(CDDP_KNOB_DIRECT_MAX_BYTES)) b |= SHM_SET_DIRECT;
  if (cddp__knob_int(CDDP_KNOB_TUNE) == 0) b |= SHM_SET_NOTUNE;
  return b;
}

/* What the fixed defaults (and the forced knobs) give, without the tuner. */
static int default_mech(const shm_t *s, uint64_t bytes) {
  if (bytes <= s->direct_max) return SHM_MECH_DIRECT;
  return s->cma ? SHM_MECH_CMA : SHM_MECH_RING;
}

/* The mechanisms class i may use, as a bit mask. Direct is a candidate only at or below
 * direct_max: the tuner may move the switch to the bandwidth path down, never up, because a
 * rank cannot tell on its own whether every rank's buffers are zero-copy (mem_alloc) ones,
 * for which the large path is far faster than direct. A forced knob leaves one choice. */
static unsigned candidates(const shm_t *s, int i) {
  uint64_t p = classes[i].probe;
  int forced_direct = (s->tune.set & SHM_SET_DIRECT) != 0;
  if (forced_direct && p <= s->direct_max) return 1u << SHM_MECH_DIRECT;
  unsigned m = 0;
  if (!forced_direct && p <= s->direct_max) m |= 1u << SHM_MECH_DIRECT;
  if (s->cma && !(s->tune.set & SHM_SET_CMA)) m |= 1u << SHM_MECH_CMA | 1u << SHM_MECH_RING;
  else m |= 1u << (s->cma ? SHM_MECH_CMA : SHM_MECH_RING);
  return m;
}

static int ncand(unsigned m) { return __builtin_popcount(m); }

void cddp__shm_tune_init(shm_t *s) {
  shm_tune_t *t = &s->tune;
  t->state = SHM_TUNE_OFF;
  t->force = 0;
  for (int i = 0; i < SHM_TUNE_ROWS; i++)
    t->row[i] = (shm_tune_row_t){.max_bytes = classes[i].max, .probe_bytes = classes[i].probe,
                                 .mech = default_mech(s, classes[i].probe)};
  const char *why = NULL;
  if (t->set & SHM_SET_NOTUNE) why = "CDDP_TUNE=0";
  for (int i = 0; i < SHM_TUNE_ROWS && !why; i++)
    if (ncand(candidates(s, i)) > 1) t->state = SHM_TUNE_PENDING;
  if (!why && t->state == SHM_TUNE_OFF) why = "nothing left to choose: the knobs force every class";
  if (why)
    CDDP_INFO(CDDP_SUB_SHM, "shm tune: off (%s); allreduce: direct up to %zu B, then %s", why,
              s->direct_max, s->cma ? "cma" : "staged");
}

int cddp__shm_tune_pick(const shm_t *s, size_t total) {
  const shm_tune_t *t = &s->tune;
  if (t->force) return t->force - 1;
  if (t->state != SHM_TUNE_DONE) return default_mech(s, total);
  if ((t->set & SHM_SET_DIRECT) && total <= s->direct_max) return SHM_MECH_DIRECT;
  int i = 0;
  while (i < SHM_TUNE_ROWS - 1 && total > t->row[i].max_bytes) i++;
  int m = t->row[i].mech;
  if (m == SHM_MECH_DIRECT && total > s->direct_max) m = default_mech(s, total); /* never up */
  return m;
}

/* iters allreduces of bytes (f32 sum, in place) by mechanism mech; *us = time per call. */
static cddp_result_t timed(shm_t *s, float *buf, uint64_t bytes, int mech, int iters,
                           uint64_t deadline, double *us) {
  cddp__coll_t c = {.kind = CDDP__ALLREDUCE, .send = buf, .recv = buf, .count = bytes / 4,
                    .dt = CDDP_F32, .op = CDDP_SUM, .algo = CDDP_ALGO_AUTO, .deadline = deadline};
  cddp_result_t r = CDDP_OK;
  s->tune.force = 1 + mech;
  uint64_t t0 = cddp__now_ns();
  for (int k = 0; k < iters && r == CDDP_OK; k++) r = cddp__shm_run(s, &c);
  *us = (double)(cddp__now_ns() - t0) / 1e3 / iters;
  s->tune.force = 0;
  return r;
}

/* v[0..n) = the maximum over ranks, bit-identical on every rank (direct: every rank reduces
 * every rank's values in rank order). */
static cddp_result_t agree_max(shm_t *s, double *v, size_t n, uint64_t deadline) {
  cddp__coll_t c = {.kind = CDDP__ALLREDUCE, .send = v, .recv = v, .count = n, .dt = CDDP_F64,
                    .op = CDDP_MAX, .algo = CDDP_ALGO_DIRECT, .deadline = deadline};
  return cddp__shm_run(s, &c);
}

static const char *size_str(uint64_t b, char *buf, size_t size) {
  if (b >= (1u << 20)) snprintf(buf, size, "%llu MiB", (unsigned long long)(b >> 20));
  else snprintf(buf, size, "%llu KiB", (unsigned long long)(b >> 10));
  return buf;
}

static void log_table(const shm_t *s) {
  const shm_tune_t *t = &s->tune;
  if (!cddp__log_enabled(CDDP_LOG_INFO, CDDP_SUB_SHM)) return;
  CDDP_INFO(CDDP_SUB_SHM,
            "shm tune: allreduce of ordinary buffers, %d ranks, calibrated in %.1f ms (budget %u ms; "
            "per class the best of up to %d interleaved trials, slowest rank's time)%s%s",
            s->world, t->took_ms, t->budget_ms, TUNE_TRIALS,
            t->set & SHM_SET_CMA ? "; CDDP_SHM_CMA forced" : "",
            t->set & SHM_SET_DIRECT ? "; CDDP_DIRECT_MAX_BYTES forced" : "");
  double busf = 2.0 * (s->world - 1) / s->world;
  for (int i = 0; i < SHM_TUNE_ROWS; i++) {
    const shm_tune_row_t *r = &t->row[i];
    char cls[64], lo[24], hi[24], fig[192] = "", *p = fig;
    if (i == 0) snprintf(cls, sizeof cls, "<= %s", size_str(r->max_bytes, hi, sizeof hi));
    else if (i == SHM_TUNE_ROWS - 1) snprintf(cls, sizeof cls, "> %s", size_str(t->row[i - 1].max_bytes, lo, sizeof lo));
    else snprintf(cls, sizeof cls, "%s-%s", size_str(t->row[i - 1].max_bytes, lo, sizeof lo), size_str(r->max_bytes, hi, sizeof hi));
    for (int m = 0; m < SHM_NMECH; m++)
      if (r->us[m] > 0)
        p += snprintf(p, (size_t)(fig + sizeof fig - p), "%s%s %.1f us %.2f GB/s", p == fig ? "" : ", ",
                      mech_names[m], r->us[m], busf * (double)r->probe_bytes / (r->us[m] * 1e3));
    CDDP_INFO(CDDP_SUB_SHM, "shm tune:   %-15s -> %-6s (%s%s%s)", cls, mech_names[r->mech],
              r->trials ? "at " : "", r->trials ? size_str(r->probe_bytes, lo, sizeof lo) : "",
              r->trials ? "" : (ncand(candidates(s, i)) > 1 ? "not measured: budget spent"
                                                            : "the only choice left by the knobs"));
    if (r->trials)
      CDDP_INFO(CDDP_SUB_SHM, "shm tune:                      %s; %d trial%s, %.1f ms", fig, r->trials,
                r->trials > 1 ? "s" : "", r->ms);
  }
}

/* The time since t0_ms, the largest over ranks: what every budget decision is made on. */
static cddp_result_t agreed_elapsed(shm_t *s, double t0_ms, uint64_t deadline, double *ms) {
  *ms = (double)cddp__now_ns() / 1e6 - t0_ms;
  return agree_max(s, ms, 1, deadline);
}

/* Measures class i: interleaved trials of every candidate, as many as the budget allows (at
 * least one), each trial's end agreed so every rank stops after the same one. Fills its row
 * from the agreed figures; *elapsed_ms is the agreed time at the end. */
static cddp_result_t measure(shm_t *s, int i, unsigned cand, double t0_ms, uint64_t deadline,
                             double *elapsed_ms) {
  shm_tune_row_t *r = &s->tune.row[i];
  double best[SHM_NMECH] = {0}, start = *elapsed_ms, before = start, now = start;
  int tr = 0;
  while (tr < TUNE_TRIALS) {
    for (int j = 0; j < SHM_NMECH; j++) {
      int m = (tr + j) % SHM_NMECH; /* rotate the order: no candidate always goes first */
      if (!(cand & (1u << m))) continue;
      double us;
      if (tr == 0) CDDP_CHECK(timed(s, s->tune.buf, r->probe_bytes, m, 1, deadline, &us)); /* warm-up */
      CDDP_CHECK(timed(s, s->tune.buf, r->probe_bytes, m, classes[i].iters, deadline, &us));
      if (best[m] == 0 || us < best[m]) best[m] = us;
    }
    tr++;
    CDDP_CHECK(agreed_elapsed(s, t0_ms, deadline, &now));
    if (now + (now - before) > (double)s->tune.budget_ms) break; /* one more would overrun */
    before = now;
  }
  CDDP_CHECK(agree_max(s, best, SHM_NMECH, deadline));
  memcpy(r->us, best, sizeof r->us);
  r->trials = tr;
  r->start_ms = start;
  r->ms = now - start;
  *elapsed_ms = now;
  /* the default stays unless another candidate is clearly faster (noise must not flip it) */
  int inc = default_mech(s, r->probe_bytes), win = inc;
  if (!(cand & (1u << inc))) win = inc = __builtin_ctz(cand);
  for (int m = 0; m < SHM_NMECH; m++)
    if ((cand & (1u << m)) && best[m] < best[win]) win = m;
  r->mech = best[win] < best[inc] * (1.0 - TUNE_MARGIN) ? win : inc;
  return CDDP_OK;
}

/* Maps this rank's calibration buffer for bytes (private anonymous memory, what malloc gives
 * for a large buffer; zeros, so sums stay zero), then agrees whether every rank could and
 * the time. 0 on success everywhere. */
static cddp_result_t map_buf(shm_t *s, size_t bytes, double t0_ms, uint64_t deadline,
                             double *elapsed_ms, int *failed) {
  shm_tune_t *t = &s->tune;
  if (t->buf) munmap(t->buf, t->buf_bytes);
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  t->buf = p == MAP_FAILED ? NULL : p;
  t->buf_bytes = t->buf ? bytes : 0;
  double v[2] = {t->buf ? 0 : 1, (double)cddp__now_ns() / 1e6 - t0_ms};
  CDDP_CHECK(agree_max(s, v, 2, deadline));
  *failed = v[0] != 0;
  *elapsed_ms = v[1];
  if (*failed) CDDP_WARN("shm tune: a rank could not map %zu bytes to calibrate; stopped there", bytes);
  return CDDP_OK;
}

/* The measured class whose probe size is nearest to class i's (in ratio), or -1. */
static int nearest(const shm_tune_t *t, int i) {
  int best = -1;
  double bd = 0;
  for (int j = 0; j < SHM_TUNE_ROWS; j++) {
    if (!t->row[j].trials) continue;
    double d = (double)classes[i].probe / (double)classes[j].probe;
    if (d < 1) d = 1 / d;
    if (best < 0 || d < bd) best = j, bd = d;
  }
  return best;
}

/* Predicted ms of class i's first trial (its warm-up included), from the agreed best times of
 * the nearest measured class scaled by bytes; plus mapping its buffer if it must grow. */
static double predict_ms(const shm_tune_t *t, int i, unsigned cand, double map_ms_per_byte) {
  int j = nearest(t, i);
  if (j < 0) return 0;
  double slowest = 0, sum = 0;
  for (int m = 0; m < SHM_NMECH; m++) slowest = CDDP_MAX(slowest, t->row[j].us[m]);
  for (int m = 0; m < SHM_NMECH; m++) /* a candidate not measured there: its slowest one */
    if (cand & (1u << m)) sum += t->row[j].us[m] > 0 ? t->row[j].us[m] : slowest;
  double scale = (double)classes[i].probe / (double)classes[j].probe;
  double grow = classes[i].probe > t->buf_bytes ? (double)classes[i].probe * map_ms_per_byte : 0;
  return sum * scale * (classes[i].iters + 1) / 1e3 * TUNE_SAFETY + grow;
}

/* 16 KiB first: a cheap pilot (one trial of it is always run) that prices the others; then where
 * bandwidth matters, 1 MiB and up, then down (the latency classes keep direct, a fine default,
 * when the budget runs out there). */
static const int order[SHM_TUNE_ROWS] = {0, 3, 4, 5, 2, 1};

cddp_result_t cddp__shm_tune_run(shm_t *s, uint64_t deadline) {
  shm_tune_t *t = &s->tune;
  cddp_result_t ret = CDDP_OK;
  const char *what = s->what;
  t->state = SHM_TUNE_RUNNING;
  /* ranks reach this call at different times: the clock starts once all are here, so a late
   * rank's delay is not charged to the budget */
  double sync = 0;
  CDDP_CHECK_GOTO(agree_max(s, &sync, 1, deadline), ret, exit);
  double t0_ms = (double)cddp__now_ns() / 1e6;
  /* agreed figures only (elapsed time, mapping cost, best times), so every rank measures the
   * same classes and the same trials */
  double elapsed = 0, map_ms_per_byte = 0;
  int stop = 0;
  for (int k = 0; k < SHM_TUNE_ROWS; k++) {
    int i = order[k];
    unsigned cand = candidates(s, i);
    if (ncand(cand) < 2 || stop) continue;
    if (elapsed + predict_ms(t, i, cand, map_ms_per_byte) > (double)t->budget_ms) continue;
    if (classes[i].probe > t->buf_bytes) {
      double before = elapsed;
      CDDP_CHECK_GOTO(map_buf(s, classes[i].probe, t0_ms, deadline, &elapsed, &stop), ret, exit);
      map_ms_per_byte = (elapsed - before) / (double)classes[i].probe;
      if (stop) continue;
    }
    CDDP_CHECK_GOTO(measure(s, i, cand, t0_ms, deadline, &elapsed), ret, exit);
  }
  for (int i = 0; i < SHM_TUNE_ROWS; i++) { /* the rest: only one choice, or not measured */
    shm_tune_row_t *r = &t->row[i];
    unsigned cand = candidates(s, i);
    int j = nearest(t, i);
    if (ncand(cand) < 2) r->mech = __builtin_ctz(cand);
    else if (!r->trials && j >= 0 && r->mech != SHM_MECH_DIRECT && (cand & (1u << t->row[j].mech)))
      r->mech = t->row[j].mech; /* a bandwidth class follows its measured neighbour */
  }
  t->took_ms = elapsed;
  t->state = SHM_TUNE_DONE;
  log_table(s);
exit:
  if (t->buf) munmap(t->buf, t->buf_bytes);
  t->buf = NULL;
  t->buf_bytes = 0;
  t->force = 0;
  s->what = what;
  return ret;
}

/* shm_tune.c - the shm transport's side of the tuner (tune.c): for each size class of an
 * allreduce of ordinary buffers, direct, cross-memory attach or the staged ring, whichever is
 * fastest on this host (docs/tuner.md). */

#include "comm/shm.h"
#include "common/check.h"
#include "common/knobs.h"
#include "common/log.h"

/* {max, probe, calls per timed trial}: each trial at least ~8 us, so the clock's cost is small;
 * few calls, as each is a sync point where a loaded host can preempt a rank. */
static const uint64_t classes[CDDP_TUNE_ROWS][3] = {
    {16 << 10, 16 << 10, 16}, {64 << 10, 64 << 10, 8}, {256 << 10, 256 << 10, 8},
    {1 << 20, 1 << 20, 4},    {4 << 20, 4 << 20, 2},    {UINT64_MAX, 16 << 20, 1},
};

/* 16 KiB first: a cheap pilot (one trial of it is always run) that prices the others; then where
 * bandwidth matters, 1 MiB and up, then down (the latency classes keep direct, a fine default,
 * when the budget runs out there). */
static const int order[CDDP_TUNE_ROWS] = {0, 3, 4, 5, 2, 1};

static const char *const mech_names[SHM_NMECH] = {"direct", "cma", "staged"};

uint32_t cddp__shm_tune_knobs(void) {
  uint32_t b = 0;
  if (cddp__tune_knob_set(CDDP_KNOB_SHM_CMA)) b |= SHM_SET_CMA;
  if (cddp__tune_knob_set(CDDP_KNOB_DIRECT_MAX_BYTES)) b |= SHM_SET_DIRECT;
  if (cddp__knob_int(CDDP_KNOB_TUNE) == 0) b |= SHM_SET_NOTUNE;
  return b;
}

/* What the fixed defaults (and the forced knobs) give, without the tuner. */
static int default_mech(void *ctx, uint64_t bytes) {
  const shm_t *s = ctx;
  if (bytes <= s->direct_max) return SHM_MECH_DIRECT;
  return s->cma ? SHM_MECH_CMA : SHM_MECH_RING;
}

/* The mechanisms class i may use, as a bit mask. Direct is a candidate only at or below
 * direct_max: the tuner may move the switch to the bandwidth path down, never up, because a
 * rank cannot tell on its own whether every rank's buffers are zero-copy (mem_alloc) ones,
 * for which the large path is far faster than direct. A forced knob leaves one choice. */
static unsigned candidates(void *ctx, int i) {
  const shm_t *s = ctx;
  uint64_t p = classes[i][1];
  int forced_direct = (s->tune.set & SHM_SET_DIRECT) != 0;
  if (forced_direct && p <= s->direct_max) return 1u << SHM_MECH_DIRECT;
  unsigned m = 0;
  if (!forced_direct && p <= s->direct_max) m |= 1u << SHM_MECH_DIRECT;
  if (s->cma && !(s->tune.set & SHM_SET_CMA)) m |= 1u << SHM_MECH_CMA | 1u << SHM_MECH_RING;
  else m |= 1u << (s->cma ? SHM_MECH_CMA : SHM_MECH_RING);
  return m;
}

static cddp_result_t run(void *ctx, const cddp__coll_t *c) { return cddp__shm_run(ctx, c); }

static const char *const set_names[] = {"CDDP_SHM_CMA", "CDDP_DIRECT_MAX_BYTES", NULL};

static cddp__tune_ops_t shm_ops(void) {
  return (cddp__tune_ops_t){.name = "shm", .sub = CDDP_SUB_SHM, .mech_names = mech_names,
                            .set_names = set_names, .nset = 3, .order = order, .candidates = candidates,
                            .default_mech = default_mech, .run = run};
}

void cddp__shm_tune_init(shm_t *s) {
  cddp__tune_ops_t ops = shm_ops();
  cddp__tune_reset(&s->tune, &ops, s, s->world, classes);
  if (!(s->tune.set & SHM_SET_NOTUNE)) cddp__tune_arm(&s->tune, &ops, s);
  if (s->tune.state == CDDP_TUNE_OFF)
    CDDP_INFO(CDDP_SUB_SHM, "shm tune: off (%s); allreduce: direct up to %zu B, then %s",
              s->tune.set & SHM_SET_NOTUNE ? "CDDP_TUNE=0" : "nothing left to choose: the knobs force every class",
              s->direct_max, s->cma ? "cma" : "staged");
}

int cddp__shm_tune_pick(const shm_t *s, size_t total) { /* direct never above direct_max */
  return cddp__tune_pick(&s->tune, default_mech, (void *)s, total, s->direct_max,
                         (s->tune.set & SHM_SET_DIRECT) != 0, 1);
}

cddp_result_t cddp__shm_tune_run(shm_t *s, uint64_t deadline) {
  const char *what = s->what;
  cddp__tune_ops_t ops = shm_ops();
  cddp_result_t ret = cddp__tune_run(&s->tune, &ops, s, deadline);
  s->what = what;
  return ret;
}

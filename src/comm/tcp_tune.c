/* tcp_tune.c - the TCP transport's side of the tuner (tune.c): for each size class of an
 * allreduce, recursive doubling or the ring, and the ring's chunk (CDDP_TCP_CHUNK_BYTES or a
 * quarter of it), whichever is fastest between these hosts (docs/tuner.md). */
#include "comm/tcp.h"
#include "common/check.h"
#include "common/knobs.h"
#include "common/log.h"

/* {max, probe, calls per timed trial}: a loopback allreduce costs ~13 us at 16 KiB, ~1 ms at
 * 4 MiB here; across hosts more, and the budget then leaves the large classes out. */
static const uint64_t classes[CDDP_TUNE_ROWS][3] = {
    {16 << 10, 16 << 10, 8}, {64 << 10, 64 << 10, 4}, {256 << 10, 256 << 10, 2},
    {1 << 20, 1 << 20, 2},   {4 << 20, 4 << 20, 1},   {UINT64_MAX, 16 << 20, 1},
};
/* pilot, then up one class at a time: the cost of a call here is far from proportional to its
 * size below ~256 KiB (16 KiB ring 49 us, 64 KiB 18 us), so each class is priced from the one
 * just below, not from the pilot */
static const int order[CDDP_TUNE_ROWS] = {0, 2, 3, 4, 5, 1};
static const char *const mech_names[CDDP_TUNE_NMECH] = {"rd", "ring", "ring/4"};
#define RD_MAX (256u << 10) /* recursive doubling is a candidate up to this size */

static int default_mech(void *ctx, uint64_t bytes) {
  const cddp__tcp_t *t = ctx;
  return bytes <= t->direct_max ? TCP_MECH_RD : TCP_MECH_RING;
}

/* Recursive doubling up to 256 KiB (every rank sends the whole message log2(world) times: no
 * use beyond); the ring with a quarter of the chunk where a rank's block spans more than one
 * such chunk (else both chunkings are the same). A forced knob leaves its choice alone. */
static unsigned candidates(void *ctx, int i) {
  const cddp__tcp_t *t = ctx;
  uint64_t p = classes[i][1];
  int forced_direct = (t->tune.set & TCP_SET_DIRECT) != 0;
  if (forced_direct && p <= t->direct_max) return 1u << TCP_MECH_RD;
  unsigned m = 1u << TCP_MECH_RING;
  if (!forced_direct && p <= RD_MAX) m |= 1u << TCP_MECH_RD;
  if (!(t->tune.set & TCP_SET_CHUNK) && p / (uint64_t)t->world > t->chunk_bytes / 4) m |= 1u << TCP_MECH_RING4;
  return m;
}

static const char *const set_names[] = {"CDDP_DIRECT_MAX_BYTES", "CDDP_TCP_CHUNK_BYTES"};

static cddp__tune_ops_t tcp_ops(void) {
  return (cddp__tune_ops_t){.name = "tcp", .sub = CDDP_SUB_NET, .mech_names = mech_names,
                            .set_names = set_names, .nset = 2, .order = order, .candidates = candidates,
                            .default_mech = default_mech, .run = cddp__tcp_run};
}

void cddp__tcp_tune_init(cddp__tcp_t *t) {
  cddp__tune_ops_t ops = tcp_ops();
  cddp__tune_reset(&t->tune, &ops, t, t->world, classes);
  /* the knobs are agreed when it runs (no shared memory to publish them in at init), so
   * every rank arms it alike and a rank's CDDP_TUNE=0 is learnt by all at the same call */
  t->tune.state = t->world > 1 ? CDDP_TUNE_PENDING : CDDP_TUNE_OFF;
}

int cddp__tcp_tune_pick(const cddp__tcp_t *t, size_t bytes) { /* rd above direct_max if faster */
  int forced = (t->tune.set & TCP_SET_DIRECT) != 0;
  return cddp__tune_pick(&t->tune, default_mech, (void *)t, bytes, t->direct_max, forced, forced);
}

cddp_result_t cddp__tcp_tune_run(cddp__tcp_t *t, uint64_t deadline) {
  cddp__tune_t *u = &t->tune;
  u->state = CDDP_TUNE_RUNNING;
  double v[4] = {cddp__knob_int(CDDP_KNOB_TUNE) == 0, cddp__tune_knob_set(CDDP_KNOB_DIRECT_MAX_BYTES),
                 cddp__tune_knob_set(CDDP_KNOB_TCP_CHUNK_BYTES),
                 (double)CDDP_MAX(0, CDDP_MIN(cddp__knob_int(CDDP_KNOB_TUNE_MS), 10000))};
  cddp__tune_ops_t ops = tcp_ops();
  CDDP_CHECK(cddp__tune_agree_max(&ops, t, v, 4, deadline)); /* a knob set on any rank: on all */
  u->set = (v[1] != 0 ? TCP_SET_DIRECT : 0) | (v[2] != 0 ? TCP_SET_CHUNK : 0);
  u->budget_ms = (uint32_t)v[3]; /* the largest of the ranks' CDDP_TUNE_MS */
  if (v[0] == 0) cddp__tune_arm(u, &ops, t);
  else u->state = CDDP_TUNE_OFF;
  if (u->state == CDDP_TUNE_OFF) {
    CDDP_INFO(CDDP_SUB_NET, "tcp tune: off (%s); allreduce: recursive doubling up to %zu B, then the ring in %zu KiB chunks",
              v[0] != 0 ? "CDDP_TUNE=0" : "nothing left to choose: the knobs force every class", t->direct_max,
              t->chunk_bytes >> 10);
    return CDDP_OK;
  }
  return cddp__tune_run(u, &ops, t, deadline);
}

/* tune.h - the collective tuner's engine: for each size class of an allreduce, which of a
 * transport's mechanisms is fastest on this host, measured on every rank alike and agreed
 * across the ranks, so every rank holds the same table (docs/tuner.md). A transport supplies
 * the classes, the candidates, and two collectives: a timed one and an agreeing max. */
#ifndef CDDP_COMM_TUNE_H
#define CDDP_COMM_TUNE_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/comm.h"
#include "comm/transport.h"

#define CDDP_TUNE_ROWS 6  /* size classes */
#define CDDP_TUNE_NMECH 3 /* mechanisms per transport; mechanism 0 is the latency one */

enum { CDDP_TUNE_OFF, CDDP_TUNE_PENDING, CDDP_TUNE_RUNNING, CDDP_TUNE_DONE };

typedef struct {
  uint64_t max_bytes;      /* the class: sizes up to this (the last row: everything above) */
  uint64_t probe_bytes;    /* the size it is measured at */
  int iters;               /* calls per timed trial */
  int mech;                /* chosen (before the calibration: the fixed default) */
  double us[CDDP_TUNE_NMECH]; /* agreed: best time of one call, max over ranks; 0 = not measured */
  int trials;              /* interleaved trials of each candidate (0: not measured) */
  double start_ms, ms;     /* agreed: when its measurement started (since the calibration
                              began) and how long it took */
} cddp__tune_row_t;

typedef struct {
  int state;               /* CDDP_TUNE_*: PENDING until the trigger */
  uint32_t set;            /* the transport's bits: knobs forced on some rank */
  uint32_t budget_ms;      /* agreed CDDP_TUNE_MS */
  int force;               /* calibration in progress: 1 + the mechanism to use, else 0 */
  double took_ms;          /* agreed: how long the calibration took */
  int world;
  void *buf;               /* calibration: this rank's buffer (private, like a malloc'd one) */
  size_t buf_bytes;
  cddp__tune_row_t row[CDDP_TUNE_ROWS];
} cddp__tune_t;

typedef struct {
  const char *name;                  /* log prefix: "shm", "tcp" */
  unsigned sub;                      /* log subsystem */
  const char *const *mech_names;     /* CDDP_TUNE_NMECH names */
  const char *const *set_names;      /* knob named by each bit of t->set (NULL: not a knob) */
  int nset;
  const int *order;                  /* the classes in measuring order; the first is the pilot */
  unsigned (*candidates)(void *ctx, int row);      /* bit mask of mechanisms */
  int (*default_mech)(void *ctx, uint64_t bytes);  /* what the constants give */
  /* Runs one collective of the transport, obeying t->force (1 + the mechanism) for an allreduce
   * with CDDP_ALGO_AUTO; with CDDP_ALGO_DIRECT, its latency path, which must give every rank
   * the same bits for a max of doubles (the agreeing step). */
  cddp_result_t (*run)(void *ctx, const cddp__coll_t *c);
} cddp__tune_ops_t;

/* Fills the rows (classes {max, probe, iters}) with the defaults; state OFF. */
void cddp__tune_reset(cddp__tune_t *t, const cddp__tune_ops_t *ops, void *ctx, int world,
                      const uint64_t classes[CDDP_TUNE_ROWS][3]);
/* PENDING when some class has more than one candidate, else OFF. */
void cddp__tune_arm(cddp__tune_t *t, const cddp__tune_ops_t *ops, void *ctx);
/* Collective, every rank at the same call: measures, agrees, fills the table, logs it at INFO.
 * Bounded by t->budget_ms on the agreed clock (plus at most one trial). */
cddp_result_t cddp__tune_run(cddp__tune_t *t, const cddp__tune_ops_t *ops, void *ctx,
                             uint64_t deadline);
/* The mechanism for an allreduce of bytes: the forced one during the calibration, the default
 * before it, mechanism 0 (latency) at or below direct_max when that knob is forced, else the
 * table's, where mechanism 0 is kept at or below direct_max when cap is set. */
int cddp__tune_pick(const cddp__tune_t *t, int (*default_mech)(void *ctx, uint64_t bytes), void *ctx,
                    size_t bytes, size_t direct_max, int forced_direct, int cap);
int cddp__tune_ncand(unsigned mask);
/* Collective: v[0..n) = the maximum over ranks, the same bits on every rank. */
cddp_result_t cddp__tune_agree_max(const cddp__tune_ops_t *ops, void *ctx, double *v, size_t n,
                                   uint64_t deadline);
/* Whether this process's environment sets the knob (a cddp_knob_t) to a non-empty value. */
int cddp__tune_knob_set(int knob);

#endif /* CDDP_COMM_TUNE_H */

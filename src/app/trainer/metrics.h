/* metrics.h - what the user sees of a run: rank 0's live progress line and end summary, and
 * the run's metrics.jsonl (one JSON object per step and per evaluation). */
#ifndef CDDP_TRAINER_METRICS_H
#define CDDP_TRAINER_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "cddp/cddp.h"

typedef struct cddp_step_record {
  int64_t step;        /* optimizer steps done, 1-based */
  int64_t total;       /* steps of the whole run */
  uint64_t epoch;      /* the sampler's epoch index (from 0) the step's samples came from; every
                          label written from it counts from 1 (progress line, metrics.jsonl) */
  int epochs;          /* epochs the run's steps reach into (train.max_steps may end one early) */
  double loss;         /* mean over the global batch */
  double lr;
  double grad_norm;
  int samples;         /* real samples in the global batch */
  int units;           /* loss terms per sample: 1, or T tokens for text */
  double step_s, compute_s, comm_s, data_s; /* comm = exposed (not hidden by backward) */
  uint64_t bytes_sent; /* this rank, this step */
  double compression;  /* float32 gradient bytes / bytes this rank contributed (1: none) */
  double loss_scale;   /* fp16: the loss scale S this step used (0: no loss scaling) */
  int skipped;         /* fp16: the gradients overflowed on some rank: no optimizer step */
  const struct cddp__ranks *ranks; /* every rank's timings, when gathered at this step (else NULL) */
} cddp_step_record_t;

typedef struct cddp_metrics {
  FILE *jsonl;         /* NULL on ranks other than 0 */
  char path[700];      /* jsonl's, for the line that says a write failed */
  int live;            /* progress line rewritten in place (stderr is a terminal) */
  int every;           /* plain progress line every N steps when not live */
  double started_s;    /* wall clock of the first step of this process */
  int64_t first_step;  /* step the process started at (after a resume) */
  int64_t steps;       /* steps trained by this process (a redone step counts again) */
  int64_t samples;     /* samples trained by this process */
  double comm_s, step_s;
  int pending_newline;
  cddp_step_record_t last; /* this rank's last step (every rank keeps it: it may become rank 0) */
  int have_last;
  int64_t logged;      /* the file ends at this step as this process knows it (-1: not its file yet) */
} cddp_metrics_t;

/* Rank 0 passes the jsonl path (appended to when resuming); others pass NULL. */
cddp_result_t cddp__metrics_open(cddp_metrics_t *m, const char *jsonl_path, int append, int every);
/* Appends to jsonl_path from now on (rank 0 after a change of rank, or after a trim renamed
 * the file), keeping this process's counters and the progress line. */
cddp_result_t cddp__metrics_reopen(cddp_metrics_t *m, const char *jsonl_path);
/* Cuts the file at path back to its lines of steps <= step, step and eval lines alike, through
 * a rename, so steps trained again after a resume or a restore are logged once. A torn last
 * line (no newline: a full disk, a kill) is dropped. Refused, the file left as it is, with the
 * line's number: a line before step that does not parse, a step line that does not follow the
 * one before it, or (need >= 0) a file whose last step is below need. *last (may be NULL) gets
 * the highest step it had logged, -1 when there is no file or no step line (not an error). */
cddp_result_t cddp__metrics_trim(const char *path, int64_t step, int64_t need, int64_t *last);
/* Logs one step (rank 0's file, the progress line). A write or flush that fails (ENOSPC) is an
 * error naming the file: the caller stops the run rather than train on with a log cut short. */
cddp_result_t cddp__metrics_step(cddp_metrics_t *m, const cddp_step_record_t *r);
/* Rank 0 after a recovery or a restore: cuts jsonl_path back to the lines of steps <= step (an
 * old rank 0 may have logged a step the others redo) and appends from now on; when the file
 * has no line for step and this rank holds step's record (its own, or the state's source's),
 * logs it from that (the old rank 0 died between the step's commit and its line). *logged (may
 * be NULL): the highest step the file had, -1: no file. */
cddp_result_t cddp__metrics_take_over(cddp_metrics_t *m, const char *jsonl_path, int64_t step, int64_t *logged);
/* epoch: the sampler's index (from 0); epoch_end: the evaluation closes that epoch (else it
 * comes after the run's last step, inside it). */
cddp_result_t cddp__metrics_eval(cddp_metrics_t *m, uint64_t epoch, int epoch_end, int64_t step, double accuracy,
                                double loss, int samples);
/* Average samples/s of this process and the exposed-communication fraction of step time. */
double cddp__metrics_rate(const cddp_metrics_t *m);
double cddp__metrics_comm_fraction(const cddp_metrics_t *m);
/* Ends a live line so the next output starts on its own line. */
void cddp__metrics_break_line(cddp_metrics_t *m);
void cddp__metrics_close(cddp_metrics_t *m);
/* Reading metrics.jsonl back (cddp plot, cddp bench train --sweep): the number after "key": in
 * one of its lines (flat objects, no spaces, as written here). 1 and *out, or 0. */
int cddp__metrics_num(const char *line, const char *key, double *out);

#endif /* CDDP_TRAINER_METRICS_H */

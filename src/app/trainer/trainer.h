/* trainer.h - `cddp train` inside: the run's context shared by setup, state and loop. */
#ifndef CDDP_TRAINER_H
#define CDDP_TRAINER_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "cddp/ddp.h"
#include "trainer/config.h"
#include "trainer/data.h"
#include "trainer/ddp_path.h"
#include "trainer/device.h"
#include "trainer/flat.h"
#include "trainer/grad_stage.h"
#include "trainer/loss_scale.h"
#include "trainer/metrics.h"
#include "trainer/ranks.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "trainer/overlap_trial.h"
#include "trainer/prefetch.h"
#include "trainer/sampler.h"
#include "trainer/task.h"
#include "trainer/zero1.h"

typedef struct cddp_train_opts {
  const char *config_path;
  const char *const *sets; /* --set key=value, in order */
  int n_sets;
  const char *work_dir;    /* default "runs" */
  const char *name;        /* default: the config file's base name; "auto": a new folder
                              <config name>-<local time>, one name for the whole job */
  const char *resume;      /* "latest", "none" or a checkpoint path; NULL = none */
  const char *backend;     /* comm backend (native) */
  const char *transport;   /* comm transport (auto, shm, tcp) */
} cddp_train_opts_t;

typedef struct trainer {
  const cddp_train_opts_t *opts;
  cddp_train_config_t cfg;
  char run_dir[512];
  cddp_world_t *w;
  int rank, world, accum;
  cddp_task_t *task;   /* the data set and the model */
  const struct cddp_ops *dev; /* the device table the model's state lives on */
  int staged;          /* dev is not the CPU: the model's state is in flat on the device, and
                          params, grads and opt are host copies (checkpoints, broadcasts, DDP) */
  cddp_flat_t flat;    /* params, grads and moments in one allocation (not under ZeRO-1) */
  cddp_optim_t dopt;   /* staged: the optimizer over flat, its moments on the device */
  char device_name[48]; /* staged: "GPU 0", "the emulated device" */
  cddp_device_choice_t device; /* train.device resolved: the GPU, whether it is shared, emulated */
  int nccl_asked;      /* --backend nccl / CDDP_BACKEND=nccl: as ddp.backend nccl (the world's own
                          comm stays native: the trainer's host collectives need host memory) */
  cddp__ddp_path_t ddp_path; /* how the gradients are all-reduced (ddp_path.h), chosen per world */
  cddp_comm_t *dcomm;  /* DDP_PATH_NCCL: DDP's communicator, backend nccl, on the comm stream */
  cddp_store_t *dview; /* its keys: the world's store under ddp-nccl/g<generation>/ */
  float *params, *grads;
  float *scratch;  /* gradient of one accumulation micro-step (accum > 1) */
  float *residuals; /* resume with ddp.compress sign: every rank's residual, read by rank 0 */
  size_t added_to; /* scratch is added into grads at [added_to, n) */
  int ddp_after_add;
  int overlap;      /* buckets start during backward */
  cddp__overlap_trial_t overlap_trial; /* ddp.overlap auto over shm: timing both ways */
  size_t n_params;
  cddp_ddp_t *ddp;
  cddp__grad_stage_t stage; /* staged, world > 1, uncompressed: the buckets cross during backward;
                               NCCL: they are all-reduced on the device (stage.direct) */
  cddp__zero1_t zero1; /* ddp.shard_optimizer: this rank's shard of the optimizer state */
  cddp_optim_t opt;
  cddp__loss_scale_t scaler; /* train.precision fp16: the loss scale (off otherwise) */
  cddp_sched_spec_t sched;
  cddp_sampler_t sampler;
  int64_t step, total_steps;
  int epochs;       /* epochs the run's steps reach into: the progress line's total */
  uint64_t t_start; /* monotonic ns when this process began: the done line's wall time */
  cddp_metrics_t metrics;
  cddp__ranks_t ranks;       /* every rank's timings, gathered every log.rank_every steps */
  FILE *sample_log;
  uint32_t *idx;
  uint32_t *next_idx;        /* the batch asked of the prefetch thread (data.prefetch) */
  cddp_prefetch_t prefetch;
  int slot;                  /* the task's input slot the current micro-step reads */
  int eval_batch;
  char last_ckpt[600];
  int same_error_everywhere; /* the failing check gives every rank the same verdict */
  int has_state;    /* 0 in a replacement until a survivor sent it the run's state */
  int finished;     /* resumed from a checkpoint at or past the last step: nothing to train */
  int recoveries;   /* in-place recoveries this process took part in */
  int endpoint_mine; /* rank 0 wrote the run folder's endpoint record: it says how the run ended */
  char failure[200];  /* the step that failed and why, for that record ("" = none) */
  char refused[720]; /* rank 0: why this fresh start may not use the run folder (it holds another
                        run), said by the restore to every rank; "" = it may */
} trainer_t;

/* Set by SIGTERM/SIGINT; the ranks agree on it at each step's end. */
extern volatile sig_atomic_t cddp__train_stop;
/* 1 while re-forming after a failure or for a join: a stop signal then exits at once */
extern volatile sig_atomic_t cddp__train_recovering;

/* The whole run; returns the process exit status (0, 1 runtime, 2 bad input, 143 stopped). */
int cddp__train_main(const cddp_train_opts_t *o);

/* train_setup.c */
cddp_result_t cddp__train_check_configs(trainer_t *t);   /* every rank's config equals rank 0's */
cddp_result_t cddp__train_batch_split(trainer_t *t);     /* accumulation steps for this world */
int cddp__train_blas_threads(const trainer_t *t);
/* ddp.overlap resolved: auto overlaps unless the all-reduce would only steal a busy core (over
 * shm, a first guess that overlap_trial.c then measures). */
int cddp__train_overlap(const trainer_t *t, int threads);
/* Names the run folder (--name, "auto", the config's name) and creates it on rank 0, which takes
 * its lock (run_lock.h) for the rest of its life; a folder another run holds, or a fresh first
 * start into a folder that holds another run's checkpoints or metrics, is noted in t->refused
 * (the restore refuses it on every rank). */
cddp_result_t cddp__train_make_run_dir(trainer_t *t);
/* Rank 0, once the start succeeded: the resolved config as RUN_DIR/config.yaml. */
cddp_result_t cddp__train_write_config(trainer_t *t);
/* Rank 0 under cddp run (a replacement too): RUN_DIR/endpoint, where `cddp status RUN_DIR` finds
 * the job and, once it is over, reads how it ended; sets t->endpoint_mine. A failure is a warning. */
void cddp__train_record_endpoint(trainer_t *t);
float cddp__train_scaled_lr(const cddp_train_config_t *c);
/* The DDP object on the current communicator (its gradient buffer is comm memory), with
 * ddp.overlap and ddp.compress applied. */
cddp_result_t cddp__train_make_ddp(trainer_t *t);
/* The DDP object gone (its staging buffer unpinned first); t->ddp and t->grads NULL. */
void cddp__train_destroy_ddp(trainer_t *t);
/* The ranks meet over shm in a world that never re-forms: comm memory lives as long as the run. */
int cddp__train_shm_for_life(const trainer_t *t);
/* t->flat and t->opt's moments from t->dev (not under ZeRO-1); the gradients too, except over
 * shm for the run's life (cddp__train_shm_for_life), where DDP's comm memory keeps the zero copy. */
cddp_result_t cddp__train_make_flat(trainer_t *t);
/* Floats in the parameter and gradient buffers: n_params, or ZeRO-1's world x shard. */
size_t cddp__train_param_slots(const trainer_t *t);
/* What the model computes over: the device's flat state when staged, else params and grads. */
static inline float *cddp__train_model_params(const trainer_t *t) { return t->staged ? t->flat.params : t->params; }
static inline float *cddp__train_model_grads(const trainer_t *t) { return t->staged ? t->flat.grads : t->grads; }
/* Staged (no-ops on the CPU): the device's parameters and moments into the host copies that
 * checkpoints and broadcasts read (pull), and the host copies back to the device after a
 * restore, a broadcast or a recovery wrote them (push). */
void cddp__train_state_pull(trainer_t *t);
void cddp__train_state_push(trainer_t *t);
/* fp16: the loss scale and its count of good steps from rank src to every rank (a restore, a
 * recovery's state sync); nothing without loss scaling. */
cddp_result_t cddp__train_share_scaler(trainer_t *t, int src);
/* The gradient of accumulation micro-steps after the first (accum > 1), in the model's memory. */
cddp_result_t cddp__train_alloc_scratch(trainer_t *t);

/* train_state.c */
/* Collective when ddp.compress is sign and healthy (the residuals are gathered); rank 0
 * writes. healthy = 0 after a failed step: no collective, no residuals. */
cddp_result_t cddp__train_save(trainer_t *t, int healthy);
/* The step's checkpoint, saved (cddp__train_save, healthy) and agreed by every rank: when rank 0
 * could not write it, every rank fails with rank 0's reason (its peers would otherwise find it
 * gone at their next collective and call that a desync). One 8-byte all-reduce per checkpoint;
 * a communicator failure is returned as is (in-place recovery's to repair). */
cddp_result_t cddp__train_save_agreed(trainer_t *t);
/* Restores from `want` (a checkpoint path, "latest", "none" or NULL; rank 0 reads, every rank
 * receives). "latest" with no checkpoint in the run yet loads `origin` when it is not NULL.
 * *resumed = 1 when state came from a checkpoint. Rank 0's failure (or t->refused) is every
 * rank's: each returns its error text and sets t->same_error_everywhere. */
cddp_result_t cddp__train_restore(trainer_t *t, const char *want, const char *origin, int *resumed);
/* Keeps the lines of steps <= step in one sample log ("epoch step index" per line), so the
 * logs list the samples of committed steps exactly once. NOT_FOUND when there is no file. */
cddp_result_t cddp__train_trim_sample_log(const char *path, int64_t step);

/* train_recover.c (cddp run --restart-mode replace) */
/* r is a failure in-place recovery can repair (a peer died) and this job supports it. */
int cddp__train_recoverable(const trainer_t *t, cddp_result_t r);
/* After a collective failed at t_fail (monotonic ns): re-forms the world with the dead rank's
 * replacement, rebuilds the ddp, takes the state of the rank that got furthest, trims this
 * rank's sample log to the committed steps. The caller then redoes the interrupted step. */
cddp_result_t cddp__train_recover(trainer_t *t, uint64_t t_fail);
/* A node was taken in (cddp_world_should_reform, agreed in the step's stats): after the step
 * committed, every rank re-forms into the new generation, re-derives accumulation, and the
 * newcomers receive the state; no step is redone. */
cddp_result_t cddp__train_reform(trainer_t *t);
/* Rank 0 lists the world sizes the global batch splits over in the job's store
 * (elastic/worlds), so the agents take in only joiners that keep it splittable. */
void cddp__train_publish_worlds(trainer_t *t);
/* A replacement process, after setup: receives the state from a survivor. */
cddp_result_t cddp__train_join_as_replacement(trainer_t *t);

#endif /* CDDP_TRAINER_H */

/* config.h - the training config: YAML (libyaml) + --set key=value overrides, validated
 * against one schema table (config.c) that is also the documentation's source. Keys are
 * dotted paths ("optim.lr"). The resolved config is written back as YAML, and hashed
 * (FNV-1a 64 of the resolved text) so ranks can check they agree. */
#ifndef CDDP_TRAINER_CONFIG_H
#define CDDP_TRAINER_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "cddp/cddp.h"
#include "trainer/gpt.h"
#include "trainer/model.h"
#include "trainer/optim.h"

typedef enum cddp_overlap { CDDP_OVERLAP_AUTO = 0, CDDP_OVERLAP_ON = 1, CDDP_OVERLAP_OFF = 2 } cddp_overlap_t;
typedef enum cddp_shard { CDDP_SHARD_AUTO = 0, CDDP_SHARD_ON = 1, CDDP_SHARD_OFF = 2 } cddp_shard_t;

typedef enum cddp_lr_scaling { CDDP_LR_SCALE_NONE = 0, CDDP_LR_SCALE_LINEAR = 1, CDDP_LR_SCALE_SQRT = 2 } cddp_lr_scaling_t;

typedef struct cddp_train_config {
  cddp_model_spec_t model;   /* model.type (mlp|cnn), model.hidden [list], model.conv_channels
                                [list], model.kernel */
  cddp_gpt_spec_t gpt;        /* model.n_layer, model.n_head, model.d_model, model.context */
  char data_dir[256];        /* data.dir (default CDDP_FMNIST_DIR) */
  char dataset[32];          /* data.name: fashion-mnist */
  int drop_last;             /* data.drop_last */
  int prefetch;              /* data.prefetch: the next micro-batch gathered by a thread */
  uint64_t seed;             /* train.seed */
  int epochs;                /* train.epochs */
  int64_t max_steps;         /* train.max_steps (0 = epochs decide) */
  int precision;             /* train.precision: fp32|bf16|fp16 (cddp_precision_t) */
  float loss_scale;          /* train.loss_scale: fp16's initial loss scale */
  int64_t loss_scale_interval; /* train.loss_scale_interval: good steps before it doubles */
  int device;                /* train.device: cpu|cuda|auto, a cddp_device_kind_t (trainer/device.h) */
  int global_batch;          /* batch.global */
  int micro_batch;           /* batch.micro (per rank per micro-step) */
  int ref_batch;             /* batch.reference (for LR scaling; default = global) */
  cddp_lr_scaling_t lr_scaling; /* batch.lr_scaling: none|linear|sqrt */
  cddp_optim_spec_t optim;   /* optim.type sgd|adamw, optim.momentum, optim.nesterov,
                                optim.weight_decay, optim.beta1, optim.beta2, optim.eps,
                                optim.grad_clip */
  float lr;                  /* optim.lr (at the reference batch) */
  cddp_sched_kind_t sched;   /* schedule.type constant|cosine|linear */
  int64_t warmup_steps;      /* schedule.warmup_steps */
  float min_lr;              /* schedule.min_lr */
  double bucket_mb;          /* ddp.bucket_mb */
  cddp_overlap_t overlap;    /* ddp.overlap: auto|true|false */
  int compress;              /* ddp.compress: none|bf16|sign|fp16|powersgd (cddp_compress_t order) */
  int powersgd_rank;         /* ddp.powersgd_rank: PowerSGD's rank (1..256) */
  int sign_adam;             /* ddp.sign_adam: sign-Adam's variance sync every N steps; 0 = off */
  cddp_shard_t shard_optimizer; /* ddp.shard_optimizer: ZeRO-1 (trainer/zero1.c): auto|true|false */
  int threads;               /* ddp.threads: BLAS threads per rank; 0 = cores / local ranks */
  int ddp_backend;           /* ddp.backend: auto|native|nccl, a cddp_ddp_backend_t (trainer/ddp_path.h) */
  int64_t ckpt_every;        /* checkpoint.every_steps (0 = only at the end) */
  int ckpt_keep;             /* checkpoint.keep */
  int eval_every_epoch;      /* eval.every_epoch */
  int eval_at_end;           /* eval.at_end: evaluate after the last step */
  int log_every;             /* log.every_steps (progress line refresh) */
  int rank_every;            /* log.rank_every: gather every rank's timings every N steps */
  int straggler_pct;         /* log.straggler_pct: a rank this much busier than the others' median ... */
  int straggler_windows;     /* log.straggler_windows: ... for this many gathers in a row is named */
  int sample_log;            /* debug.sample_log: write the indices each rank consumed */
  int slow_rank;             /* debug.slow_rank: this rank sleeps debug.slow_ms a step (-1: none) */
  int slow_ms;
  int64_t overflow_step;     /* debug.overflow_step: this step's backward overflows on ... */
  int overflow_rank;         /* ... debug.overflow_rank (fp16's skip, for tests) */
  int die_unlogged;          /* debug.die_unlogged: rank 0 is SIGKILLed after committing this step, unlogged */
  int die_at_restore;        /* debug.die_at_restore: this rank is SIGKILLed as the first start's restore begins */
} cddp_train_config_t;

/* Defaults for every key. */
void cddp__config_defaults(cddp_train_config_t *c);
/* Loads path (NULL: defaults only), then applies overrides "key=value" in order. Errors
 * are one line naming the file, the line and the key: "configs/x.yaml:7: optim.lr: expected a
 * number > 0, got 'fast'", "unknown key 'optim.lrr'", "--set batch.global=abc: ...". */
cddp_result_t cddp__config_load(cddp_train_config_t *c, const char *path,
                               const char *const *overrides, int n_overrides);
/* Writes the resolved config as YAML (every key, schema order). */
cddp_result_t cddp__config_write(const cddp_train_config_t *c, FILE *f);
/* Hash of the resolved config text. */
uint64_t cddp__config_hash(const cddp_train_config_t *c);
/* Per-key hashes, in schema order, so a rank can name the first key that differs from
 * rank 0's: fills up to cap, returns the number of keys. */
int cddp__config_key_hashes(const cddp_train_config_t *c, uint64_t *out, int cap);
const char *cddp__config_key_name(int i);

#endif /* CDDP_TRAINER_CONFIG_H */

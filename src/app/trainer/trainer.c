/* trainer.c - the training loop of `cddp train`: micro-steps with gradient accumulation,
 * bucketed all-reduce overlapped with the last micro-step's backward, optimizer step,
 * checkpoints, sharded evaluation, agreed stop on SIGTERM. */
#include <cblas.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "comm/nccl.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/log.h"
#include "job/status.h"
#include "cddp/ckpt.h"
#include "trainer/device.h"
#include "trainer/ops.h"
#include "trainer/gemm.h"
#include "trainer/trainer.h"

volatile sig_atomic_t cddp__train_stop = 0;

volatile sig_atomic_t cddp__train_recovering = 0;
/* At a step boundary the loop saves a checkpoint and stops. While re-forming there is no step
 * to finish and the peers it waits for may never come: it leaves at once, and the newest
 * checkpoint is where `--resume-from latest` goes on. */
static void on_stop(int sig) {
  if (cddp__train_recovering) _exit(128 + sig);
  cddp__train_stop = sig;
}

static double secs(uint64_t ns) { return (double)ns * 1e-9; }

/* One line on stderr naming the cause, prefixed like every cddp train message. */
static void say(const char *what) { fprintf(stderr, "cddp train: %s\n", what); }

static cddp_result_t evaluate(trainer_t *t, uint64_t epoch, int epoch_end) {
  size_t n = t->task->n_eval, lo = n * (size_t)t->rank / (size_t)t->world,
         hi = n * (size_t)(t->rank + 1) / (size_t)t->world;
  double acc[2] = {0, 0}; /* correct, loss sum */
  t->task->ops->eval(t->task, lo, hi, acc);
  CDDP_CHECK(cddp_allreduce(cddp_world_comm(t->w), acc, acc, 2, CDDP_F64, CDDP_SUM));
  double units = (double)n * t->task->units;
  return cddp__metrics_eval(&t->metrics, epoch, epoch_end, t->step, t->task->has_accuracy ? acc[0] / units : -1,
                            acc[1] / units, (int)n);
}

/* Flushed at once (a SIGKILL keeps them); a write that fails (a full disk) stops the step. */
static cddp_result_t log_samples(trainer_t *t, const uint32_t *idx, int n) {
  errno = 0;
  for (int k = 0; k < n; k++)
    fprintf(t->sample_log, "%" PRIu64 " %" PRId64 " %u\n", t->sampler.epoch, t->step + 1, idx[k]);
  if (fflush(t->sample_log) == 0 && !ferror(t->sample_log)) return CDDP_OK;
  if (!errno) errno = EIO;
  return cddp__fail_errno(CDDP_SYSTEM, "cannot write %s/samples/rank%d.txt (debug.sample_log)", t->run_dir, t->rank);
}

/* The backward hook that hands DDP its buckets: through the comm stream's copies on a device
 * (grad_stage.c), else DDP's own. */
static void (*ddp_hook(const trainer_t *t))(void *, size_t) {
  return t->stage.dev ? cddp__grad_stage_ready : cddp_ddp_grad_ready;
}
static void *ddp_hook_ctx(trainer_t *t) { return t->stage.dev ? (void *)&t->stage : (void *)t->ddp; }

/* Accumulation adds each later micro-step's gradient, written to scratch, into grads as
 * backward finishes it: grads = g0 + g1 + ... rounded exactly as the all-reduce of the same
 * micro-batches on more ranks would round them, so 1 rank and 2 ranks train the same bits. */
static void add_ready(void *ctx, size_t offset) {
  trainer_t *t = ctx;
  if (t->staged) {
    t->dev->add_into(t->flat.grads + offset, t->scratch + offset, t->added_to - offset);
  } else {
    float *restrict g = t->grads;
    const float *restrict s = t->scratch;
    for (size_t i = offset; i < t->added_to; i++) g[i] += s[i];
  }
  t->added_to = offset;
  if (t->ddp_after_add) ddp_hook(t)(ddp_hook_ctx(t), offset);
}

/* The key of micro-step j's batch of the current global batch (+ ahead samples consumed). */
static void batch_key(const trainer_t *t, int j, uint64_t ahead, uint64_t key[CDDP_PREFETCH_KEY]) {
  key[0] = t->sampler.epoch, key[1] = t->sampler.consumed + ahead, key[2] = (uint64_t)j;
  key[3] = (uint64_t)t->rank, key[4] = (uint64_t)t->world;
}

/* Micro-step j's n samples (t->idx) into a slot, which it returns: the prefetch thread's when
 * it gathered this very batch, else the other slot, here. Then the next micro-step's batch
 * (the next global batch's first, unless that is in the next epoch) is asked of the thread,
 * into the slot this one does not read. */
static int gather_micro(trainer_t *t, int j, int n) {
  uint64_t key[CDDP_PREFETCH_KEY];
  batch_key(t, j, 0, key);
  int busy = -1, slot = t->cfg.prefetch ? cddp__prefetch_take(&t->prefetch, key, &busy) : -1;
  if (slot < 0) { /* any slot the thread is not writing: the last micro-step is done with its own */
    slot = busy >= 0 ? busy ^ 1 : t->slot ^ 1;
    t->task->ops->gather(t->task, slot, t->idx, n);
  }
  t->slot = slot;
  if (!t->cfg.prefetch) return slot;
  int micro = t->cfg.micro_batch, next_n;
  if (j + 1 < t->accum) {
    next_n = cddp__sampler_micro(&t->sampler, t->rank, t->world, j + 1, micro, t->next_idx);
    batch_key(t, j + 1, 0, key);
  } else {
    next_n = cddp__sampler_micro_next(&t->sampler, t->rank, t->world, 0, micro, t->next_idx);
    batch_key(t, 0, (uint64_t)cddp__sampler_batch_size(&t->sampler), key);
  }
  if (next_n >= 0) cddp__prefetch_request(&t->prefetch, key, slot ^ 1, t->next_idx, next_n);
  return slot;
}

/* One optimizer step: accum micro-steps, the last one's backward overlapped with the
 * all-reduce. Returns the step's record; *stop is the ranks' joint decision to stop. */
static cddp_result_t train_step(trainer_t *t, cddp_step_record_t *rec, int *stop, int *reform) {
  uint64_t t0 = cddp__now_ns(), data_ns = 0, comm_ns = 0;
  int micro = t->cfg.micro_batch, batch = cddp__sampler_batch_size(&t->sampler);
  double units = (double)batch * t->task->units; /* loss terms in the global batch */
  float scale = (float)(1.0 / units); /* SUM over ranks of (sum over terms)/units = the mean */
  /* loss sum, stop votes, votes to re-form at this step's end (a node waits to be taken in) */
  double stats[4] = {0, cddp__train_stop ? 1 : 0, cddp_world_should_reform(t->w) ? 1 : 0, 0};
  /* fp16: the loss scaled by S so backward's fp16 products keep small gradients; 1/S comes off
   * each piece before it leaves for the all-reduce (grad_stage.c), or off the whole buffer */
  float S = t->scaler.on ? t->scaler.scale : 1.0f, bscale = scale * S;
  if (t->scaler.on && t->cfg.overflow_step == t->step + 1 && t->cfg.overflow_rank == t->rank)
    bscale = INFINITY; /* a test's overflow: this rank's gradients are inf or NaN */
  rec->epoch = t->sampler.epoch;
  /* every rank's timings of the last log.rank_every steps, at the start of a step: a peer lost
   * in this all-gather fails a step that has not begun (it is redone), never one that is done */
  rec->ranks = NULL;
  if (t->step > 0 && t->step % t->ranks.every == 0) { /* the same steps on every rank */
    CDDP_CHECK(cddp__ranks_gather(&t->ranks, cddp_world_comm(t->w)));
    rec->ranks = &t->ranks;
  }
  CDDP_CHECK(cddp__overlap_trial_begin(t));
  for (int j = 0; j < t->accum; j++) {
    cddp_progress_alive(); /* alive between collectives: a long accumulation is not a hang */
    uint64_t td = cddp__now_ns();
    int n = cddp__sampler_micro(&t->sampler, t->rank, t->world, j, micro, t->idx);
    int slot = gather_micro(t, j, n);
    if (t->sample_log) CDDP_CHECK(log_samples(t, t->idx, n));
    data_ns += cddp__now_ns() - td;
    int last = j == t->accum - 1;
    /* ZeRO-1 reduce-scatters the whole buffer after backward: no buckets */
    int buckets = last && !t->zero1.on;
    if (buckets) cddp_ddp_begin(t->ddp);
    if (buckets && t->stage.dev) cddp__grad_stage_begin(&t->stage, 1.0f / S);
    /* staged and compressed: the buckets start once the gradients are on the host, after backward */
    int hooks = buckets && (!t->staged || t->stage.dev);
    /* micro-steps after the first write their own gradient and add it (see add_ready) */
    t->task->ops->bind(t->task, cddp__train_model_params(t), j == 0 ? cddp__train_model_grads(t) : t->scratch);
    stats[0] += t->task->ops->forward(t->task, slot, n);
    if (j == 0) {
      t->task->ops->backward(t->task, bscale, 0, hooks ? ddp_hook(t) : NULL, ddp_hook_ctx(t));
    } else {
      t->added_to = t->n_params;
      t->ddp_after_add = hooks;
      t->task->ops->backward(t->task, bscale, 0, add_ready, t);
    }
  }
  /* staged, whole: a world of one has nothing to combine (unless compression rounds the
   * gradients); uncompressed in a larger world the buckets crossed during backward */
  int staging = t->staged && !t->stage.dev && (t->world > 1 || t->cfg.compress != CDDP_COMPRESS_NONE);
  if (t->scaler.on && !t->stage.dev) t->dev->scale(t->flat.grads, 1.0f / S, t->n_params);
  if (staging) t->dev->to_host(t->grads, t->flat.grads, t->n_params * sizeof(float));
  if (t->cfg.slow_rank == t->rank && t->cfg.slow_ms > 0) usleep((useconds_t)t->cfg.slow_ms * 1000u); /* a test's straggler */
  uint64_t tc = cddp__now_ns();
  if (t->stage.dev) CDDP_CHECK(cddp__grad_stage_finish(&t->stage));
  else if (!t->zero1.on) CDDP_CHECK(cddp_ddp_finish(t->ddp));
  if (staging) t->dev->to_device(t->flat.grads, t->grads, t->n_params * sizeof(float));
  /* fp16: an inf or a NaN in this rank's gradients (after the all-reduce: anyone's) is counted
   * with the step's votes, so every rank skips the same step */
  if (t->scaler.on) stats[3] = isfinite(t->dev->sumsq(t->flat.grads, t->n_params)) ? 0 : 1;
  CDDP_CHECK(cddp_allreduce(cddp_world_comm(t->w), stats, stats, t->scaler.on ? 4 : 3, CDDP_F64, CDDP_SUM));
  int skip = t->scaler.on && cddp__loss_scale_update(&t->scaler, stats[3] > 0);
  rec->loss_scale = t->scaler.on ? S : 0, rec->skipped = skip;
  comm_ns = cddp__now_ns() - tc;
  float lr = cddp__sched_lr(&t->sched, t->step);
  uint64_t to = cddp__now_ns(), optim_ns, zero1_comm_ns = 0;
  if (t->zero1.on) {
    CDDP_CHECK(cddp__zero1_step(t, lr, &rec->grad_norm, &zero1_comm_ns, &optim_ns));
    comm_ns += zero1_comm_ns;
  } else if (skip) { /* GradScaler's skip: the optimizer (its step count too) waits for a good step */
    rec->grad_norm = 0;
    optim_ns = 0;
  } else if (t->staged) {
    rec->grad_norm = t->dev->optim_step(&t->dopt, t->flat.params, t->flat.grads, lr);
    t->opt.t = t->dopt.t;
    optim_ns = cddp__now_ns() - to;
  } else {
    rec->grad_norm = cddp__optim_step(&t->opt, t->params, t->grads, lr);
    optim_ns = cddp__now_ns() - to;
  }
  cddp__sampler_advance(&t->sampler);
  t->step++;
  cddp_progress_step((uint64_t)t->step); /* its agent tells `cddp status` */
  uint64_t dt = cddp__now_ns() - t0;
  cddp__overlap_trial_end(t, dt);
  rec->step = t->step, rec->total = t->total_steps, rec->epochs = t->epochs;
  rec->loss = stats[0] / units, rec->lr = lr, rec->samples = batch, rec->units = t->task->units;
  rec->step_s = secs(dt), rec->comm_s = secs(comm_ns), rec->data_s = secs(data_ns);
  rec->compute_s = secs(dt - comm_ns - data_ns);
  cddp__ranks_add(&t->ranks, secs(dt - comm_ns - data_ns - optim_ns), secs(data_ns), secs(optim_ns), secs(comm_ns));
  cddp_ddp_stats_t st;
  cddp_ddp_stats(t->ddp, &st, 1);
  rec->bytes_sent = st.wire_bytes;
  rec->compression = st.bytes ? (double)t->n_params * sizeof(float) / (double)st.bytes : 1.0;
  if (t->zero1.on) /* reduce-scatter and all-gather: each rank sends world-1 shards in each */
    rec->bytes_sent = (t->zero1.shared ? 1 : 2) * (uint64_t)(t->world - 1) * t->zero1.per * sizeof(float), rec->compression = 1.0;
  *stop = stats[1] > 0;
  *reform = stats[2] > 0;
  return CDDP_OK;
}

/* A collective of the set-up: a peer lost meanwhile (recoverable under --restart-mode replace)
 * sets *lost and is not an error here; anything else is returned. */
static cddp_result_t tolerate_lost_peer(const trainer_t *t, cddp_result_t r, int *lost) {
  if (r == CDDP_OK || !cddp__train_recoverable(t, r)) return r;
  *lost = 1;
  return CDDP_OK;
}

/* The start line's word on when the gradients are combined: the way, or the ways the first
 * steps' trial times (overlap_trial.c). */
static const char *when_reduced(const trainer_t *t) {
  const cddp__overlap_trial_t *o = &t->overlap_trial;
  if (t->zero1.on) return "after backward";
  if (o->ways >> CDDP__WAY_SHARDED & 1)
    return (o->ways & 3) == 3 ? "overlapped with backward or after it, or ZeRO-1 sharing the weights, whichever the first steps time fastest"
           : t->overlap       ? "overlapped with backward, or ZeRO-1 sharing the weights, whichever the first steps time faster"
                              : "after backward, or ZeRO-1 sharing the weights, whichever the first steps time faster";
  if (o->active) return "overlapped with backward or after it, whichever the first steps time faster";
  return t->overlap ? "overlapped with backward" : "after backward";
}

/* The start line's word on compressed gradients ("" when they travel whole): a compressed run
 * converges differently, and its line must not look like an uncompressed one. */
static const char *compressed(const trainer_t *t, char *buf, size_t size) {
  static const char *const names[] = {"", "bf16", "sign (1 bit, error feedback)", "fp16"};
  int k = t->cfg.compress;
  if (k == CDDP_COMPRESS_POWERSGD)
    snprintf(buf, size, ", gradients compressed: PowerSGD rank %d (error feedback)", t->cfg.powersgd_rank);
  else if (k > 0 && k < (int)(sizeof names / sizeof names[0]))
    snprintf(buf, size, ", gradients compressed: %s", names[k]);
  else
    buf[0] = '\0';
  return buf;
}

static cddp_result_t setup(trainer_t *t) {
  cddp_train_config_t *c = &t->cfg;
  /* these two fail alike on every rank: only rank 0 need say so */
  int replacement = cddp_world_replacement(t->w); /* its peers are mid-run: only the state sync */
  /* a peer lost during the first start's collectives (--restart-mode replace): the rest of
   * the set-up is local, then this rank recovers as it would mid-run (from disk or the init
   * when no rank got as far as holding the state) instead of dying and costing a restart */
  int lost = 0;
  t->same_error_everywhere = 1;
  if (!replacement) CDDP_CHECK(tolerate_lost_peer(t, cddp__train_check_configs(t), &lost));
  CDDP_CHECK(cddp__train_batch_split(t));
  t->same_error_everywhere = 0;
  int threads = cddp__train_blas_threads(t);
  openblas_set_num_threads(threads);
  if (c->precision == CDDP_PRECISION_BF16) cddp__gemm_bf16_set_threads(threads);
  if (c->precision == CDDP_PRECISION_FP16) cddp__loss_scale_init(&t->scaler, c->loss_scale, c->loss_scale_interval);
  CDDP_CHECK(cddp__train_make_run_dir(t));
  CDDP_CHECK(cddp__task_create(c, c->micro_batch, t->dev, &t->task));
  t->n_params = t->task->ops->param_count(t->task);
  CDDP_CHECK(cddp__zero1_choose(t));
  t->idx = malloc((size_t)c->micro_batch * sizeof *t->idx);
  t->next_idx = malloc((size_t)c->micro_batch * sizeof *t->next_idx);
  if (!t->idx || !t->next_idx) return cddp__fail(CDDP_SYSTEM, "out of memory");
  if (c->prefetch) CDDP_CHECK(cddp__prefetch_start(&t->prefetch, t->task, c->micro_batch));
  /* before the DDP: sign + vsync writes its v, and the buckets are slices of flat.grads */
  if (!t->zero1.on && !t->zero1.candidate) {
    CDDP_CHECK(cddp__train_make_flat(t));
    if (!t->staged) t->params = t->flat.params; /* staged: a host copy (make_flat) */
  } else { /* ZeRO-1 moves its parameters (shared memory, re-sharding): buffers of its own */
    /* it all-gathers into them: one shard per rank, the last padded */
    t->params = aligned_alloc(64, (cddp__train_param_slots(t) * sizeof(float) + 63) / 64 * 64);
    if (!t->params) return cddp__fail(CDDP_SYSTEM, "out of memory");
    memset(t->params + t->n_params, 0, (cddp__train_param_slots(t) - t->n_params) * sizeof(float));
    CDDP_CHECK(cddp__optim_init(&t->opt, &c->optim, t->zero1.on ? t->zero1.len : t->n_params));
  }
  if (!lost) CDDP_CHECK(tolerate_lost_peer(t, cddp__train_make_ddp(t), &lost)); /* no ddp: recovery builds it */
  CDDP_CHECK(cddp__train_alloc_scratch(t));
  t->task->ops->bind(t->task, cddp__train_model_params(t), cddp__train_model_grads(t));
  t->task->ops->init_params(t->task, c->seed);
  cddp__train_state_pull(t); /* staged: rank 0's init is broadcast from the host copy */
  CDDP_CHECK(cddp__sampler_init(&t->sampler, c->seed, t->task->n_train, c->global_batch, c->drop_last));
  int64_t per_epoch = cddp__sampler_steps_per_epoch(&t->sampler);
  t->total_steps = c->max_steps > 0 ? c->max_steps : per_epoch * c->epochs;
  t->epochs = (int)((t->total_steps + per_epoch - 1) / (per_epoch > 0 ? per_epoch : 1));
  t->sched = (cddp_sched_spec_t){c->sched, cddp__train_scaled_lr(c), c->min_lr, c->warmup_steps, t->total_steps};
  CDDP_CHECK(cddp__sched_check(&t->sched));
  int resumed = replacement; /* a replacement appends to the dead rank's files */
  if (!replacement && !lost) /* every rank starts from rank 0's parameters, as DDP does */
    CDDP_CHECK(tolerate_lost_peer(t, cddp_ddp_broadcast(t->ddp, t->params, 0), &lost));
  if (!replacement && !lost && t->rank > 0 && t->rank == t->cfg.die_at_restore &&
      cddp_world_env(t->w)->restart_count == 0)
    raise(SIGKILL); /* a test's kill while rank 0 broadcasts the restore's verdict */
  if (!replacement && !lost) /* its verdict and state are broadcast from rank 0: a peer may die there too */
    CDDP_CHECK(tolerate_lost_peer(t, cddp__train_restore(t, t->opts->resume, NULL, &resumed), &lost));
  if (!replacement && !lost) {
    t->has_state = 1;
    CDDP_CHECK(cddp__zero1_share(t)); /* every rank holds the same weights now */
    /* resuming a finished run: its folder (config.yaml, metrics, the end in its record) stays as
     * the run left it, and the job ends at once with rank 0's one line, exit 0 */
    t->finished = resumed && t->step >= t->total_steps;
    if (t->finished) return CDDP_OK;
    cddp__train_state_push(t); /* staged: the agreed state, restored or initial, to the device */
  }
  char path[700];
  snprintf(path, sizeof path, "%s/metrics.jsonl", t->run_dir);
  /* resumed from a checkpoint: the lines of later steps go, as they are trained again */
  if (t->rank == 0 && resumed && !replacement) CDDP_CHECK(cddp__metrics_trim(path, t->step, t->step, NULL));
  CDDP_CHECK(cddp__metrics_open(&t->metrics, t->rank == 0 ? path : NULL, resumed, c->log_every));
  /* the file ends at the start's step (cut to it on a resume); a replacement's is the dead
   * writer's, taken over once the state is synced */
  if (!replacement) t->metrics.logged = t->step;
  cddp__ranks_init(&t->ranks, c->rank_every, c->straggler_pct, c->straggler_windows);
  if (c->sample_log) {
    snprintf(path, sizeof path, "%s/samples/rank%d.txt", t->run_dir, t->rank);
    t->sample_log = fopen(path, resumed ? "a" : "w");
    if (!t->sample_log) return cddp__fail_errno(CDDP_SYSTEM, "cannot open sample log %s", path);
  }
  /* only now: a start that failed (a bad --resume-from, no data) leaves the folder's config as it was */
  if (t->rank == 0 && !replacement && !t->refused[0]) CDDP_CHECK(cddp__train_write_config(t));
  /* a replacement rank 0 too: it is the one that will say how the run ended */
  if (t->rank == 0 && !t->refused[0]) cddp__train_record_endpoint(t);
  cddp__train_publish_worlds(t);
  /* a first start that formed late (cddp_world_replacement) still opens the job's log */
  char squeezed[96];
  if (t->rank == 0 && !cddp_world_env(t->w)->replacement)
    fprintf(stderr,
            "cddp train: %s, %zu parameters; world %d (%s), global batch %d = micro %d x %d ranks x %d accumulation; "
            "lr %.4g (%s scaling from batch %d); %" PRId64 " steps (%" PRId64 "/epoch); %d BLAS thread(s)/rank; "
            "%s %s%s; run %s\n",
            t->task->name, t->n_params, t->world, cddp_comm_transport(cddp_world_comm(t->w)),
            c->global_batch, c->micro_batch, t->world, t->accum, t->sched.lr,
            c->lr_scaling == CDDP_LR_SCALE_NONE ? "no" : c->lr_scaling == CDDP_LR_SCALE_LINEAR ? "linear" : "sqrt",
            c->ref_batch > 0 ? c->ref_batch : c->global_batch, t->total_steps, per_epoch, threads,
            t->zero1.shared ? "ZeRO-1 (optimizer state sharded, one copy of the weights in shared memory): reduce-scatter"
            : t->zero1.on ? "ZeRO-1 (optimizer state sharded): reduce-scatter + all-gather" : "all-reduce",
            when_reduced(t), compressed(t, squeezed, sizeof squeezed), t->run_dir);
  if (t->rank == 0 && t->staged && !cddp_world_env(t->w)->replacement)
    fprintf(stderr, "cddp train: the model trains on %s: its state there, batches copied in%s\n", t->device_name,
            t->stage.direct  ? ", gradients all-reduced by NCCL on the device bucket by bucket during backward (comm stream)"
            : t->world == 1  ? ""
            : t->stage.dev   ? ", gradients copied to host memory bucket by bucket during backward (comm stream) and all-reduced there"
                             : ", gradients all-reduced through host memory after backward");
  if (replacement) return cddp__train_join_as_replacement(t);
  if (lost) {
    CDDP_INFO(CDDP_SUB_TRAIN, "a peer was lost while the job started (%s): recovering", cddp_last_error());
    return cddp__train_recover(t, cddp__now_ns());
  }
  return CDDP_OK;
}

static void teardown(trainer_t *t, int clean) {
  if (t->sample_log) fclose(t->sample_log);
  cddp__metrics_close(&t->metrics);
  cddp__ranks_free(&t->ranks);
  cddp__train_destroy_ddp(t);
  if (t->staged) { /* the device's state; params and opt are host copies */
    cddp__flat_destroy(&t->flat, &t->dopt);
    free(t->params);
    t->params = NULL;
  } else if (t->flat.base) { /* the parameters and the moments were in it */
    cddp__flat_destroy(&t->flat, &t->opt);
    t->params = NULL;
  }
  cddp__optim_free(&t->opt);
  if (t->cfg.prefetch)
    CDDP_INFO(CDDP_SUB_TRAIN, "data.prefetch: %" PRIu64 " of %" PRIu64 " micro-batches were gathered ahead by the thread",
              t->prefetch.hits, t->prefetch.takes);
  cddp__prefetch_stop(&t->prefetch); /* before the task its thread gathers into */
  cddp__sampler_free(&t->sampler);
  if (t->task) t->task->ops->destroy(t->task);
  cddp__zero1_free_params(t);
  if (t->staged && t->scratch) t->dev->release(t->scratch);
  else free(t->scratch);
  free(t->idx), free(t->next_idx);
  cddp_world_leave(t->w, clean);
}

/* rank 0's last line: this process's own steps (a resumed run's earlier ones are not), its
 * wall time, and the rate over the training steps alone (no start-up, checkpoints, evaluation) */
static void say_done(trainer_t *t) {
  const cddp_metrics_t *m = &t->metrics;
  int64_t from = m->first_step >= 0 ? m->first_step : t->step, redone = m->steps - (t->step - from);
  char span[128] = "";
  if (from > 0 && redone > 0)
    snprintf(span, sizeof span, " (steps %" PRId64 "-%" PRId64 " of %" PRId64 ", %" PRId64 " redone)", from + 1, t->step,
             t->total_steps, redone);
  else if (from > 0)
    snprintf(span, sizeof span, " (steps %" PRId64 "-%" PRId64 " of %" PRId64 ")", from + 1, t->step, t->total_steps);
  else if (redone > 0)
    snprintf(span, sizeof span, " (%" PRId64 " redone)", redone);
  printf("cddp train: done: %" PRId64 " steps%s in %.1f s, %.2f s of it in training steps at %.0f %s/s; exposed "
         "communication %.1f%% of step time; checkpoint %s\n",
         m->steps, span, secs(cddp__now_ns() - t->t_start), m->step_s, cddp__metrics_rate(m) * t->task->units,
         t->task->units > 1 ? "tokens" : "samples", 100 * cddp__metrics_comm_fraction(m), t->last_ckpt);
}

static int run_loop(trainer_t *t) {
  int stop = 0, reform = 0;
  while (t->step < t->total_steps && !stop) {
    cddp_step_record_t rec = {0};
    uint64_t epoch_before = t->sampler.epoch;
    if (reform) { /* every rank voted on it in the last step: re-form at this boundary */
      reform = 0;
      cddp_result_t rr = cddp__train_reform(t);
      if (rr != CDDP_OK) {
        cddp__metrics_break_line(&t->metrics);
        if (cddp_world_gone(t->w) == 1) fprintf(stderr, "cddp train: rank %d: %s\n", t->rank, cddp_last_error());
        else if (cddp_world_gone(t->w)) fprintf(stderr, "cddp train: %s\n", cddp_last_error());
        else fprintf(stderr, "cddp train: rank %d: re-forming after step %" PRId64 ": %s\n", t->rank, t->step,
                     cddp_last_error());
        return 1;
      }
    }
    cddp_result_t r = train_step(t, &rec, &stop, &reform);
    if (r != CDDP_OK && cddp__train_recoverable(t, r)) {
      uint64_t t_fail = cddp__now_ns();
      char why[512];
      snprintf(why, sizeof why, "%s", cddp_last_error());
      CDDP_INFO(CDDP_SUB_TRAIN, "step %" PRId64 " failed (%s): recovering in place", t->step + 1, why);
      snprintf(t->failure, sizeof t->failure, "step %" PRId64 ": %.150s", t->step + 1, why);
      if (cddp__train_recover(t, t_fail) == CDDP_OK) { /* redo the interrupted step */
        t->failure[0] = '\0';
        continue;
      }
      cddp__metrics_break_line(&t->metrics);
      if (cddp_world_gone(t->w)) { /* dropped, or the job stops: the one line that says why */
        if (cddp_world_gone(t->w) == 1) fprintf(stderr, "cddp train: rank %d: %s\n", t->rank, cddp_last_error());
        else fprintf(stderr, "cddp train: %s\n", cddp_last_error());
        return 1;
      }
      fprintf(stderr, "cddp train: rank %d: step %" PRId64 ": %s; in-place recovery failed: %s\n", t->rank,
              t->step + 1, why, cddp_last_error());
      return 1;
    }
    if (r != CDDP_OK) {
      cddp__metrics_break_line(&t->metrics);
      fprintf(stderr, "cddp train: rank %d: step %" PRId64 ": %s\n", t->rank, t->step + 1, cddp_last_error());
      snprintf(t->failure, sizeof t->failure, "step %" PRId64 ": %.150s", t->step + 1, cddp_last_error());
      if (cddp__train_stop && cddp__train_save(t, 0) == CDDP_OK && t->rank == 0)
        fprintf(stderr, "cddp train: saved %s before stopping\n", t->last_ckpt);
      return cddp__train_stop ? 128 + (int)cddp__train_stop : 1;
    }
    if (t->rank == 0 && t->step == t->cfg.die_unlogged && !cddp_world_replacement(t->w) &&
        cddp_world_env(t->w)->restart_count == 0)
      raise(SIGKILL); /* a test's kill between the step's commit and its metrics line */
    if (cddp__metrics_step(&t->metrics, &rec) != CDDP_OK) { /* before this step's checkpoint: resumable */
      cddp__metrics_break_line(&t->metrics);
      fprintf(stderr, "cddp train: rank 0: step %" PRId64 ": %s; stopping (--resume-from latest continues the run "
              "once there is room)\n", t->step, cddp_last_error());
      return 1;
    }
    int epoch_done = t->sampler.epoch != epoch_before || t->step == t->total_steps;
    int due = (t->cfg.ckpt_every > 0 && t->step % t->cfg.ckpt_every == 0) || t->step == t->total_steps || stop;
    cddp_result_t sr = due ? cddp__train_save_agreed(t) : CDDP_OK;
    /* a rank lost in the save (ZeRO-1's gather of the shards, the agreement): recovered in place;
     * under ZeRO-1 the lost rank took its shard and the recovery goes back to the newest
     * checkpoint (earlier than this step), from where the loop goes on */
    if (sr != CDDP_OK) {
      char why[512]; /* before cddp__train_recoverable, which asks the store and clears the error */
      snprintf(why, sizeof why, "%s", cddp_last_error());
      int recoverable = cddp__train_recoverable(t, sr);
      if (recoverable && cddp__train_recover(t, cddp__now_ns()) == CDDP_OK) continue;
      cddp__metrics_break_line(&t->metrics);
      fprintf(stderr, "cddp train: rank %d: checkpoint at step %" PRId64 ": %s%s%s\n", t->rank, t->step, why,
              recoverable ? "; in-place recovery failed: " : "", recoverable ? cddp_last_error() : "");
      snprintf(t->failure, sizeof t->failure, "checkpoint at step %" PRId64 ": %.150s", t->step, why);
      return 1;
    }
    int eval = (epoch_done && t->cfg.eval_every_epoch) || (t->step == t->total_steps && t->cfg.eval_at_end);
    int epoch_end = t->sampler.epoch != epoch_before;
    cddp_result_t er = eval && !stop ? evaluate(t, epoch_before, epoch_end) : CDDP_OK;
    while (er != CDDP_OK && cddp__train_recoverable(t, er) && (er = cddp__train_recover(t, cddp__now_ns())) == CDDP_OK)
      er = evaluate(t, epoch_before, epoch_end); /* every survivor failed in it: all redo it */
    if (er != CDDP_OK) {
      if (cddp_world_gone(t->w)) fprintf(stderr, "cddp train: %s\n", cddp_last_error());
      else fprintf(stderr, "cddp train: rank %d: evaluation: %s\n", t->rank, cddp_last_error());
      return 1;
    }
  }
  if (reform && !stop && cddp__train_reform(t) != CDDP_OK) { /* a node came at the last step: it ends with us */
    cddp__metrics_break_line(&t->metrics);
    fprintf(stderr, "cddp train: rank %d: re-forming after the last step: %s\n", t->rank, cddp_last_error());
    return 1;
  }
  cddp__metrics_break_line(&t->metrics);
  if (stop) {
    if (t->rank == 0)
      fprintf(stderr, "cddp train: stopped by signal at step %" PRId64 "; resume with --resume-from latest (saved %s)\n",
              t->step, t->last_ckpt);
    return 128 + (cddp__train_stop ? (int)cddp__train_stop : SIGTERM);
  }
  if (t->rank == 0 && !t->finished) say_done(t);
  return 0;
}

/* Rank 0: how the run ended, into its folder's record, for `cddp status RUN_DIR` once the job
 * is over (a rank killed outright says nothing: its record keeps no end). */
static void say_ended(trainer_t *t, int rc) {
  cddp_result_t r;
  if (rc == 0) r = cddp__endpoint_end(t->run_dir, "done at step %" PRId64, t->step);
  else if (t->failure[0]) /* the cause, not the stop that followed it */
    r = cddp__endpoint_end(t->run_dir, "failed at %s (exit code %d)", t->failure, rc);
  else if (rc > 128 && sigabbrev_np(rc - 128))
    r = cddp__endpoint_end(t->run_dir, "stopped by signal SIG%s at step %" PRId64, sigabbrev_np(rc - 128), t->step);
  else r = cddp__endpoint_end(t->run_dir, "failed (exit code %d) at step %" PRId64, rc, t->step);
  if (r != CDDP_OK) CDDP_WARN("%s (cddp status RUN_DIR)", cddp_last_error());
  cddp_store_t *s = cddp_world_store(t->w); /* the job's events go with its store: kept here */
  if (s) cddp_store_set_timeout(s, CDDP__EVENTS_SAVE_MS);
  if (s && cddp__events_save(t->run_dir, s) != CDDP_OK)
    CDDP_INFO(CDDP_SUB_TRAIN, "the job's events are not kept in %s: %s", t->run_dir, cddp_last_error());
}

int cddp__train_main(const cddp_train_opts_t *o) {
  trainer_t *t = calloc(1, sizeof *t);
  if (!t) return 1;
  t->opts = o;
  t->t_start = cddp__now_ns();
  if (cddp__config_load(&t->cfg, o->config_path, o->sets, o->n_sets) != CDDP_OK) {
    say(cddp_last_error());
    free(t);
    return 2;
  }
  cddp_device_choice_t device;
  if (cddp__device_resolve((cddp_device_kind_t)t->cfg.device, &device) != CDDP_OK) {
    say(cddp_last_error());
    free(t);
    return 2;
  }
  t->device = device;
  t->dev = cddp__device_ops(&device);
  t->staged = t->dev != &cddp__ops_cpu;
  if (t->cfg.precision == CDDP_PRECISION_FP16 && !t->staged) { /* before joining: every rank says the same */
    say("train.precision fp16 runs on a device only (train.device cuda): the CPU trainer has no fp16 products; use "
        "bf16 or fp32 there");
    free(t);
    return 2;
  }
  if (device.emulated) snprintf(t->device_name, sizeof t->device_name, "the emulated device");
  else snprintf(t->device_name, sizeof t->device_name, "GPU %s", device.physical);
  cddp_comm_config_t cc;
  cddp_comm_config_default(&cc);
  if (o->backend) cc.backend = o->backend;
  if (o->transport) cc.transport = o->transport;
  if (!strcasecmp(cc.backend, "nccl")) {
    if (cddp__nccl_available() != CDDP_OK) { /* a usage error: before joining */
      say(cddp_last_error());
      free(t);
      return 2;
    }
    /* NCCL takes device buffers only: it all-reduces DDP's gradients on a communicator of its
     * own (ddp.backend nccl), and the world's stays native for the host's collectives */
    t->nccl_asked = 1, cc.backend = "native";
  }
  if (t->cfg.ddp_backend == CDDP_DDP_BACKEND_NCCL && t->staged && !device.emulated && !device.sharing &&
      cddp__nccl_available() != CDDP_OK) { /* this rank's own reason, before joining */
    fprintf(stderr, "cddp train: ddp.backend nccl: %s\n", cddp_last_error());
    free(t);
    return 2;
  }
  if (cddp_world_join(&t->w, &cc) != CDDP_OK) {
    say(cddp_last_error());
    int rc = cddp_world_gone(t->w) == 3 ? 0 : 1; /* a newcomer that came after the last step: nothing to do */
    cddp_world_leave(t->w, 0);
    free(t);
    return rc;
  }
  t->rank = cddp_world_rank(t->w), t->world = cddp_world_size(t->w);
  struct sigaction sa = {.sa_handler = on_stop};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  int rc;
  cddp_result_t r = setup(t);
  if (r != CDDP_OK) {
    /* an error every rank shares is said once: by rank 0, and under `cddp run` also by each
     * node's local rank 0, as each agent's log is its own (srun and mpirun merge theirs) */
    int node_says = cddp_world_env(t->w)->source == CDDP_ENV_AGENT && cddp_world_env(t->w)->local_rank == 0;
    if (t->rank == 0 || node_says || !t->same_error_everywhere) say(cddp_last_error());
    else usleep(200000); /* the rank that says it fails first: its launcher names it, with its line */
    rc = r == CDDP_INVALID_ARG || r == CDDP_NOT_FOUND ? 2 : 1;
  } else {
    rc = run_loop(t);
  }
  if (t->endpoint_mine) say_ended(t, rc);
  teardown(t, rc == 0);
  free(t);
  return rc;
}

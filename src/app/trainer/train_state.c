/* train_state.c - a run's state in and out of checkpoints: weights, optimizer moments, step,
 * sampler position; rank 0 reads a checkpoint and every rank receives it over the comm, so
 * ranks need no shared file system. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/durable.h"
#include "common/log.h"
#include "cddp/ckpt.h"
#include "ddp/ddp_compress.h"
#include "trainer/trainer.h"

#define STATE_FORMAT "cddp-train-1"

/* Tensor views of the model's parameters laid over buf (params or a moment buffer). */
static cddp_tensor_view_t *views(const trainer_t *t, const float *buf, const char *prefix,
                                 char (*names)[96]) {
  int n = t->task->ops->n_params(t->task);
  cddp_tensor_view_t *v = calloc((size_t)n, sizeof *v);
  if (!v) return NULL;
  for (int i = 0; i < n; i++) {
    const cddp_param_info_t *p = t->task->ops->param(t->task, i);
    snprintf(names[i], sizeof names[i], "%s%s", prefix, p->name);
    v[i].name = names[i];
    v[i].ndim = p->ndim;
    memcpy(v[i].shape, p->shape, sizeof v[i].shape);
    v[i].data = buf + p->offset;
  }
  return v;
}

/* Every rank's error-feedback residual (ddp.compress: sign) for rank 0 to save, world x
 * n_params floats; NULL when there is none or the communicator cannot be trusted. */
static float *gather_residuals(trainer_t *t, int healthy, cddp_result_t *r) {
  float *res = t->ddp ? cddp_ddp_residual(t->ddp) : NULL;
  *r = CDDP_OK;
  if (!res) return NULL;
  if (!healthy) {
    if (t->rank == 0) CDDP_WARN("checkpoint without the error-feedback residuals: a peer is gone");
    return NULL;
  }
  size_t len = cddp__ddp_residual_len(t->ddp);
  float *all = malloc((size_t)t->world * len * sizeof *all);
  if (!all) {
    *r = cddp__fail(CDDP_SYSTEM, "checkpoint: out of memory");
    return NULL;
  }
  *r = cddp_allgather(cddp_world_comm(t->w), res, all, len, CDDP_F32);
  if (*r != CDDP_OK) free(all), all = NULL;
  return all;
}

cddp_result_t cddp__train_save(trainer_t *t, int healthy) {
  cddp_result_t r;
  cddp__train_state_pull(t); /* staged: written from the device's state, through to_host */
  float *residuals = gather_residuals(t, healthy, &r);
  /* ZeRO-1: the moments whole on rank 0, as the unsharded run saves them, for any world to resume */
  if (r == CDDP_OK && t->zero1.on && !healthy)
    r = cddp__fail(CDDP_REMOTE, "no checkpoint: a peer is gone, and with ddp.shard_optimizer its shard of the "
                   "optimizer state with it");
  else if (r == CDDP_OK && t->zero1.on)
    r = cddp__zero1_hold_whole(t);
  float *opt_m = t->zero1.on ? t->zero1.whole_m : t->opt.m, *opt_v = t->zero1.on ? t->zero1.whole_v : t->opt.v;
  if (r != CDDP_OK || t->rank != 0) {
    free(residuals);
    cddp__zero1_drop_whole(t);
    return r;
  }
  int n = t->task->ops->n_params(t->task), nres = residuals ? t->world : 0;
  char(*names)[96] = calloc((size_t)n * 3 + (size_t)nres, sizeof *names);
  cddp_tensor_view_t *w = names ? views(t, t->params, "", names) : NULL;
  cddp_tensor_view_t *m = opt_m && names ? views(t, opt_m, "optim.m.", names + n) : NULL;
  cddp_tensor_view_t *v = opt_v && names ? views(t, opt_v, "optim.v.", names + 2 * n) : NULL;
  cddp_tensor_view_t *state = calloc((size_t)n * 2 + (size_t)nres + 1, sizeof *state);
  if (!names || !w || !state || (t->opt.m && !m) || (t->opt.v && !v)) {
    r = cddp__fail(CDDP_SYSTEM, "checkpoint: out of memory");
    goto out;
  }
  int ns = 0;
  for (int i = 0; m && i < n; i++) state[ns++] = m[i];
  for (int i = 0; v && i < n; i++) state[ns++] = v[i];
  for (int q = 0; q < nres; q++) {
    snprintf(names[3 * n + q], sizeof names[0], "ddp.residual.rank%d", q);
    size_t len = cddp__ddp_residual_len(t->ddp);
    state[ns++] = (cddp_tensor_view_t){names[3 * n + q], 1, {(int64_t)len}, residuals + (size_t)q * len};
  }
  char kv[13][64];
  snprintf(kv[0], 64, "%" PRId64, t->step);
  snprintf(kv[1], 64, "%" PRIu64, t->sampler.epoch);
  snprintf(kv[2], 64, "%" PRIu64, t->sampler.consumed);
  snprintf(kv[3], 64, "%" PRIu64, t->cfg.seed);
  snprintf(kv[4], 64, "%016" PRIx64, cddp__config_hash(&t->cfg));
  snprintf(kv[5], 64, "%d", t->world);
  snprintf(kv[6], 64, "%d", t->cfg.global_batch);
  snprintf(kv[7], 64, "%" PRId64, t->opt.t);
  snprintf(kv[8], 64, "%" PRId64, t->total_steps);
  snprintf(kv[9], 64, "%zu", t->n_params);
  snprintf(kv[10], 64, "%d", nres);
  snprintf(kv[11], 64, "%.9g", (double)t->scaler.scale);
  snprintf(kv[12], 64, "%" PRId64, t->scaler.good);
  const cddp_meta_kv_t meta[] = {
      {"format", STATE_FORMAT},     {"step", kv[0]},         {"epoch", kv[1]},
      {"samples_consumed", kv[2]},  {"seed", kv[3]},         {"config_hash", kv[4]},
      {"world_size", kv[5]},        {"global_batch", kv[6]}, {"optim_steps", kv[7]},
      {"total_steps", kv[8]},       {"param_count", kv[9]},  {"cddp_version", cddp_version()},
      {"residual_ranks", kv[10]},
      {"loss_scale", kv[11]},       {"loss_scale_good", kv[12]}, /* fp16 only: the last two */
  };
  cddp_ckpt_payload_t p = {w, n, state, ns, meta, (int)CDDP_ARRAY_LEN(meta) - (t->scaler.on ? 0 : 2)};
  char root[600];
  snprintf(root, sizeof root, "%s/checkpoints", t->run_dir);
  r = cddp_ckpt_save(root, t->step, &p, t->cfg.ckpt_keep, t->last_ckpt, sizeof t->last_ckpt);
  if (r == CDDP_OK) CDDP_INFO(CDDP_SUB_TRAIN, "checkpoint %s", t->last_ckpt);
out:
  free(names), free(w), free(m), free(v), free(state), free(residuals);
  cddp__zero1_drop_whole(t);
  return r;
}

cddp_result_t cddp__train_save_agreed(trainer_t *t) {
  cddp_result_t r = cddp__train_save(t, 1);
  union { char text[256]; int32_t words[64]; } why = {.text = ""}; /* broadcast as 64 int32s */
  if (r != CDDP_OK) snprintf(why.text, sizeof why.text, "%s", cddp_last_error()); /* recoverable() clears it */
  if (r != CDDP_OK && cddp__train_recoverable(t, r)) return cddp__fail(r, "%s", why.text);
  /* the lowest rank that failed (world - rank, the largest), 0 when none did */
  int64_t failed = r != CDDP_OK ? t->world - t->rank : 0;
  cddp_comm_t *c = cddp_world_comm(t->w);
  cddp_result_t cr = cddp_allreduce(c, &failed, &failed, 1, CDDP_I64, CDDP_MAX);
  if (cr == CDDP_OK && failed > 0) cr = cddp_broadcast(c, why.words, 64, CDDP_I32, (int)(t->world - failed));
  if (r != CDDP_OK) return cddp__fail(r, "%s", why.text);
  if (cr != CDDP_OK || failed == 0) return cr;
  why.text[sizeof why.text - 1] = '\0';
  return cddp__fail(CDDP_SYSTEM, "rank %d could not save the checkpoint of step %" PRId64 ": %s", (int)(t->world - failed),
                    t->step, why.text);
}

static int parse_u64(const cddp_ckpt_t *c, const char *key, uint64_t *out) {
  const char *s = cddp_ckpt_meta(c, key);
  if (!s || !*s) return -1;
  char *end;
  *out = strtoull(s, &end, 10);
  return *end ? -1 : 0;
}

/* fp16, rank 0: the loss scale and its count of good steps as the checkpoint saved them (GradScaler's
 * state_dict); a checkpoint without them (another precision) leaves train.loss_scale's start. */
static cddp_result_t read_scaler(trainer_t *t, const cddp_ckpt_t *c, const char *dir) {
  const char *s = cddp_ckpt_meta(c, "loss_scale");
  uint64_t good;
  if (!t->scaler.on || !s) return CDDP_OK;
  char *end;
  double v = strtod(s, &end);
  if (*end || !isfinite(v) || v <= 0 || v > 1e30 || parse_u64(c, "loss_scale_good", &good) != 0 || good > INT64_MAX)
    return cddp__fail(CDDP_INVALID_ARG, "checkpoint %s: metadata 'loss_scale' '%.32s' or 'loss_scale_good' is not a "
                      "loss scale", dir, s);
  t->scaler.scale = (float)v, t->scaler.good = (int64_t)good;
  return CDDP_OK;
}

cddp_result_t cddp__train_share_scaler(trainer_t *t, int src) {
  if (!t->scaler.on) return CDDP_OK;
  double v[2] = {t->scaler.scale, (double)t->scaler.good};
  CDDP_CHECK(cddp_broadcast(cddp_world_comm(t->w), v, 2, CDDP_F64, src));
  t->scaler.scale = (float)v[0], t->scaler.good = (int64_t)v[1];
  return CDDP_OK;
}

/* Rank 0, ddp.compress sign or powersgd: every rank's error-feedback residual into t->residuals
 * (world x n). Saved on another world size, their sum goes to rank 0: the total correction still
 * owed is kept, only who owes it changes. PowerSGD's warm-start Q's, after the residual, are
 * summed too: rank 0 gets world x Q, harmless because P = M Q is orthonormalised (only Q's
 * column space matters); the other ranks' Q's are zero and start again from their seed. */
static cddp_result_t read_residuals(trainer_t *t, const cddp_ckpt_t *c, const char *dir) {
  if (!t->ddp || !cddp_ddp_residual(t->ddp)) return CDDP_OK;
  uint64_t saved = 0;
  if (parse_u64(c, "residual_ranks", &saved) != 0) saved = 0;
  size_t n = cddp__ddp_residual_len(t->ddp); /* the residual, then sign + vsync's local variance */
  if (!(t->residuals = calloc((size_t)t->world * n, sizeof(float)))) return cddp__fail(CDDP_SYSTEM, "out of memory");
  if (saved == 0) {
    CDDP_WARN("checkpoint %s holds no error-feedback residuals: they start from zero", dir);
    return CDDP_OK;
  }
  if (saved != (uint64_t)t->world)
    CDDP_WARN("checkpoint %s was saved by %" PRIu64 " ranks, this world has %d: their residuals are summed into rank 0's",
              dir, saved, t->world);
  float *one = saved == (uint64_t)t->world ? NULL : malloc(n * sizeof *one);
  if (saved != (uint64_t)t->world && !one) return cddp__fail(CDDP_SYSTEM, "out of memory");
  cddp_result_t r = CDDP_OK;
  for (uint64_t q = 0; q < saved && r == CDDP_OK; q++) {
    char name[64];
    snprintf(name, sizeof name, "ddp.residual.rank%" PRIu64, q);
    r = cddp_ckpt_tensor(c, "state", name, one ? one : t->residuals + q * n, n);
    for (size_t i = 0; one && r == CDDP_OK && i < n; i++) t->residuals[i] += one[i];
  }
  free(one);
  return r;
}

/* Rank 0: reads checkpoint dir into params, the moments m and v (n floats each, NULL when the
 * optimizer has none) and the header words. */
static cddp_result_t read_ckpt(trainer_t *t, const char *dir, uint64_t hdr[5], float *opt_m, float *opt_v) {
  cddp_ckpt_t *c;
  CDDP_CHECK(cddp_ckpt_load(dir, &c));
  cddp_result_t r = CDDP_OK;
  const char *fmt = cddp_ckpt_meta(c, "format");
  const char *keys[] = {"step", "epoch", "samples_consumed", "optim_steps", "param_count"};
  if (!fmt || strcmp(fmt, STATE_FORMAT)) {
    r = cddp__fail(CDDP_INVALID_ARG, "checkpoint %s: state format '%s', expected '%s'", dir, fmt ? fmt : "(none)", STATE_FORMAT);
    goto out;
  }
  for (int i = 0; i < 5; i++)
    if (parse_u64(c, keys[i], &hdr[i]) != 0) {
      r = cddp__fail(CDDP_INVALID_ARG, "checkpoint %s: metadata '%s' missing or not a number", dir, keys[i]);
      goto out;
    }
  if (hdr[4] != t->n_params) {
    r = cddp__fail(CDDP_INVALID_ARG, "checkpoint %s holds %" PRIu64 " parameters, this model has %zu (model.* differs)",
                   dir, hdr[4], t->n_params);
    goto out;
  }
  for (int i = 0; i < t->task->ops->n_params(t->task) && r == CDDP_OK; i++) {
    const cddp_param_info_t *p = t->task->ops->param(t->task, i);
    char name[96];
    r = cddp_ckpt_tensor(c, "model", p->name, t->params + p->offset, p->count);
    if (r == CDDP_OK && opt_m) {
      snprintf(name, sizeof name, "optim.m.%s", p->name);
      r = cddp_ckpt_tensor(c, "state", name, opt_m + p->offset, p->count);
    }
    if (r == CDDP_OK && opt_v) {
      snprintf(name, sizeof name, "optim.v.%s", p->name);
      r = cddp_ckpt_tensor(c, "state", name, opt_v + p->offset, p->count);
    }
  }
  if (r == CDDP_OK) r = read_residuals(t, c, dir);
  if (r == CDDP_OK) r = read_scaler(t, c, dir);
  const char *h = cddp_ckpt_meta(c, "config_hash");
  char mine[32];
  snprintf(mine, sizeof mine, "%016" PRIx64, cddp__config_hash(&t->cfg));
  if (r == CDDP_OK && (!h || strcmp(h, mine)))
    CDDP_WARN("checkpoint %s was written with another config (hash %s, now %s): resuming anyway", dir, h ? h : "?", mine);
out:
  cddp_ckpt_close(c);
  return r;
}

/* Keeps only the sample-log lines of steps the checkpoint includes, so the log lists the
 * samples of committed steps exactly once however many times the run was resumed. */
cddp_result_t cddp__train_trim_sample_log(const char *path, int64_t step) {
  FILE *in = fopen(path, "r");
  if (!in) return errno == ENOENT ? CDDP_NOT_FOUND : cddp__fail_errno(CDDP_SYSTEM, "cannot read sample log %s", path);
  cddp__durable_t out;
  cddp_result_t r = cddp__durable_open(&out, path, 0666);
  unsigned long long e, s, i;
  while (r == CDDP_OK && fscanf(in, "%llu %llu %llu", &e, &s, &i) == 3)
    if ((int64_t)s <= step) r = cddp__durable_printf(&out, "%llu %llu %llu\n", e, s, i);
  fclose(in);
  if (r == CDDP_OK) r = cddp__durable_commit(&out);
  else cddp__durable_abort(&out);
  if (r != CDDP_OK) return cddp__fail(r, "cannot rewrite sample log: %s", cddp_last_error());
  return CDDP_OK;
}

/* Every rank's log (of this world or a larger earlier one) cut back to the checkpoint's step. */
static void trim_sample_logs(const trainer_t *t, int64_t step) {
  char path[700];
  for (int q = 0; q < 4096; q++) {
    snprintf(path, sizeof path, "%s/samples/rank%d.txt", t->run_dir, q);
    if (cddp__train_trim_sample_log(path, step) == CDDP_NOT_FOUND && q >= t->world) break;
  }
}

/* The restore into opt_m and opt_v (rank 0's whole moments; oom: it has none to read into). */
static cddp_result_t restore_from(trainer_t *t, const char *want, const char *origin, uint64_t hdr[5], float *opt_m,
                                  float *opt_v, int oom, int *resumed) {
  int64_t status = 0; /* rank 0 says: 0 fresh start, 1 restored, -result failed */
  cddp_result_t r = CDDP_OK;
  if (t->rank == 0 && oom) {
    r = cddp__fail(CDDP_SYSTEM, "out of memory for the optimizer state");
  } else if (t->rank == 0 && t->refused[0]) {
    r = cddp__fail(CDDP_INVALID_ARG, "%s", t->refused);
  } else if (t->rank == 0 && want && strcmp(want, "none")) {
    char dir[600];
    if (!strcmp(want, "latest")) {
      char root[600];
      snprintf(root, sizeof root, "%s/checkpoints", t->run_dir);
      r = cddp_ckpt_find_latest(root, dir, sizeof dir);
      if (r == CDDP_NOT_FOUND && origin) {
        fprintf(stderr, "cddp train: no checkpoint in %s yet: back to the one the run started from\n", root);
        snprintf(dir, sizeof dir, "%s", origin);
        r = CDDP_OK;
      } else if (r == CDDP_NOT_FOUND) {
        CDDP_INFO(CDDP_SUB_TRAIN, "no checkpoint under %s: starting from scratch", root);
        fprintf(stderr, "cddp train: no checkpoint in %s yet: starting from step 0\n", root);
        r = CDDP_OK;
        dir[0] = 0;
      }
    } else {
      snprintf(dir, sizeof dir, "%s", want);
    }
    if (r == CDDP_OK && dir[0]) r = read_ckpt(t, dir, hdr, opt_m, opt_v);
    if (r == CDDP_OK && dir[0]) {
      status = 1;
      snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", dir);
      if ((int64_t)hdr[0] >= t->total_steps) /* the job's only line: setup and the loop stay quiet */
        fprintf(stderr,
                "cddp train: nothing to do: %s is at step %" PRIu64 " of %" PRId64 ", the run is finished; "
                "--set train.max_steps=N (more than %" PRIu64 ") trains it further, --name auto starts a new run\n",
                dir, hdr[0], t->total_steps, hdr[0]);
      else
        fprintf(stderr, "cddp train: resuming from %s (step %" PRIu64 ", epoch %" PRIu64 ", %" PRIu64 " samples into it)\n",
                dir, hdr[0], hdr[1] + 1, hdr[2]);
    }
  }
  if (r != CDDP_OK) status = -(int64_t)r;
  int64_t err[96]; /* rank 0's line, sent to every rank with its verdict */
  snprintf((char *)err, sizeof err, "%s", r != CDDP_OK ? cddp_last_error() : "");
  CDDP_CHECK(cddp_broadcast(cddp_world_comm(t->w), &status, 1, CDDP_I64, 0));
  if (status < 0) {
    CDDP_CHECK(cddp_broadcast(cddp_world_comm(t->w), err, CDDP_ARRAY_LEN(err), CDDP_I64, 0));
    ((char *)err)[sizeof err - 1] = '\0';
    t->same_error_everywhere = 1;
    return cddp__fail((cddp_result_t)-status, "%s", (char *)err);
  }
  if (status == 0) return CDDP_OK;
  CDDP_CHECK(cddp_broadcast(cddp_world_comm(t->w), hdr, 5, CDDP_I64, 0));
  CDDP_CHECK(cddp_broadcast(cddp_world_comm(t->w), t->params, t->n_params, CDDP_F32, 0));
  CDDP_CHECK(cddp__train_share_scaler(t, 0));
  if (t->zero1.on) {
    if (t->opt.m) CDDP_CHECK(cddp__zero1_scatter(t, opt_m, t->opt.m, 0));
    if (t->opt.v) CDDP_CHECK(cddp__zero1_scatter(t, opt_v, t->opt.v, 0));
  } else {
    if (t->opt.m) CDDP_CHECK(cddp_broadcast(cddp_world_comm(t->w), t->opt.m, t->n_params, CDDP_F32, 0));
    if (t->opt.v) CDDP_CHECK(cddp_broadcast(cddp_world_comm(t->w), t->opt.v, t->n_params, CDDP_F32, 0));
  }
  t->step = (int64_t)hdr[0];
  t->opt.t = (int64_t)hdr[3];
  CDDP_CHECK(cddp__sampler_restore(&t->sampler, hdr[1], hdr[2]));
  float *res = cddp_ddp_residual(t->ddp);
  if (res) { /* every rank gets its own residual back */
    size_t len = cddp__ddp_residual_len(t->ddp);
    if (!t->residuals && !(t->residuals = calloc((size_t)t->world * len, sizeof(float))))
      return cddp__fail(CDDP_SYSTEM, "out of memory");
    CDDP_CHECK(cddp_broadcast(cddp_world_comm(t->w), t->residuals, (size_t)t->world * len, CDDP_F32, 0));
    memcpy(res, t->residuals + (size_t)t->rank * len, len * sizeof *res);
  }
  free(t->residuals);
  t->residuals = NULL;
  if (t->cfg.sample_log) {
    if (t->rank == 0) trim_sample_logs(t, t->step);
    CDDP_CHECK(cddp_barrier(cddp_world_comm(t->w))); /* no rank appends before the trim is done */
  }
  *resumed = 1;
  return CDDP_OK;
}

cddp_result_t cddp__train_restore(trainer_t *t, const char *want, const char *origin, int *resumed) {
  *resumed = 0;
  uint64_t hdr[5] = {0};
  /* ZeRO-1: rank 0 reads the whole moments, then cuts them into the ranks' shards */
  float *opt_m = t->opt.m, *opt_v = t->opt.v;
  int oom = 0;
  if (t->zero1.on && t->rank == 0) {
    opt_m = t->opt.m ? malloc(t->n_params * sizeof *opt_m) : NULL;
    opt_v = t->opt.v ? malloc(t->n_params * sizeof *opt_v) : NULL;
    oom = (t->opt.m && !opt_m) || (t->opt.v && !opt_v);
  }
  cddp_result_t r = restore_from(t, want, origin, hdr, opt_m, opt_v, oom, resumed);
  if (t->zero1.on && t->rank == 0) free(opt_m), free(opt_v);
  return r;
}

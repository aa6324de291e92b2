/* train_setup.c - checks before training: configs agree across ranks, the batch splits over
 * this world, BLAS threads, the run folder (named, created, never mixed with another run's). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cddp/ckpt.h"
#include "common/check.h"
#include "common/durable.h"
#include "common/log.h"
#include "comm/nccl.h"
#include "comm/transport.h"
#include "ddp/ddp_compress.h"
#include "job/status.h"
#include "trainer/ops.h"
#include "trainer/run_lock.h"
#include "trainer/trainer.h"

#define MAX_KEYS 128

cddp_result_t cddp__train_check_configs(trainer_t *t) {
  uint64_t mine[MAX_KEYS + 1] = {0};
  int n = cddp__config_key_hashes(&t->cfg, mine + 1, MAX_KEYS);
  mine[0] = (uint64_t)n;
  uint64_t *all = calloc((size_t)t->world * (MAX_KEYS + 1), sizeof *all);
  if (!all) return cddp__fail(CDDP_SYSTEM, "out of memory");
  cddp_result_t r = cddp_allgather(cddp_world_comm(t->w), mine, all, MAX_KEYS + 1, CDDP_I64);
  if (r != CDDP_OK) {
    free(all);
    return r;
  }
  for (int q = 1; q < t->world; q++) {
    const uint64_t *ref = all, *other = all + (size_t)q * (MAX_KEYS + 1);
    for (int k = 0; k < MAX_KEYS + 1; k++) {
      if (ref[k] == other[k]) continue;
      free(all);
      if (k == 0) return cddp__fail(CDDP_INVALID_ARG, "rank %d runs a different cddp build (its config has other keys) than rank 0", q);
      return cddp__fail(CDDP_INVALID_ARG, "the config of rank %d differs from rank 0's at key '%s'", q,
                        cddp__config_key_name(k - 1));
    }
  }
  free(all);
  return CDDP_OK;
}

cddp_result_t cddp__train_batch_split(trainer_t *t) {
  const cddp_train_config_t *c = &t->cfg;
  long per_world = (long)c->micro_batch * t->world;
  if (c->global_batch % per_world == 0) {
    t->accum = (int)(c->global_batch / per_world);
    return CDDP_OK;
  }
  /* name the world sizes that do work: divisors of global / micro */
  char ok[256] = "";
  size_t len = 0;
  long units = c->global_batch / c->micro_batch;
  for (long w = 1; w <= units && len + 16 < sizeof ok; w++)
    if (units % w == 0) len += (size_t)snprintf(ok + len, sizeof ok - len, "%s%ld", len ? ", " : "", w);
  return cddp__fail(CDDP_INVALID_ARG,
                    "batch.global=%d cannot be split into micro-batches of batch.micro=%d over %d ranks "
                    "(global must be micro x world x accumulation); world sizes that work: %s",
                    c->global_batch, c->micro_batch, t->world, ok);
}

int cddp__train_blas_threads(const trainer_t *t) {
  if (t->cfg.threads > 0) return t->cfg.threads;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int local = cddp_world_env(t->w)->local_world_size > 0 ? cddp_world_env(t->w)->local_world_size : 1;
  long per = cores / local;
  return per > 0 ? (int)per : 1;
}

/* Over shared memory the all-reduce is CPU work (copies and adds): when the ranks' BLAS
 * threads already fill every core, overlapping it with backward time-slices the same cores,
 * which may cost more than it hides. That is only the first guess: overlap_trial.c times both
 * ways in the first steps and keeps the faster. Across hosts it is mostly waiting on the
 * network, which backward can hide. */
int cddp__train_overlap(const trainer_t *t, int threads) {
  if (t->cfg.overlap != CDDP_OVERLAP_AUTO) return t->cfg.overlap == CDDP_OVERLAP_ON;
  if (strcmp(cddp_comm_transport(cddp_world_comm(t->w)), "shm") != 0) return 1;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int local = cddp_world_env(t->w)->local_world_size > 0 ? cddp_world_env(t->w)->local_world_size : 1;
  return (long)threads * local < cores;
}

float cddp__train_scaled_lr(const cddp_train_config_t *c) {
  double ratio = (double)c->global_batch / (double)(c->ref_batch > 0 ? c->ref_batch : c->global_batch);
  switch (c->lr_scaling) {
  case CDDP_LR_SCALE_LINEAR: return (float)(c->lr * ratio);
  case CDDP_LR_SCALE_SQRT: return (float)(c->lr * sqrt(ratio));
  default: return c->lr;
  }
}

static cddp_result_t mkdir_p(const char *path) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return cddp__fail_errno(CDDP_SYSTEM, "cannot create directory %s", buf);
    *p = '/';
  }
  if (mkdir(buf, 0755) != 0 && errno != EEXIST) return cddp__fail_errno(CDDP_SYSTEM, "cannot create directory %s", buf);
  return CDDP_OK;
}

/* --name auto: "<config name>-<local time YYYYmmdd-HHMMSS>", with "-2", "-3"... when that folder
 * exists; rank 0 creates the folder (mkdir, so no other run has it) and puts the name in the job's
 * store, where the other ranks read it, and so do the workers started later in the same job (a
 * replacement, a restart), which then go on in the same folder. An empty value: rank 0 failed. */
static cddp_result_t auto_name(trainer_t *t, const char *work, const char *base, char *name, size_t cap) {
  static const char key[] = "train/run_name";
  void *v = NULL;
  size_t len = 0;
  cddp_result_t r = cddp_store_get(cddp_world_store(t->w), key, &v, &len, 0);
  if (r != CDDP_OK && t->rank != 0) r = cddp_store_get(cddp_world_store(t->w), key, &v, &len, 60000);
  if (r != CDDP_OK && t->rank != 0)
    return cddp__fail(r, "--name auto: rank 0 did not name the run folder: %s", cddp_last_error());
  if (r == CDDP_OK) {
    if (len == 0 || len >= cap) {
      free(v);
      return cddp__fail(CDDP_INVALID_ARG, "--name auto: rank 0 could not make the run folder under %s", work);
    }
    snprintf(name, cap, "%s", (char *)v);
    free(v);
    return CDDP_OK;
  }
  char stamp[32], dir[600];
  time_t now = time(NULL);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
  r = mkdir_p(work);
  for (int k = 1; r == CDDP_OK; k++) {
    snprintf(name, cap, k == 1 ? "%s-%s" : "%s-%s-%d", base, stamp, k);
    snprintf(dir, sizeof dir, "%s/%s", work, name);
    if (mkdir(dir, 0755) == 0) break;
    if (errno != EEXIST || k == 1000) r = cddp__fail_errno(CDDP_SYSTEM, "cannot create directory %s", dir);
  }
  char saved[512];
  snprintf(saved, sizeof saved, "%s", r == CDDP_OK ? "" : cddp_last_error());
  cddp_result_t s = cddp_store_set(cddp_world_store(t->w), key, name, r == CDDP_OK ? strlen(name) : 0);
  if (r != CDDP_OK) return cddp__fail(r, "%s", saved);
  return s;
}

/* Rank 0: a fresh first start (no --resume-from, not a restart, not a replacement) into a folder
 * that holds another run's checkpoints or metrics would mix the two runs (its metrics.jsonl
 * truncated, `--resume-from latest` later taking the other run's checkpoint): noted in
 * t->refused for the restore to refuse on every rank. */
static void check_reuse(trainer_t *t) {
  const char *resume = t->opts->resume;
  if ((resume && strcmp(resume, "none")) || cddp_world_replacement(t->w) || cddp_world_env(t->w)->restart_count > 0) return;
  char path[700], newest[700], what[800] = "";
  struct stat st;
  snprintf(path, sizeof path, "%s/checkpoints", t->run_dir);
  if (cddp_ckpt_find_newest(path, newest, sizeof newest) == CDDP_OK)
    snprintf(what, sizeof what, "checkpoints (newest %s)", strrchr(newest, '/') + 1);
  cddp__clear_error();
  snprintf(path, sizeof path, "%s/metrics.jsonl", t->run_dir);
  if (stat(path, &st) == 0 && st.st_size > 0)
    snprintf(what + strlen(what), sizeof what - strlen(what), "%smetrics.jsonl", what[0] ? " and " : "");
  if (what[0])
    snprintf(t->refused, sizeof t->refused,
             "run folder %.300s already holds a run's %.200s: --resume-from latest continues that run; "
             "--name auto (or another --name) starts a new one",
             t->run_dir, what);
}

cddp_result_t cddp__train_make_run_dir(trainer_t *t) {
  const cddp_train_opts_t *o = t->opts;
  const char *work = o->work_dir ? o->work_dir : "runs";
  char name[128], base[128];
  if (o->config_path) {
    const char *b = strrchr(o->config_path, '/');
    snprintf(base, sizeof base, "%s", b ? b + 1 : o->config_path);
    char *dot = strrchr(base, '.');
    if (dot && dot != base) *dot = 0;
  } else {
    snprintf(base, sizeof base, "default");
  }
  if (o->work_dir && !*o->work_dir) /* "" would put the run at /NAME */
    return cddp__fail(CDDP_INVALID_ARG, "--work-dir '': name a folder (default: runs)");
  if (o->name && (!*o->name || strchr(o->name, '/')))
    return cddp__fail(CDDP_INVALID_ARG, "--name '%.60s': must be a non-empty name without '/'", o->name);
  if (o->name && strlen(o->name) >= sizeof name) /* never cut to another run's name */
    return cddp__fail(CDDP_INVALID_ARG, "--name '%.40s...': %zu characters, at most %zu", o->name,
                      strlen(o->name), sizeof name - 1);
  int n = snprintf(t->run_dir, sizeof t->run_dir, "%s/", work);
  if (n < 0 || (size_t)n >= sizeof t->run_dir - 200) return cddp__fail(CDDP_INVALID_ARG, "--work-dir: path too long");
  if (o->name && !strcmp(o->name, "auto")) CDDP_CHECK(auto_name(t, work, base, name, sizeof name));
  else snprintf(name, sizeof name, "%s", o->name ? o->name : base);
  snprintf(t->run_dir, sizeof t->run_dir, "%s/%s", work, name);
  if (t->rank != 0) return CDDP_OK;
  CDDP_CHECK(mkdir_p(t->run_dir));
  /* before anything is written: a run still holding the folder refuses this one. A restarted
   * or replacement rank 0 of the same job waits for its predecessor's exit to drop the lock. */
  int again = cddp_world_replacement(t->w) || cddp_world_env(t->w)->restart_count > 0;
  char holder[256];
  int fd = cddp__run_lock_take(t->run_dir, again ? 30000 : 0, holder, sizeof holder);
  if (fd == -2) return cddp__fail(CDDP_SYSTEM, "%s", holder);
  if (fd == -1)
    snprintf(t->refused, sizeof t->refused,
             "run folder %.300s is in use by another run (%s): wait for it to end, or give this one "
             "another --name (or --name auto)",
             t->run_dir, holder);
  else if (!o->name || strcmp(o->name, "auto"))
    check_reuse(t);
  char sub[600];
  snprintf(sub, sizeof sub, "%s/checkpoints", t->run_dir);
  CDDP_CHECK(mkdir_p(sub));
  if (t->cfg.sample_log) {
    snprintf(sub, sizeof sub, "%s/samples", t->run_dir);
    CDDP_CHECK(mkdir_p(sub));
  }
  return CDDP_OK;
}

cddp_result_t cddp__train_write_config(trainer_t *t) {
  char path[600];
  snprintf(path, sizeof path, "%s/config.yaml", t->run_dir);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return cddp__fail_errno(CDDP_SYSTEM, "cannot write %s", path);
  cddp_result_t r = cddp__config_write(&t->cfg, f);
  if (fclose(f) != 0 && r == CDDP_OK) r = cddp__fail_errno(CDDP_SYSTEM, "cannot write %s", path);
  if (r == CDDP_OK) r = cddp__durable_save(path, 0666, text, len); /* a crash leaves the old one or this */
  free(text);
  return r;
}

void cddp__train_record_endpoint(trainer_t *t) {
  if (getenv("CDDP_STORE")) { /* under cddp run: `cddp status RUN_DIR` finds the job */
    const cddp_env_t *e = cddp_world_env(t->w);
    cddp__endpoint_t ep = {.port = e->master_port};
    snprintf(ep.host, sizeof ep.host, "%s", e->master_addr);
    snprintf(ep.run_id, sizeof ep.run_id, "%s", e->run_id);
    snprintf(ep.token, sizeof ep.token, "%s", e->token);
    t->endpoint_mine = cddp__endpoint_write(t->run_dir, &ep) == CDDP_OK;
    if (!t->endpoint_mine) CDDP_WARN("%s (cddp status RUN_DIR)", cddp_last_error());
  }
}

int cddp__train_shm_for_life(const trainer_t *t) {
  cddp_comm_t *comm = cddp_world_comm(t->w);
  return t->world > 1 && comm && !strcmp(cddp_comm_transport(comm), "shm") && !cddp_world_can_recover(t->w);
}

cddp_result_t cddp__train_make_flat(trainer_t *t) {
  /* shm for the run's life: DDP keeps the gradients in comm memory of its own, where the peers
   * reduce them in place (zero copy; the whole state there would cost peak RSS); else they are
   * the flat state's, in memory that outlives a re-formed communicator */
  int with_grads = t->staged || !cddp__train_shm_for_life(t);
  if (!t->staged) return cddp__flat_create(&t->flat, t->dev, t->n_params, with_grads, &t->opt, &t->cfg.optim, t->n_params);
  /* staged: the host keeps copies of the parameters and moments for checkpoints and broadcasts */
  CDDP_CHECK(cddp__flat_create(&t->flat, t->dev, t->n_params, 1, &t->dopt, &t->cfg.optim, t->n_params));
  CDDP_CHECK(cddp__optim_init(&t->opt, &t->cfg.optim, t->n_params));
  if (!(t->params = calloc(t->n_params ? t->n_params : 1, sizeof(float))))
    return cddp__fail(CDDP_SYSTEM, "out of memory for the host copy of %zu parameters", t->n_params);
  return CDDP_OK;
}

void cddp__train_state_pull(trainer_t *t) {
  if (!t->staged) return;
  size_t bytes = t->n_params * sizeof(float);
  t->dev->to_host(t->params, t->flat.params, bytes);
  if (t->opt.m) t->dev->to_host(t->opt.m, t->dopt.m, bytes);
  if (t->opt.v) t->dev->to_host(t->opt.v, t->dopt.v, bytes);
  t->opt.t = t->dopt.t;
}

void cddp__train_state_push(trainer_t *t) {
  if (!t->staged) return;
  size_t bytes = t->n_params * sizeof(float);
  t->dev->to_device(t->flat.params, t->params, bytes);
  if (t->opt.m) t->dev->to_device(t->dopt.m, t->opt.m, bytes);
  if (t->opt.v) t->dev->to_device(t->dopt.v, t->opt.v, bytes);
  t->dopt.t = t->opt.t;
}

cddp_result_t cddp__train_alloc_scratch(trainer_t *t) {
  if (t->accum <= 1 || t->scratch) return CDDP_OK;
  t->scratch = t->staged ? t->dev->alloc(t->n_params * sizeof(float))
                         : aligned_alloc(64, (t->n_params * sizeof(float) + 63) / 64 * 64);
  return t->scratch ? CDDP_OK : cddp__fail(CDDP_SYSTEM, "out of %s memory for the accumulated gradient", t->dev->name);
}

void cddp__train_destroy_ddp(trainer_t *t) {
  cddp__grad_stage_destroy(&t->stage);
  if (t->ddp_path == CDDP__DDP_PATH_STAGED && t->ddp && t->world > 1) t->dev->host_unregister(t->grads);
  cddp_ddp_destroy(t->ddp);
  t->ddp = NULL, t->grads = NULL;
  if (t->dcomm) cddp_world_abort_with(t->w, NULL); /* the watcher lets go of it first */
  cddp_comm_destroy(t->dcomm); /* NCCL's: finalised, or aborted after a failure */
  cddp_store_close(t->dview);
  t->dcomm = NULL, t->dview = NULL;
}

/* ZeRO-1, on or a candidate: world x per floats, the tail zero */
size_t cddp__train_param_slots(const trainer_t *t) { return t->zero1.on || t->zero1.candidate ? t->zero1.padded : t->n_params; }

/* ddp.compress powersgd: the model's tensors as matrices (shape[0] rows x the rest). */
static cddp_result_t set_powersgd(trainer_t *t) {
  int n = t->task->ops->n_params(t->task);
  cddp_ddp_tensor_t *tt = calloc((size_t)n, sizeof *tt);
  if (!tt) return cddp__fail(CDDP_SYSTEM, "out of memory");
  for (int i = 0; i < n; i++) {
    const cddp_param_info_t *p = t->task->ops->param(t->task, i);
    size_t rows = p->ndim >= 1 ? (size_t)p->shape[0] : 1;
    tt[i] = (cddp_ddp_tensor_t){p->offset, rows, rows ? p->count / rows : 0};
  }
  cddp_result_t r = cddp_ddp_set_powersgd(t->ddp, t->cfg.powersgd_rank, tt, n);
  free(tt);
  return r;
}

/* How this world all-reduces a device's gradients (ddp_path.h): every rank's code all-gathered
 * over the world's host communicator, one choice on every rank. The CPU trainer's gradients are
 * host memory: it decides alone, unless NCCL is asked for (then every rank refuses the same). */
static cddp_result_t choose_path(trainer_t *t) {
  cddp_ddp_backend_t want = t->nccl_asked ? CDDP_DDP_BACKEND_NCCL : (cddp_ddp_backend_t)t->cfg.ddp_backend;
  cddp__ddp_local_t me = {.on_device = t->staged, .emulated = t->device.emulated, .sharing = t->device.sharing,
                          .compressed = t->cfg.compress != CDDP_COMPRESS_NONE};
  me.nccl_ok = t->staged && !me.emulated && !me.sharing && cddp__nccl_available() == CDDP_OK;
  int64_t mine = cddp__ddp_nccl_why(&me), *all = &mine;
  if (t->staged && t->world > 1) {
    if (!(all = calloc((size_t)t->world, sizeof *all))) return cddp__fail(CDDP_SYSTEM, "out of memory");
    cddp_result_t r = cddp_allgather(cddp_world_comm(t->w), &mine, all, 1, CDDP_I64);
    if (r != CDDP_OK) {
      free(all);
      return r;
    }
  }
  char why[400];
  cddp_result_t r = cddp__ddp_path_choose(want, all, t->staged ? t->world : 1, t->staged, &t->ddp_path, why, sizeof why);
  if (all != &mine) free(all);
  if (r != CDDP_OK) {
    t->same_error_everywhere = 1; /* every rank chose from the same codes */
    return r;
  }
  if (t->staged && t->rank == 0) CDDP_INFO(CDDP_SUB_TRAIN, "%s", why);
  return CDDP_OK;
}

/* NCCL on the device's gradients: a communicator of backend nccl for DDP alone (the world's
 * stays native: the trainer's own collectives are on host memory), under this generation's
 * keys, its collectives on the table's comm stream; DDP's buckets are slices of the device's
 * gradient buffer, each started during backward after its mark (grad_stage.c, direct). */
static cddp_result_t make_ddp_nccl(trainer_t *t) {
  cddp_comm_config_t cc;
  cddp_comm_config_default(&cc);
  cc.backend = "nccl";
  char prefix[48];
  snprintf(prefix, sizeof prefix, "ddp-nccl/g%d/", cddp_world_generation(t->w));
  CDDP_CHECK(cddp_store_prefix_create(&t->dview, cddp_world_store(t->w), prefix, 0));
  CDDP_CHECK(cddp_comm_init(&t->dcomm, t->dview, t->rank, t->world, 0, &cc));
  cddp_world_abort_with(t->w, t->dcomm); /* a lost peer ends its all-reduces as it ends the world's */
  const char *name = NULL;
  void *state = cddp__comm_transport_state(t->dcomm, &name);
  if (!state || !name || strcmp(name, "nccl") != 0)
    return cddp__fail(CDDP_INTERNAL, "DDP's communicator is not NCCL's (%s)", name ? name : "none");
  cddp__nccl_use_stream(state, t->dev->comm_stream());
  CDDP_CHECK(cddp_ddp_create_over(&t->ddp, t->dcomm, t->flat.grads, t->n_params, (size_t)(t->cfg.bucket_mb * 1048576.0),
                                  CDDP_SUM));
  t->grads = NULL; /* no host copy of the gradients */
  CDDP_CHECK(cddp__grad_stage_init_direct(&t->stage, t->dev, t->ddp, t->flat.grads, t->n_params));
  t->overlap = 1;
  cddp_ddp_set_overlap(t->ddp, 1);
  return CDDP_OK;
}

cddp_result_t cddp__train_make_ddp(trainer_t *t) {
  CDDP_CHECK(choose_path(t));
  if (t->ddp_path == CDDP__DDP_PATH_NCCL) return make_ddp_nccl(t);
  /* the buckets are slices of the flat state's gradients, or (NULL: ZeRO-1, shm for the run's life,
   * staged: the device's gradients are copied through it) of DDP's own comm memory */
  CDDP_CHECK(cddp_ddp_create_over(&t->ddp, cddp_world_comm(t->w), t->staged ? NULL : t->flat.grads, cddp__train_param_slots(t),
                                  (size_t)(t->cfg.bucket_mb * 1048576.0), CDDP_SUM));
  t->grads = cddp_ddp_grads(t->ddp);
  /* staged: the gradients cross to it and back every step */
  if (t->staged && t->world > 1 && t->dev->host_register(t->grads, t->n_params * sizeof(float)) != 0)
    CDDP_INFO(CDDP_SUB_TRAIN, "DDP's gradient buffer could not be pinned: its copies to and from the %s device are "
              "pageable", t->dev->name);
  /* staged: uncompressed, the buckets cross to the host during backward (grad_stage.c); a
   * compression's whole-buffer work starts after it */
  if (t->staged && t->world > 1 && t->cfg.compress == CDDP_COMPRESS_NONE)
    CDDP_CHECK(cddp__grad_stage_init(&t->stage, t->dev, t->ddp, t->flat.grads, t->grads, t->n_params));
  t->overlap = t->staged ? t->stage.dev != NULL : cddp__train_overlap(t, cddp__train_blas_threads(t)); /* this world's transport */
  cddp_ddp_set_overlap(t->ddp, t->overlap);
  if (!t->staged) cddp__overlap_trial_start(t); /* auto over shm: the first steps time both ways */
  if (t->cfg.compress == CDDP_COMPRESS_POWERSGD) return set_powersgd(t);
  CDDP_CHECK(cddp_ddp_set_compress(t->ddp, (cddp_compress_t)t->cfg.compress));
  if (t->cfg.compress != CDDP_COMPRESS_SIGN || t->cfg.sign_adam <= 0) return CDDP_OK;
  if (!t->opt.v) return cddp__fail(CDDP_INVALID_ARG, "ddp.sign_adam needs optim.type adamw");
  if (t->staged)
    return cddp__fail(CDDP_INVALID_ARG, "ddp.sign_adam does not run on the %s device yet (docs/gpu.md): use train.device cpu",
                      t->dev->name);
  t->opt.m_external = t->opt.v_external = 1; /* the optimizer must be initialised first */
  return cddp__ddp_set_sign_adam(t->ddp, t->cfg.sign_adam, t->opt.spec.beta1, t->opt.spec.beta2, t->opt.v, &t->opt.t);
}

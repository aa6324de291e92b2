/* train_recover.c - in-place recovery of `cddp train` (cddp run --restart-mode replace): after a
 * peer died the survivors re-form the communicator with its replacement, the state of the rank
 * that got furthest is broadcast to everyone, and the interrupted step is redone. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/log.h"
#include "job/elastic.h"
#include "ddp/ddp_compress.h"
#include "trainer/trainer.h"

/* Cuts every sample log of the run (this world's, a dead rank's, a rank number that no longer
 * exists after the world shrank) back to the committed steps. Each is rewritten through a
 * rename, so a dropped worker that still holds its old file open writes into a file nobody
 * sees. Rank 0 does it between two barriers of the sync; then every rank appends to its own. */
static cddp_result_t trim_all_logs(const trainer_t *t, int64_t step) {
  char dir[600], path[900];
  snprintf(dir, sizeof dir, "%s/samples", t->run_dir);
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? CDDP_OK : cddp__fail_errno(CDDP_SYSTEM, "cannot read %s", dir);
  cddp_result_t r = CDDP_OK;
  struct dirent *e;
  while (r == CDDP_OK && (e = readdir(d))) {
    int n = 0;
    if (sscanf(e->d_name, "rank%*d.txt%n", &n) != 0 || n == 0 || e->d_name[n]) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    r = cddp__train_trim_sample_log(path, step);
    if (r == CDDP_NOT_FOUND) r = CDDP_OK;
  }
  closedir(d);
  return r;
}

static cddp_result_t reopen_logs(trainer_t *t) {
  if (!t->cfg.sample_log) return CDDP_OK;
  if (t->sample_log) fclose(t->sample_log);
  t->sample_log = NULL;
  cddp_result_t r = t->rank == 0 ? trim_all_logs(t, t->step) : CDDP_OK;
  int64_t bad = r != CDDP_OK;
  char why[512];
  snprintf(why, sizeof why, "%s", bad ? cddp_last_error() : "");
  CDDP_CHECK(cddp_allreduce(cddp_world_comm(t->w), &bad, &bad, 1, CDDP_I64, CDDP_MAX)); /* no rank appends before the trim */
  if (bad) return cddp__fail(CDDP_SYSTEM, "rank 0 could not cut the sample logs back: %s", t->rank == 0 ? why : "see its log");
  char path[700];
  snprintf(path, sizeof path, "%s/samples/rank%d.txt", t->run_dir, t->rank);
  if (!(t->sample_log = fopen(path, "a"))) return cddp__fail_errno(CDDP_SYSTEM, "cannot open sample log %s", path);
  return CDDP_OK;
}

/* ---- the whole job lost: no rank holds the state, so it comes back from disk ---- */

/* Rank 0: cuts metrics.jsonl back to the lines of steps <= step and appends to it again, so
 * the redone steps are not logged twice (cddp__metrics_take_over). *last (may be NULL) gets the
 * highest step it had logged, -1 when there is no file. */
static cddp_result_t trim_metrics(trainer_t *t, int64_t step, int64_t *last) {
  char path[700];
  snprintf(path, sizeof path, "%s/metrics.jsonl", t->run_dir);
  return cddp__metrics_take_over(&t->metrics, path, step, last);
}

/* Back to step 0 of the config's init: what a fresh start of the job trains first. */
static cddp_result_t restart_from_init(trainer_t *t) {
  t->task->ops->bind(t->task, cddp__train_model_params(t), cddp__train_model_grads(t));
  t->task->ops->init_params(t->task, t->cfg.seed);
  cddp__train_state_pull(t); /* staged: the init is on the device; the moments' copies are zeroed below */
  CDDP_CHECK(cddp_broadcast(cddp_world_comm(t->w), t->params, t->n_params, CDDP_F32, 0)); /* as setup does */
  if (t->opt.m) memset(t->opt.m, 0, t->opt.n * sizeof *t->opt.m); /* ZeRO-1: the shard */
  if (t->opt.v) memset(t->opt.v, 0, t->opt.n * sizeof *t->opt.v);
  float *res = t->ddp ? cddp_ddp_residual(t->ddp) : NULL;
  if (res) memset(res, 0, cddp__ddp_residual_len(t->ddp) * sizeof *res);
  t->opt.t = 0;
  t->step = 0;
  return cddp__sampler_restore(&t->sampler, 0, 0);
}

/* Every worker of the job died at once (each rank here is a replacement), or under ZeRO-1 one
 * rank's shard of the optimizer state went with it (why says which): the state comes back
 * from the newest checkpoint of the run exactly as --resume-from latest loads it; with none yet,
 * from the checkpoint an explicit --resume-from PATH started the run from, else from step 0 of
 * the config's init (same seed, same sample order: the job trains what a fresh start would).
 * The sample logs and rank 0's metrics are cut back to that step, so every sample is still
 * trained exactly once and no step is logged twice. */
static cddp_result_t restore_whole_job(trainer_t *t, const char *why_disk) {
  CDDP_CHECK(cddp__train_check_configs(t));
  const char *given = t->opts->resume;
  int explicit_path = given && strcmp(given, "latest") && strcmp(given, "none");
  int resumed = 0;
  CDDP_CHECK(cddp__train_restore(t, "latest", explicit_path ? given : NULL, &resumed));
  if (!resumed) CDDP_CHECK(restart_from_init(t));
  int64_t last = -1, bad = 0;
  char why[900] = "";
  if (t->rank == 0 && trim_metrics(t, t->step, &last) != CDDP_OK) bad = 1;
  /* the run's own checkpoints are never ahead of its metrics (a step is logged before it is saved) */
  if (t->rank == 0 && !bad && last >= 0 && t->step > last) {
    snprintf(why, sizeof why, "no survivor holds the state and checkpoint %s (step %" PRId64 ") is ahead of this "
             "run's metrics (step %" PRId64 "): not this run's", t->last_ckpt, t->step, last);
    bad = 1;
  } else if (bad) {
    snprintf(why, sizeof why, "%s", cddp_last_error());
  }
  CDDP_CHECK(cddp_allreduce(cddp_world_comm(t->w), &bad, &bad, 1, CDDP_I64, CDDP_MAX));
  if (bad) return cddp__fail(CDDP_INVALID_USAGE, "in-place recovery: %s", t->rank == 0 ? why : "rank 0 could not restore the run");
  CDDP_CHECK(reopen_logs(t));
  t->has_state = 1;
  t->recoveries++;
  if (t->rank == 0) {
    char from[700];
    if (resumed) snprintf(from, sizeof from, "checkpoint %s", t->last_ckpt);
    else snprintf(from, sizeof from, "the config's init (no checkpoint in %s/checkpoints yet)", t->run_dir);
    /* always a count: 0 when the job was lost before it logged a step past the restored one */
    int64_t redone = last >= t->step ? last + 1 - t->step : 0;
    cddp__metrics_break_line(&t->metrics);
    fprintf(stderr, "cddp train: %s: restored step %" PRId64 " from %s, %" PRId64 " steps redone (generation %d, world %d)\n",
            why_disk, t->step, from, redone, cddp_world_generation(t->w), t->world);
  }
  return CDDP_OK;
}

/* What made generations gen0+1 .. the current one (elastic/gen/<g>, the agents' words): one
 * recovery may take in several (a worker killed while the job re-formed after a node's loss),
 * and the line names each loss, oldest first. Joins are left out but for a join alone: then
 * the result is 1 and buf names the nodes taken in. */
static int gen_causes(const trainer_t *t, int gen0, char *buf, size_t size) {
  int now = cddp_world_generation(t->w), join_alone = 0;
  size_t o = 0;
  buf[0] = '\0';
  for (int g = CDDP_MAX(gen0 + 1, 1); g <= now && o + 8 < size; g++) {
    cddp__job_announce_t a;
    if (cddp__gen_what(cddp_world_store(t->w), g, &a) && a.what[0] &&
        (a.kind != CDDP__GEN_JOIN || (g == now && !o))) {
      join_alone = a.kind == CDDP__GEN_JOIN;
      o += (size_t)snprintf(buf + o, size - o, "%s%s", o ? ", then " : "", a.what);
    }
  }
  if (!o) snprintf(buf, size, "?");
  return join_alone;
}

/* The state's source's record of the step it holds, to every rank: a new metrics writer (a
 * replacement, a survivor renumbered to rank 0, a rank 0 behind the source) logs that step
 * from it when the old writer died between the step's commit and its line. A peer's record
 * is used only for the step every rank now holds. */
static cddp_result_t share_last_record(trainer_t *t, int src) {
  typedef struct { int64_t have; cddp_step_record_t rec; } shared_t;
  enum { W = (sizeof(shared_t) + 7) / 8 };
  union { int64_t w[W]; shared_t s; } u;
  memset(&u, 0, sizeof u);
  cddp_metrics_t *m = &t->metrics;
  if (t->rank == src && m->have_last && m->last.step == t->step) u.s.have = 1, u.s.rec = m->last;
  CDDP_CHECK(cddp_broadcast(cddp_world_comm(t->w), u.w, W, CDDP_I64, src));
  if (t->rank != src && u.s.have == 1 && u.s.rec.step == t->step)
    m->last = u.s.rec, m->last.ranks = NULL, m->have_last = 1;
  return CDDP_OK;
}

/* Every rank reports (has state, step, config hash, ms since its failure); the lowest rank
 * holding the highest step sends params, optimizer moments and counters, sampler position.
 * gen0: the generation this rank trained in before; the line names what came since the
 * oldest of the ranks' (a replacement's is its own generation - 1). */
static cddp_result_t sync_state(trainer_t *t, uint64_t t_fail, int old_world, int old_accum, int join, int gen0) {
  /* per rank: has state, step, config hash, ms since its failure, the world and accumulation
   * it trained with (the source's are the job's: a replacement born into the new world has
   * seen no change), the generation it trained in */
  enum { F = 8 }; /* ... and whether it holds the whole ZeRO-1 moments (gathered before a join) */
  int64_t mine[F] = {t->has_state, t->has_state ? t->step : -1, (int64_t)cddp__config_hash(&t->cfg),
                     t_fail ? (int64_t)((cddp__now_ns() - t_fail) / 1000000) : 0, old_world, old_accum, gen0,
                     t->zero1.whole};
  int64_t *all = calloc((size_t)t->world * F, sizeof *all);
  if (!all) return cddp__fail(CDDP_SYSTEM, "out of memory");
  cddp_result_t r = cddp_allgather(cddp_world_comm(t->w), mine, all, F, CDDP_I64);
  int src = -1;
  int64_t best = -1, ms = 0;
  for (int q = 0; r == CDDP_OK && q < t->world; q++) {
    if (all[F * q] && all[F * q + 1] > best) best = all[F * q + 1], src = q;
    ms = CDDP_MAX(ms, all[F * q + 3]);
    gen0 = (int)CDDP_MIN(gen0, all[F * q + 6]); /* a replacement knows only its own generation */
  }
  int whole = -1; /* ZeRO-1: the rank holding every shard of the newest state */
  for (int q = 0; r == CDDP_OK && src >= 0 && q < t->world && whole < 0; q++)
    if (all[F * q + 7] && all[F * q + 1] == best) whole = q;
  if (t->zero1.on && src >= 0 && whole < 0) src = -2; /* a lost rank's shard exists only on disk */
  if (t->zero1.on && whole >= 0) src = whole;
  if (src >= 0) old_world = (int)all[F * src + 4], old_accum = (int)all[F * src + 5];
  int bad = -1; /* a rank whose config differs from the source's: every rank says so */
  for (int q = 0; r == CDDP_OK && src >= 0 && q < t->world && bad < 0; q++)
    if (all[F * q + 2] != all[F * src + 2]) bad = q;
  free(all);
  CDDP_CHECK(r);
  if (src == -1) return restore_whole_job(t, "no survivor holds the state"); /* every worker died at once */
  if (src == -2) return restore_whole_job(t, "a lost rank took its shard of the optimizer state (ddp.shard_optimizer)");
  if (bad >= 0)
    return cddp__fail(CDDP_INVALID_ARG, "in-place recovery: the config of rank %d differs from rank %d's (the state's "
                      "source)", bad, src);
  int64_t before = t->has_state ? t->step : -1;
  uint64_t hdr[4] = {(uint64_t)t->step, (uint64_t)t->opt.t, t->sampler.epoch, t->sampler.consumed};
  CDDP_CHECK(cddp_broadcast(cddp_world_comm(t->w), hdr, 4, CDDP_I64, src));
  CDDP_CHECK(cddp_broadcast(cddp_world_comm(t->w), t->params, t->n_params, CDDP_F32, src));
  CDDP_CHECK(cddp__train_share_scaler(t, src));
  if (t->zero1.on) { /* re-sharded over the new world from the whole state */
    if (t->opt.m) CDDP_CHECK(cddp__zero1_scatter(t, t->zero1.whole_m, t->opt.m, src));
    if (t->opt.v) CDDP_CHECK(cddp__zero1_scatter(t, t->zero1.whole_v, t->opt.v, src));
    cddp__zero1_drop_whole(t);
  } else {
    if (t->opt.m) CDDP_CHECK(cddp_broadcast(cddp_world_comm(t->w), t->opt.m, t->n_params, CDDP_F32, src));
    if (t->opt.v) CDDP_CHECK(cddp_broadcast(cddp_world_comm(t->w), t->opt.v, t->n_params, CDDP_F32, src));
  }
  t->step = (int64_t)hdr[0];
  t->opt.t = (int64_t)hdr[1];
  CDDP_CHECK(cddp__sampler_restore(&t->sampler, hdr[2], hdr[3]));
  CDDP_CHECK(share_last_record(t, src));
  CDDP_CHECK(reopen_logs(t));
  /* a new metrics writer, or one behind the source: its file is cut or filled to the step */
  if (t->rank == 0 && t->metrics.logged != t->step) CDDP_CHECK(trim_metrics(t, t->step, NULL));
  t->has_state = 1;
  t->recoveries++;
  if (t->rank == 0) {
    char who[400];
    int join_alone = gen_causes(t, gen0, who, sizeof who);
    cddp__metrics_break_line(&t->metrics);
    char mine0[64];
    if (before < 0) snprintf(mine0, sizeof mine0, "rank 0 is the replacement");
    else snprintf(mine0, sizeof mine0, "rank 0 had committed step %" PRId64, before);
    char resized[160] = "";
    if (join && join_alone) {
      fprintf(stderr,
              "cddp train: %s joined: generation %d, world %d -> %d, accumulation %d -> %d (global batch %d kept), "
              "state from rank %d, no step redone (re-formed at step %" PRId64 " in %" PRId64 " ms)\n",
              who, cddp_world_generation(t->w), old_world, t->world, old_accum, t->accum, t->cfg.global_batch, src,
              t->step, ms);
      return CDDP_OK;
    }
    if (old_world != t->world)
      snprintf(resized, sizeof resized, ", world %d -> %d (accumulation %d -> %d, global batch %d kept)", old_world,
               t->world, old_accum, t->accum, t->cfg.global_batch);
    fprintf(stderr,
            "cddp train: recovered from the loss of %s in %" PRId64 " ms: generation %d%s, state from rank %d, step %" PRId64
            " redone (%s)\n",
            who, ms, cddp_world_generation(t->w), resized, src, t->step + 1, mine0);
  }
  return CDDP_OK;
}

int cddp__train_recoverable(const trainer_t *t, cddp_result_t r) {
  return cddp_world_can_recover(t->w) && !cddp__train_stop &&
         (r == CDDP_REMOTE || r == CDDP_TIMEOUT || r == CDDP_ABORTED || cddp_world_superseded(t->w));
}

/* The world after a membership change: new rank and size, accumulation steps re-derived so
 * the global batch stays (a new rank 0 takes the metrics file over once the state is synced:
 * recover_as). A batch the new world cannot split stops
 * the job (elastic/stop tells the agents not to replace anyone). */
static cddp_result_t adopt_world(trainer_t *t) {
  t->rank = cddp_world_rank(t->w), t->world = cddp_world_size(t->w);
  if (cddp__train_batch_split(t) != CDDP_OK) {
    char line[600];
    snprintf(line, sizeof line, "job stopped: the world shrank to %d ranks: %s", t->world, cddp_last_error());
    cddp_world_stop(t->w, line);
    return cddp__fail(CDDP_INVALID_ARG, "%s", line);
  }
  if (t->zero1.on) CDDP_CHECK(cddp__zero1_relayout(t)); /* before the ddp: its buffer is world x shard */
  return cddp__train_alloc_scratch(t);
}

static cddp_result_t recover_as(trainer_t *t, uint64_t t_fail, int join) {
  /* this rank's error-feedback residual survives the rebuild (the dead rank's is lost) */
  float *res = t->ddp ? cddp_ddp_residual(t->ddp) : NULL;
  size_t res_len = res ? cddp__ddp_residual_len(t->ddp) : 0; /* sign-Adam: also its local m and v */
  float *kept = res ? malloc(res_len * sizeof *kept) : NULL;
  if (kept) memcpy(kept, res, res_len * sizeof *kept);
  cddp_result_t r;
  if (cddp__train_stop) return cddp__fail(CDDP_ABORTED, "stopped by signal %d", (int)cddp__train_stop);
  cddp__train_recovering = 1;
  /* taken once: a recovery interrupted by another loss goes on from the world it started in */
  int old_world = t->world, old_accum = t->accum, gen0 = cddp_world_generation(t->w);
  /* ZeRO-1 and a node taken in: no rank is lost, so rank 0 gathers the whole moments while the
   * old communicator still works, and the new world re-shards them (else: from disk) */
  if (join && t->zero1.on && cddp__zero1_hold_whole(t) != CDDP_OK)
    CDDP_INFO(CDDP_SUB_TRAIN, "gathering the optimizer shards before re-forming failed (%s): from the checkpoint", cddp_last_error());
  for (;;) {
    cddp_comm_abort(cddp_world_comm(t->w)); /* ends the buckets still in flight */
    if (t->dcomm) cddp_comm_abort(t->dcomm); /* NCCL's, DDP's own: ncclCommAbort */
    cddp__train_destroy_ddp(t);
    r = cddp_world_recover(t->w);
    if (r != CDDP_OK) break;
    if ((r = adopt_world(t)) != CDDP_OK) break;
    r = cddp__train_make_ddp(t);
    /* ZeRO-1 moved the parameters (relayout): an evaluation redone before the next step reads them */
    if (r == CDDP_OK && t->zero1.on) t->task->ops->bind(t->task, cddp__train_model_params(t), cddp__train_model_grads(t));
    if (r == CDDP_OK && kept) memcpy(cddp_ddp_residual(t->ddp), kept, res_len * sizeof *kept);
    if (r == CDDP_OK) r = sync_state(t, t_fail, old_world, old_accum, join, gen0);
    if (r == CDDP_OK || !cddp__train_recoverable(t, r)) break;
    CDDP_INFO(CDDP_SUB_TRAIN, "recovery interrupted (%s): again", cddp_last_error());
  }
  cddp__train_recovering = 0;
  cddp__zero1_drop_whole(t);
  free(kept);
  /* the world sizes again: the store may have moved, and its new host rebuilt only what the
   * agents hold (a joiner would then be taken into a world the batch cannot split) */
  if (r == CDDP_OK) cddp__train_publish_worlds(t);
  return r;
}

/* Staged: the device's state (the last committed step's) is what a survivor sends, and what
 * the re-formed world agreed on goes back to the device. */
static cddp_result_t recover_staged(trainer_t *t, uint64_t t_fail, int join) {
  cddp__train_state_pull(t);
  cddp_result_t r = recover_as(t, t_fail, join);
  if (r == CDDP_OK) cddp__train_state_push(t);
  return r;
}

cddp_result_t cddp__train_recover(trainer_t *t, uint64_t t_fail) { return recover_staged(t, t_fail, 0); }

cddp_result_t cddp__train_reform(trainer_t *t) { return recover_staged(t, cddp__now_ns(), 1); }

void cddp__train_publish_worlds(trainer_t *t) {
  if (t->rank != 0 || !cddp_world_can_recover(t->w)) return;
  const cddp_train_config_t *c = &t->cfg;
  long units = c->micro_batch > 0 ? c->global_batch / c->micro_batch : 0;
  int sizes[1024], n = 0;
  for (long w = 1; w <= units && n < (int)CDDP_ARRAY_LEN(sizes); w++)
    if (units % w == 0 && (long)c->micro_batch * units == c->global_batch) sizes[n++] = (int)w;
  (void)cddp_world_allow_sizes(t->w, sizes, n);
}

cddp_result_t cddp__train_join_as_replacement(trainer_t *t) {
  /* no ddp: a peer died while setup built it (see setup): straight to the next generation */
  cddp_result_t r =
      t->ddp ? sync_state(t, 0, t->world, t->accum, 0, cddp_world_generation(t->w) - 1) : CDDP_ABORTED;
  if (r == CDDP_OK) cddp__train_state_push(t);
  if (r != CDDP_OK && cddp__train_recoverable(t, r)) r = cddp__train_recover(t, 0);
  return r;
}

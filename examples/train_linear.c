/* train_linear.c - a trainer of its own on libcddp: softmax regression on synthetic data,
 * data-parallel over whatever launched it (cddp run, torchrun-style variables, srun, mpirun).
 *
 *   build/cddp run --standalone --nproc-per-node 2 build/examples/train_linear OUT_DIR [STEPS [DELAY_US]]
 *
 * It shows the four things a trainer needs from the library: join the world from the
 * environment, start every rank from rank 0's parameters, all-reduce its own flat gradient
 * buffer in buckets (started as "backward" produces them), and checkpoint / resume. It
 * resumes from the newest checkpoint in OUT_DIR by itself, and prints a checksum of the final
 * weights so a test can compare an interrupted run with an uninterrupted one. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cddp/ckpt.h"
#include "cddp/ddp.h"

enum { DIM = 64, CLASSES = 8, PER_RANK = 32, CKPT_EVERY = 10 };
#define NPARAM (DIM * CLASSES + CLASSES)

/* The data: sample i of the global stream is generated from i alone, so any world size
 * sees the same stream. Label = argmax of a fixed "teacher" projection. */
static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
static float uniform(uint64_t i, int j) { return (float)(mix(i * 1315423911ull + (uint64_t)j) >> 40) / (float)(1 << 24) - 0.5f; }
static void sample(uint64_t i, float *x, int *label) {
  for (int j = 0; j < DIM; j++) x[j] = uniform(i, j);
  float best = -1e30f;
  *label = 0;
  for (int c = 0; c < CLASSES; c++) {
    float s = 0;
    for (int j = 0; j < DIM; j++) s += x[j] * uniform(1000003 + (uint64_t)c, j);
    if (s > best) best = s, *label = c;
  }
}

/* Forward + backward of one sample: adds its cross-entropy gradient / batch to g. */
static float step_sample(const float *w, float *g, const float *x, int y, float scale) {
  float z[CLASSES], m = -1e30f, sum = 0;
  for (int c = 0; c < CLASSES; c++) {
    z[c] = w[DIM * CLASSES + c];
    for (int j = 0; j < DIM; j++) z[c] += w[c * DIM + j] * x[j];
    if (z[c] > m) m = z[c];
  }
  for (int c = 0; c < CLASSES; c++) sum += expf(z[c] - m);
  for (int c = 0; c < CLASSES; c++) {
    float p = expf(z[c] - m) / sum, d = (p - (c == y)) * scale;
    for (int j = 0; j < DIM; j++) g[c * DIM + j] += d * x[j];
    g[DIM * CLASSES + c] += d;
  }
  return logf(sum) + m - z[y];
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: train_linear OUT_DIR [STEPS [DELAY_US]]\n");
    return 2;
  }
  const char *out = argv[1];
  long steps = argc > 2 ? atol(argv[2]) : 60;
  long delay_us = argc > 3 ? atol(argv[3]) : 0; /* slows steps down, for tests that kill mid-run */
  cddp_world_t *w;
  if (cddp_world_join(&w, NULL) != CDDP_OK) {
    fprintf(stderr, "train_linear: %s\n", cddp_last_error());
    cddp_world_leave(w, 0); /* a failed join holds only why */
    return 1;
  }
  cddp_ddp_t *ddp;
  /* small buckets so even this model is reduced in several pieces */
  if (cddp_ddp_create(&ddp, cddp_world_comm(w), NPARAM, 1024, CDDP_SUM) != CDDP_OK) {
    fprintf(stderr, "train_linear: %s\n", cddp_last_error());
    cddp_world_leave(w, 0);
    return 1;
  }
  float *g = cddp_ddp_grads(ddp), *wt = calloc(NPARAM, sizeof(float));
  for (int i = 0; i < NPARAM; i++) wt[i] = 0.01f * uniform(7, i);
  long start = 0;
  char dir[512];
  /* resume: rank 0 finds and reads the newest checkpoint, the broadcast below shares it */
  if (cddp_world_rank(w) == 0 && cddp_ckpt_find_latest(out, dir, sizeof dir) == CDDP_OK) {
    cddp_ckpt_t *c;
    if (cddp_ckpt_load(dir, &c) == CDDP_OK) {
      const char *s = cddp_ckpt_meta(c, "step");
      if (s && cddp_ckpt_tensor(c, "model", "weight", wt, NPARAM) == CDDP_OK) start = atol(s);
      cddp_ckpt_close(c);
      printf("train_linear: resumed from %s at step %ld\n", dir, start);
    }
  }
  int64_t st = start;
  cddp_broadcast(cddp_world_comm(w), &st, 1, CDDP_I64, 0);
  start = st;
  cddp_ddp_broadcast(ddp, wt, 0); /* every rank starts from rank 0's weights */
  int batch = PER_RANK * cddp_world_size(w);
  float x[DIM], loss = 0;
  for (long s = start; s < steps; s++) {
    if (delay_us > 0) usleep((useconds_t)delay_us);
    cddp_ddp_begin(ddp);
    memset(g, 0, NPARAM * sizeof(float));
    loss = 0;
    for (int k = 0; k < PER_RANK; k++) {
      int y = 0;
      sample((uint64_t)s * (uint64_t)batch + (uint64_t)(cddp_world_rank(w) * PER_RANK + k), x, &y);
      loss += step_sample(wt, g, x, y, 1.0f / (float)batch);
    }
    cddp_ddp_grad_ready(ddp, 0); /* a one-layer "backward": everything is ready at once */
    if (cddp_ddp_finish(ddp) != CDDP_OK) {
      fprintf(stderr, "train_linear: rank %d: step %ld: %s\n", cddp_world_rank(w), s, cddp_last_error());
      cddp_world_leave(w, 0);
      return 1;
    }
    for (int i = 0; i < NPARAM; i++) wt[i] -= 0.5f * g[i];
    if (cddp_world_rank(w) == 0 && ((s + 1) % CKPT_EVERY == 0 || s + 1 == steps)) {
      char step_s[32];
      snprintf(step_s, sizeof step_s, "%ld", s + 1);
      cddp_tensor_view_t t = {"weight", 1, {NPARAM}, wt};
      cddp_meta_kv_t meta = {"step", step_s};
      cddp_ckpt_payload_t p = {&t, 1, NULL, 0, &meta, 1};
      if (cddp_ckpt_save(out, s + 1, &p, 2, NULL, 0) != CDDP_OK)
        fprintf(stderr, "train_linear: checkpoint: %s\n", cddp_last_error());
    }
  }
  double sum = 0;
  for (int i = 0; i < NPARAM; i++) sum += wt[i] * (double)(i + 1);
  if (cddp_world_rank(w) == 0) printf("train_linear: %ld steps, last local loss %.4f, weights checksum %.9e\n", steps, loss / PER_RANK, sum);
  cddp_ddp_destroy(ddp);
  free(wt);
  cddp_world_leave(w, 1);
  return 0;
}

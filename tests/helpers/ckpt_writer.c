/* ckpt_writer.c - saves checkpoints for the shell tests: tensors filled from the step so a
 * reader can check that a checkpoint's content matches its step.
 * usage: ckpt_writer ROOT FIRST_STEP COUNT KEEP ROWS   (COUNT 0: forever)
 * With COUNT > 0 it prints each checkpoint's path, then on stderr the mean save time
 * (ROWS 1820 is the size of the 784-1024-1024-10 MLP: 2 x 7.5 MB). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cddp/ckpt.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static float val(long step, int which, size_t j) {
  return (float)step + 0.25f * (float)(j % 97) + (float)which * 1000.0f;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: ckpt_writer ROOT FIRST_STEP COUNT KEEP ROWS\n");
    return 2;
  }
  const char *root = argv[1];
  long first = atol(argv[2]), count = atol(argv[3]);
  int keep = atoi(argv[4]), rows = atoi(argv[5]);
  size_t n[4] = {(size_t)rows * 1024, 1024, (size_t)rows * 1024, 1024};
  float *buf[4];
  int rc = 0;
  double total_ms = 0;
  for (int i = 0; i < 4; i++) buf[i] = malloc(n[i] * sizeof(float));
  for (long s = first; count == 0 || s < first + count; s++) {
    for (int i = 0; i < 4; i++)
      for (size_t j = 0; j < n[i]; j++) buf[i][j] = val(s, i, j);
    cddp_tensor_view_t w[2] = {{"fc1.weight", 2, {rows, 1024}, buf[0]}, {"fc1.bias", 1, {1024}, buf[1]}};
    cddp_tensor_view_t st[2] = {{"momentum.fc1.weight", 2, {rows, 1024}, buf[2]},
                                {"momentum.fc1.bias", 1, {1024}, buf[3]}};
    char step_s[32];
    snprintf(step_s, sizeof step_s, "%ld", s);
    cddp_meta_kv_t meta[3] = {{"trainer.step", step_s}, {"sampler.epoch", "0"}, {"note", "quote \" backslash \\ é"}};
    cddp_ckpt_payload_t p = {w, 2, st, 2, meta, 3};
    char dir[4096];
    double t0 = now_ms();
    if (cddp_ckpt_save(root, s, &p, keep, dir, sizeof dir) != CDDP_OK) {
      fprintf(stderr, "ckpt_writer: %s\n", cddp_last_error());
      rc = 1;
      break;
    }
    total_ms += now_ms() - t0;
    if (count) printf("%s\n", dir);
  }
  if (count && !rc)
    fprintf(stderr, "ckpt_writer: %ld saves of %.1f MB, mean %.1f ms\n", count,
            2.0 * (double)(n[0] + n[1]) * 4 / 1e6, total_ms / (double)count);
  for (int i = 0; i < 4; i++) free(buf[i]);
  return rc;
}

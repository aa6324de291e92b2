/* fuzz_metrics.c - libFuzzer target: metrics.jsonl as a resume finds it (any bytes: a torn write,
 * garbage, another program's file): the repair to the resumed step either refuses or leaves only
 * whole lines of steps and evals; and the number reader the plot and the trainer use. */
#include <stdint.h>
#include <string.h>

#include "fuzz_dir.h"
#include "trainer/metrics.h"

static void check_rewritten(const char *path, int64_t step) {
  FILE *f = fopen(path, "r");
  if (!f) __builtin_trap();
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  while ((n = getline(&line, &cap, f)) > 0) {
    double s;
    if (line[0] != '{' || line[n - 1] != '\n' || !cddp__metrics_num(line, "step", &s) || s > (double)step)
      __builtin_trap();
  }
  free(line);
  fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  int64_t step = data[0] % 64, need = data[1] % 64;
  data += 2, size -= 2;
  fuzz_dir_put("metrics.jsonl", data, size);
  char path[600];
  snprintf(path, sizeof path, "%s/metrics.jsonl", fuzz_dir_get());
  int64_t last = -2;
  if (cddp__metrics_trim(path, step, need, &last) == CDDP_OK) {
    if (last < -1) __builtin_trap();
    check_rewritten(path, step);
  }
  char *text = strndup((const char *)data, size); /* the numbers of any line, as plot reads them */
  double v;
  for (char *p = text; p && *p; p = strchr(p + 1, '\n'))
    (void)cddp__metrics_num(p, "loss", &v), (void)cddp__metrics_num(p, "step", &v);
  free(text);
  return 0;
}

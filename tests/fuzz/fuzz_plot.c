/* fuzz_plot.c - libFuzzer target: `cddp plot RUN_DIR` over a metrics.jsonl or a sweep.tsv of
 * arbitrary bytes: the numbers it reads, the tables and the gnuplot script it writes. gnuplot
 * itself is /bin/true here (what the script does is test_plot.sh's and test_hostile_files.sh's). */
#include <stdint.h>
#include <string.h>

#include "cli/commands.h"
#include "fuzz_dir.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  if (!freopen("/dev/null", "w", stdout)) abort(); /* the report; libFuzzer writes to stderr */
  fuzz_dir_link("gnuplot", "/bin/true");
  setenv("PATH", fuzz_dir_get(), 1);
  return 0;
}

/* data[0] & 1: the bytes are a sweep's sweep.tsv, else a run's metrics.jsonl */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int sweep = data[0] & 1;
  fuzz_dir_put("metrics.jsonl", data + 1, size - 1);
  char tsv[600], out[600];
  snprintf(tsv, sizeof tsv, "%s/sweep.tsv", fuzz_dir_get());
  if (sweep) fuzz_dir_put("sweep.tsv", data + 1, size - 1);
  else unlink(tsv);
  snprintf(out, sizeof out, "%s/plot.png", fuzz_dir_get());
  char *argv[] = {"plot", (char *)fuzz_dir_get(), "--out", out, NULL};
  int rc = cddp__cmd_plot(4, argv);
  if (rc < 0 || rc > 2) __builtin_trap();
  return 0;
}

/* cmd_bench.c - `cddp bench` (placeholder until its issue slice lands). */
#include <stdio.h>

#include "cli/commands.h"

int cddp_cmd_bench(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "cddp bench: not built yet\n");
  return 2;
}

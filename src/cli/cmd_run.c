/* cmd_run.c - `cddp run` (placeholder until its issue slice lands). */
#include <stdio.h>

#include "cli/commands.h"

int cddp_cmd_run(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "cddp run: not built yet\n");
  return 2;
}

/* cmd_store.c - `cddp store` (placeholder until its issue slice lands). */
#include <stdio.h>

#include "cli/commands.h"

int cddp_cmd_store(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "cddp store: not built yet\n");
  return 2;
}

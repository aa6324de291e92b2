/* flags.c - command-line flag matching shared by the subcommands. */
#include <string.h>

#include "cli/flags.h"

const char *cddp__flag_value(int argc, char **argv, int *i, const char *flag, int *missing) {
  size_t n = strlen(flag);
  if (strncmp(argv[*i], flag, n) != 0) return NULL;
  if (argv[*i][n] == '=') return argv[*i] + n + 1;
  if (argv[*i][n] != '\0') return NULL;
  if (*i + 1 >= argc) {
    *missing = 1;
    return NULL;
  }
  return argv[++*i];
}

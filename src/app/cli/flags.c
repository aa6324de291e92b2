/* flags.c - the subcommands' one flag loop: match, take the value, parse it, say what is wrong. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/flags.h"

/* When argv[*i] is flag (alone, then the value is the next argument, or "flag=VALUE"),
 * returns the value and advances *i past it; else NULL. A flag given last without its value
 * sets *missing. */
static const char *match(int argc, char **argv, int *i, const char *flag, int *missing) {
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

/* 0 when v is a whole number of the flag's kind within its range, stored in f->dst. */
static int parse_value(const cddp__flag_t *f, const char *v) {
  char *end;
  errno = 0;
  switch (f->kind) {
  case CDDP__FLAG_STR: *(const char **)f->dst = v; return 0;
  case CDDP__FLAG_LONG: {
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < f->lo || x > f->hi) return -1;
    *(long *)f->dst = x;
    return 0;
  }
  case CDDP__FLAG_DOUBLE: {
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= f->lo && x <= f->hi)) return -1;
    *(double *)f->dst = x;
    return 0;
  }
  case CDDP__FLAG_U64: {
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end) return -1;
    *(uint64_t *)f->dst = (uint64_t)x;
    return 0;
  }
  case CDDP__FLAG_FN: return f->fn(v, f->dst);
  default: return -1;
  }
}

int cddp__flags_parse(const cddp__cli_t *c, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      c->usage(stdout);
      return 0;
    }
    const char *v = NULL;
    int missing = 0, k;
    for (k = 0; k < c->n_flags && !v && !missing; k++) {
      v = match(argc, argv, &i, c->flags[k].name, &missing);
      if (!v && !missing && c->flags[k].alias) v = match(argc, argv, &i, c->flags[k].alias, &missing);
    }
    if (missing) {
      fprintf(stderr, "cddp %s: %s needs a value\n", c->cmd, argv[i]);
      return 2;
    }
    if (!v) {
      if (argv[i][0] != '-' && c->positional && *c->n_positional < c->max_positional) {
        c->positional[(*c->n_positional)++] = argv[i];
        continue;
      }
      if (c->positional && (argv[i][0] != '-' || !argv[i][1]))
        fprintf(stderr, "cddp %s: unexpected argument '%s' (cddp %s --help)\n", c->cmd, argv[i], c->cmd);
      else
        fprintf(stderr, "cddp %s: unknown option '%s' (cddp %s --help lists them)\n", c->cmd, argv[i], c->cmd);
      return 2;
    }
    const cddp__flag_t *f = &c->flags[k - 1];
    if (f->kind == CDDP__FLAG_LIST && (!f->fn || f->fn(v, NULL) == 0)) {
      if (*f->count == f->max) {
        fprintf(stderr, "cddp %s: more than %d %s\n", c->cmd, f->max, f->name);
        return 2;
      }
      ((const char **)f->dst)[(*f->count)++] = v;
    } else if (f->kind == CDDP__FLAG_LIST || parse_value(f, v) != 0) {
      fprintf(stderr, "cddp %s: %s %s: expected %s\n", c->cmd, f->name, v, f->expect ? f->expect : "another value");
      return 2;
    }
  }
  return -1;
}

/* flags.h - the one command-line loop of the subcommands: a table of flags per command, each
 * value parsed once, --help, and the same one-line errors naming the flag. */
#ifndef CDDP_CLI_FLAGS_H
#define CDDP_CLI_FLAGS_H

#include <stdint.h>
#include <stdio.h>

typedef enum cddp__flag_kind {
  CDDP__FLAG_STR,    /* const char *, the argument itself */
  CDDP__FLAG_LIST,   /* repeatable: const char *[max] at dst, how many at *count; fn, when
                        set, checks each (called with dst NULL) */
  CDDP__FLAG_LONG,   /* long within [lo, hi] */
  CDDP__FLAG_DOUBLE, /* double within [lo, hi] */
  CDDP__FLAG_U64,    /* uint64_t, decimal */
  CDDP__FLAG_FN,     /* fn parses it into dst */
} cddp__flag_kind_t;

typedef struct cddp__flag {
  const char *name;  /* "--config", "-n" */
  const char *alias; /* another spelling ("--config_path"), or NULL */
  cddp__flag_kind_t kind;
  void *dst;
  double lo, hi;      /* LONG, DOUBLE: the range */
  const char *expect; /* LONG, DOUBLE, U64, FN: what a bad value is told it should be */
  int *count, max;    /* LIST */
  int (*fn)(const char *v, void *dst); /* FN: 0 parsed, else the value is bad (expect says why) */
} cddp__flag_t;

/* Table rows (designated, so the fields a kind does not use stay zero). */
#define CDDP__FLAG_STR_ROW(n, a, d) {.name = (n), .alias = (a), .kind = CDDP__FLAG_STR, .dst = (d)}
#define CDDP__FLAG_LIST_ROW(n, d, cnt, mx, check, e) \
  {.name = (n), .kind = CDDP__FLAG_LIST, .dst = (d), .count = (cnt), .max = (mx), .fn = (check), .expect = (e)}
#define CDDP__FLAG_LONG_ROW(n, d, l, h, e) \
  {.name = (n), .kind = CDDP__FLAG_LONG, .dst = (d), .lo = (l), .hi = (h), .expect = (e)}
#define CDDP__FLAG_DOUBLE_ROW(n, d, l, h, e) \
  {.name = (n), .kind = CDDP__FLAG_DOUBLE, .dst = (d), .lo = (l), .hi = (h), .expect = (e)}
#define CDDP__FLAG_U64_ROW(n, d, e) {.name = (n), .kind = CDDP__FLAG_U64, .dst = (d), .expect = (e)}
#define CDDP__FLAG_FN_ROW(n, d, f, e) {.name = (n), .kind = CDDP__FLAG_FN, .dst = (d), .fn = (f), .expect = (e)}

typedef struct cddp__cli {
  const char *cmd; /* "train": messages read "cddp train: ..." */
  const cddp__flag_t *flags;
  int n_flags;
  void (*usage)(FILE *f);
  const char **positional; /* where bare arguments go, or NULL when the command takes none */
  int max_positional, *n_positional;
} cddp__cli_t;

/* Parses argv[1..] against c's table: "--flag VALUE" or "--flag=VALUE"; --help / -h prints
 * usage to stdout. Returns -1 when the command goes on, 0 after --help, 2 after a usage error,
 * said in one line on stderr: "cddp CMD: FLAG needs a value", "cddp CMD: unknown option 'X'
 * (cddp CMD --help lists them)", "cddp CMD: FLAG VALUE: expected WHAT", "cddp CMD: more than
 * MAX FLAG", "cddp CMD: unexpected argument 'X' (cddp CMD --help)". */
int cddp__flags_parse(const cddp__cli_t *c, int argc, char **argv);

#endif /* CDDP_CLI_FLAGS_H */

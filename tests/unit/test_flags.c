/* test_flags.c - the subcommands' one flag loop: both spellings and "=VALUE", values parsed by
 * kind and range, --help, positionals, and the one-line errors that name the flag. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/flags.h"
#include "test.h"

static int usage_calls;
static void usage(FILE *f) { usage_calls++, fprintf(f, "usage: cddp demo\n"); }
static int even(const char *v, void *dst) {
  long x = atol(v);
  if (x % 2) return -1;
  if (dst) *(long *)dst = x;
  return 0;
}

typedef struct demo {
  const char *name, *sets[2], *pos[1];
  int n_sets, n_pos;
  long count, evenv;
  double rate;
  uint64_t seed;
} demo_t;

/* Parses args (NULL-terminated, without the command), stderr captured into err, stdout dropped. */
static int run(demo_t *d, char *err, size_t cap, const char *const *args) {
  char *argv[16] = {"demo"};
  int argc = 1;
  while (*args) argv[argc++] = (char *)*args++;
  memset(d, 0, sizeof *d);
  const cddp__flag_t flags[] = {
      CDDP__FLAG_STR_ROW("--name", "--nick", &d->name),
      CDDP__FLAG_LIST_ROW("--set", d->sets, &d->n_sets, 2, NULL, NULL),
      CDDP__FLAG_LONG_ROW("-n", &d->count, 0, 10, "0..10"),
      CDDP__FLAG_DOUBLE_ROW("--rate", &d->rate, 0.5, 2, "a number in [0.5, 2]"),
      CDDP__FLAG_U64_ROW("--seed", &d->seed, "a number"),
      CDDP__FLAG_FN_ROW("--even", &d->evenv, even, "an even number"),
  };
  const cddp__cli_t cli = {.cmd = "demo", .flags = flags, .n_flags = 6, .usage = usage, .positional = d->pos,
                           .max_positional = 1, .n_positional = &d->n_pos};
  fflush(stdout), fflush(stderr);
  FILE *tmp = tmpfile(), *null = fopen("/dev/null", "w");
  int saved = dup(2), saved_out = dup(1);
  dup2(fileno(tmp), 2), dup2(fileno(null), 1); /* usage on stdout is not TAP */
  int rc = cddp__flags_parse(&cli, argc, argv);
  fflush(stdout), fflush(stderr);
  dup2(saved, 2), dup2(saved_out, 1);
  close(saved), close(saved_out), fclose(null);
  rewind(tmp);
  size_t n = fread(err, 1, cap - 1, tmp);
  err[n] = '\0';
  fclose(tmp);
  return rc;
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define CHECK_STR(a, b) \
  do { if (strcmp((a), (b)) != 0) TEST_FAIL("'%s' != '%s'", (a), (b)); } while (0)

TEST(flags_values_by_kind_and_spelling) {
  demo_t d;
  char err[512];
  CHECK_EQ(run(&d, err, sizeof err, ARGS("--nick", "x", "--set", "a=1", "--set=b=2", "-n", "7", "--rate=1.5",
                                         "--seed", "18446744073709551615", "--even", "4", "dir")), -1);
  CHECK_STR(err, "");
  CHECK_STR(d.name, "x");
  CHECK_EQ(d.n_sets, 2);
  CHECK_STR(d.sets[0], "a=1");
  CHECK_STR(d.sets[1], "b=2");
  CHECK_EQ(d.count, 7);
  CHECK_NEAR(d.rate, 1.5, 0);
  CHECK(d.seed == UINT64_MAX);
  CHECK_EQ(d.evenv, 4);
  CHECK_EQ(d.n_pos, 1);
  CHECK_STR(d.pos[0], "dir");
  CHECK_EQ(run(&d, err, sizeof err, ARGS("--name=")), -1); /* an empty value is a value */
  CHECK_STR(d.name, "");
}

TEST(flags_help_prints_usage_to_stdout) {
  demo_t d;
  char err[512];
  usage_calls = 0;
  CHECK_EQ(run(&d, err, sizeof err, ARGS("-n", "1", "--help", "--bogus")), 0);
  CHECK_EQ(usage_calls, 1);
  CHECK_STR(err, "");
  CHECK_EQ(run(&d, err, sizeof err, ARGS("-h")), 0);
  CHECK_EQ(run(&d, err, sizeof err, ARGS("--name", "-h")), -1); /* a value, not a request for help */
  CHECK_STR(d.name, "-h");
}

TEST(flags_errors_are_one_line_naming_the_flag) {
  demo_t d;
  char err[512];
  CHECK_EQ(run(&d, err, sizeof err, ARGS("--name")), 2);
  CHECK_STR(err, "cddp demo: --name needs a value\n");
  CHECK_EQ(run(&d, err, sizeof err, ARGS("--bogus")), 2);
  CHECK_STR(err, "cddp demo: unknown option '--bogus' (cddp demo --help lists them)\n");
  CHECK_EQ(run(&d, err, sizeof err, ARGS("--names", "x")), 2); /* a prefix is not a match */
  CHECK_STR(err, "cddp demo: unknown option '--names' (cddp demo --help lists them)\n");
  CHECK_EQ(run(&d, err, sizeof err, ARGS("-n", "11")), 2);
  CHECK_STR(err, "cddp demo: -n 11: expected 0..10\n");
  CHECK_EQ(run(&d, err, sizeof err, ARGS("-n", "3x")), 2);
  CHECK_STR(err, "cddp demo: -n 3x: expected 0..10\n");
  CHECK_EQ(run(&d, err, sizeof err, ARGS("--rate", "0.1")), 2);
  CHECK_STR(err, "cddp demo: --rate 0.1: expected a number in [0.5, 2]\n");
  CHECK_EQ(run(&d, err, sizeof err, ARGS("--rate", "nan")), 2);
  CHECK_EQ(run(&d, err, sizeof err, ARGS("--seed", "x")), 2);
  CHECK_STR(err, "cddp demo: --seed x: expected a number\n");
  CHECK_EQ(run(&d, err, sizeof err, ARGS("--even", "3")), 2);
  CHECK_STR(err, "cddp demo: --even 3: expected an even number\n");
  CHECK_EQ(run(&d, err, sizeof err, ARGS("--set", "a", "--set", "b", "--set", "c")), 2);
  CHECK_STR(err, "cddp demo: more than 2 --set\n");
  CHECK_EQ(run(&d, err, sizeof err, ARGS("one", "two")), 2);
  CHECK_STR(err, "cddp demo: unexpected argument 'two' (cddp demo --help)\n");
}

/* cmd_plot.c - `cddp plot RUN_DIR`: loss (train and eval), throughput and exposed
 * communication per step, drawn by gnuplot from the run's metrics.jsonl into a PNG or SVG. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/flags.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: cddp plot RUN_DIR [--out FILE] [--title TEXT]\n"
          "  RUN_DIR        a run folder of cddp train (holds metrics.jsonl)\n"
          "  --out FILE     where to draw (default RUN_DIR/metrics.png); .svg draws SVG\n"
          "  --title TEXT   the title (default: the run's name)\n"
          "Draws three panels against the step: train and eval loss, samples/s, and the exposed\n"
          "communication (ms, and %% of step time). Needs gnuplot (apt-get install gnuplot-nox).\n");
}

/* The number after "key": in a JSON line of metrics.jsonl (our own flat format). */
static int json_num(const char *line, const char *key, double *out) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(line, pat);
  if (!p) return 0;
  char *end;
  *out = strtod(p + strlen(pat), &end);
  return end != p + strlen(pat);
}

/* Splits metrics.jsonl into two whitespace tables for gnuplot. Returns the step lines seen. */
static long split_metrics(FILE *in, FILE *steps, FILE *evals, long *n_eval) {
  char line[4096];
  long n = 0;
  *n_eval = 0;
  while (fgets(line, sizeof line, in)) {
    double step, loss, v1, v2;
    if (!json_num(line, "step", &step) || !json_num(line, "loss", &loss)) continue;
    if (strstr(line, "\"eval\":true")) {
      if (!json_num(line, "accuracy", &v1)) v1 = 0;
      fprintf(evals, "%.0f %.9g %.9g\n", step, loss, v1);
      (*n_eval)++;
      continue;
    }
    double rate = 0, comm = 0, total = 0;
    json_num(line, "samples_per_s", &rate);
    json_num(line, "comm_ms", &comm);
    json_num(line, "step_ms", &total);
    v2 = total > 0 ? 100.0 * comm / total : 0;
    fprintf(steps, "%.0f %.9g %.9g %.9g %.9g\n", step, loss, rate, comm, v2);
    n++;
  }
  return n;
}

static int run_gnuplot(const char *script) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int devnull = open("/dev/null", 0);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execlp("gnuplot", "gnuplot", script, (char *)NULL);
    _exit(127);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

int cddp_cmd_plot(int argc, char **argv) {
  const char *dir = NULL, *out = NULL, *title = NULL;
  for (int i = 1; i < argc; i++) {
    int missing = 0;
    const char *v;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--out", &missing))) {
      out = v;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--title", &missing))) {
      title = v;
    } else if (missing) {
      fprintf(stderr, "cddp plot: %s needs a value\n", argv[i]);
      return 2;
    } else if (argv[i][0] == '-' || dir) {
      fprintf(stderr, "cddp plot: unexpected argument '%s' (cddp plot --help)\n", argv[i]);
      return 2;
    } else {
      dir = argv[i];
    }
  }
  if (!dir) {
    fprintf(stderr, "cddp plot: RUN_DIR is required (a run folder of cddp train, e.g. runs/fmnist_mlp)\n");
    return 2;
  }
  char path[4096], outbuf[4096];
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  FILE *in = fopen(path, "r");
  if (!in) {
    fprintf(stderr, "cddp plot: cannot read %s: %s\n", path, strerror(errno));
    return 1;
  }
  if (!out) snprintf(outbuf, sizeof outbuf, "%s/metrics.png", dir), out = outbuf;
  if (!title) {
    const char *base = strrchr(dir, '/');
    title = base && base[1] ? base + 1 : dir;
  }
  char tmp[] = "/tmp/cddp-plot.XXXXXX";
  if (!mkdtemp(tmp)) {
    fprintf(stderr, "cddp plot: cannot make a temporary directory: %s\n", strerror(errno));
    fclose(in);
    return 1;
  }
  char steps_p[64], evals_p[64], script_p[64];
  snprintf(steps_p, sizeof steps_p, "%s/steps.dat", tmp);
  snprintf(evals_p, sizeof evals_p, "%s/evals.dat", tmp);
  snprintf(script_p, sizeof script_p, "%s/plot.gp", tmp);
  FILE *steps = fopen(steps_p, "w"), *evals = fopen(evals_p, "w");
  long n_eval = 0, n = steps && evals ? split_metrics(in, steps, evals, &n_eval) : -1;
  fclose(in);
  if (steps) fclose(steps);
  if (evals) fclose(evals);
  int rc = 1;
  if (n <= 0) {
    fprintf(stderr, "cddp plot: %s has no step lines to plot\n", path);
    goto out;
  }
  const char *dot = strrchr(out, '.');
  int svg = dot && !strcmp(dot, ".svg");
  FILE *gp = fopen(script_p, "w");
  if (!gp) {
    fprintf(stderr, "cddp plot: cannot write %s: %s\n", script_p, strerror(errno));
    goto out;
  }
  /* gnuplot strings are single-quoted: a quote in a path or title is doubled */
  fprintf(gp, "set terminal %s size 900,1000\nset output '", svg ? "svg" : "pngcairo");
  for (const char *c = out; *c; c++) fprintf(gp, *c == '\'' ? "''" : "%c", *c);
  fprintf(gp, "'\nset multiplot layout 3,1 title '");
  for (const char *c = title; *c; c++) fprintf(gp, *c == '\'' ? "''" : "%c", *c);
  fprintf(gp,
          "'\nset grid\nset xlabel 'step'\nset key top right\n"
          "set ylabel 'loss'\n"
          "plot '%s' using 1:2 with lines lw 1 title 'train loss'%s%s%s\n"
          "set ylabel 'samples/s'\nunset key\n"
          "plot '%s' using 1:3 with lines lw 1\n"
          "set ylabel 'exposed comm (ms)'\nset y2label '%% of step'\nset y2tics\nset key top right\n"
          "plot '%s' using 1:4 with lines lw 1 title 'ms', '' using 1:5 axes x1y2 with lines lw 1 title '%% of step'\n"
          "unset multiplot\n",
          steps_p, n_eval ? ", '" : "", n_eval ? evals_p : "",
          n_eval ? "' using 1:2 with linespoints pt 7 lw 2 title 'eval loss'" : "", steps_p, steps_p);
  fclose(gp);
  int g = run_gnuplot(script_p);
  if (g == 127) {
    fprintf(stderr, "cddp plot: gnuplot is not installed (apt-get install gnuplot-nox)\n");
  } else if (g != 0) {
    fprintf(stderr, "cddp plot: gnuplot failed (exit %d) drawing %s\n", g, out);
  } else {
    printf("cddp plot: %ld steps, %ld evaluations -> %s\n", n, n_eval, out);
    rc = 0;
  }
out:
  unlink(steps_p), unlink(evals_p), unlink(script_p), rmdir(tmp);
  return rc;
}

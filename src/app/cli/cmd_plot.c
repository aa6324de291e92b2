/* cmd_plot.c - `cddp plot RUN_DIR`: loss (train and eval), eval accuracy, throughput, exposed
 * communication and each rank's own work per step, drawn by gnuplot from the run's metrics.jsonl into a PNG,
 * SVG or PDF. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/flags.h"
#include "common/io.h"
#include "trainer/metrics.h"
#include "common/check.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: cddp plot RUN_DIR [--out FILE] [--title TEXT]\n"
          "  RUN_DIR        a run folder of cddp train (holds metrics.jsonl), or a sweep's folder\n"
          "                 (cddp bench train --sweep: holds sweep.tsv; drawn as bars per setting)\n"
          "  --out FILE     where to draw (default RUN_DIR/metrics.png): FILE.png, FILE.svg or FILE.pdf\n"
          "  --title TEXT   the title, drawn as written (default: the run's name)\n"
          "Draws panels against the step, their x-axes aligned: train and eval loss, eval accuracy\n"
          "(when an evaluation measured it), samples/s (tokens/s for text models), the exposed\n"
          "communication (ms, and %% of step time), and each rank's own work (compute + data +\n"
          "optimizer ms, at log.rank_every steps, when the run had several ranks): the spread a\n"
          "straggler shows as. Needs gnuplot (apt-get install gnuplot-nox).\n");
}


/* What split_metrics found: the counts, and what the panels need to know. */
typedef struct plot_data {
  long steps, evals;
  int tokens;        /* tokens_per_s differs from samples_per_s: a text model, counted in tokens */
  int accuracy;      /* an evaluation measured accuracy (-1 means the task has none) */
  double acc_lo, acc_hi;
  double first, last; /* the steps' range: every panel's x-axis */
  int ranks;          /* the most ranks a per-rank line had (0: none had several) */
  double mean_ms, mean_pct; /* exposed comm, moving mean over about PLOT_MEAN_STEPS steps */
} plot_data_t;

/* Exposed comm per step is noisy (the scheduler's as much as ours): at 700 steps two raw series
 * are a blur. Its panel draws each step faintly and a moving mean over this many steps boldly. */
#define PLOT_MEAN_STEPS 20

#define PLOT_RANKS_MAX 64 /* more ranks than this in one panel are not readable: the first 64 */

/* A per-rank line's "ranks":[{"rank":R,"compute_ms":..,"data_ms":..,"optim_ms":..,...},...]: each
 * rank's own work (ms) into work[R]; how many ranks. */
static int rank_work(const char *line, double *work) {
  const char *p = strstr(line, "\"ranks\":[");
  int n = 0;
  for (int r = 0; r < PLOT_RANKS_MAX; r++) work[r] = NAN; /* a rank the line lacks: no point */
  while (p && (p = strstr(p, "{\"rank\":"))) {
    const char *end = strchr(p, '}');
    if (!end) break;
    char obj[512];
    snprintf(obj, sizeof obj, "%.*s", (int)CDDP_MIN((size_t)(end - p), sizeof obj - 1), p);
    double r = -1, c = 0, d = 0, o = 0;
    cddp__metrics_num(obj, "rank", &r), cddp__metrics_num(obj, "compute_ms", &c), cddp__metrics_num(obj, "data_ms", &d), cddp__metrics_num(obj, "optim_ms", &o);
    if (r >= 0 && r < PLOT_RANKS_MAX) {
      work[(int)r] = c + d + o;
      if ((int)r + 1 > n) n = (int)r + 1;
    }
    p = end;
  }
  return n;
}

/* Splits metrics.jsonl into three whitespace tables for gnuplot: steps (step loss samples/s
 * tokens/s comm-ms comm-%), evals (step loss accuracy) and ranks (step, then each rank's work in
 * ms, NaN where a rank was not there). */
static void split_metrics(FILE *in, FILE *steps, FILE *evals, FILE *ranks, plot_data_t *d) {
  char line[16384];
  *d = (plot_data_t){0};
  while (fgets(line, sizeof line, in)) {
    double step, loss, acc;
    if (!cddp__metrics_num(line, "step", &step) || !cddp__metrics_num(line, "loss", &loss)) continue;
    if (strstr(line, "\"eval\":true")) {
      if (!cddp__metrics_num(line, "accuracy", &acc)) acc = -1;
      if (acc >= 0 && (!d->accuracy || acc < d->acc_lo)) d->acc_lo = acc;
      if (acc >= 0 && (!d->accuracy || acc > d->acc_hi)) d->acc_hi = acc;
      if (acc >= 0) d->accuracy = 1;
      fprintf(evals, "%.0f %.9g %.9g\n", step, loss, acc);
      d->evals++;
      continue;
    }
    double rate = 0, tokens = 0, comm = 0, total = 0;
    cddp__metrics_num(line, "samples_per_s", &rate);
    if (!cddp__metrics_num(line, "tokens_per_s", &tokens)) tokens = rate;
    if (tokens > rate * 1.001) d->tokens = 1;
    cddp__metrics_num(line, "comm_ms", &comm);
    cddp__metrics_num(line, "step_ms", &total);
    double pct = total > 0 ? 100.0 * comm / total : 0, a = 2.0 / (PLOT_MEAN_STEPS + 1); /* exponential: one pass */
    d->mean_ms = d->steps ? d->mean_ms + a * (comm - d->mean_ms) : comm;
    d->mean_pct = d->steps ? d->mean_pct + a * (pct - d->mean_pct) : pct;
    fprintf(steps, "%.0f %.9g %.9g %.9g %.9g %.9g %.9g %.9g\n", step, loss, rate, tokens, comm, pct, d->mean_ms,
            d->mean_pct);
    double work[PLOT_RANKS_MAX];
    int n = rank_work(line, work);
    if (n > 1) {
      fprintf(ranks, "%.0f", step);
      for (int r = 0; r < n; r++) fprintf(ranks, " %.6g", work[r]);
      fputc('\n', ranks);
      if (n > d->ranks) d->ranks = n;
    }
    if (!d->steps || step < d->first) d->first = step;
    if (!d->steps || step > d->last) d->last = step;
    d->steps++;
  }
}

static int panels_of(const plot_data_t *d) { return 3 + d->accuracy + (d->ranks > 0); }

/* A gnuplot single-quoted string: a quote is doubled, and a control character (a newline
 * would end the string and start a command of the reader's choosing: system("...")) is drawn
 * as a space. Paths never come here with one (has_control refuses them first). */
static void put_quoted(FILE *gp, const char *s) {
  fputc('\'', gp);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++)
    fprintf(gp, *c == '\'' ? "''" : "%c", *c < 0x20 || *c == 0x7f ? ' ' : *c);
  fputc('\'', gp);
}

static int has_control(const char *s) {
  for (const unsigned char *c = (const unsigned char *)s; *c; c++)
    if (*c < 0x20 || *c == 0x7f) return 1;
  return 0;
}

/* The terminal for out's extension: pngcairo, svg or pdfcairo; NULL for anything else. */
static const char *terminal_for(const char *out, int panels, char *buf, size_t cap) {
  const char *dot = strrchr(out, '.');
  if (!dot || strchr(dot, '/')) return NULL;
  if (!strcmp(dot, ".png")) snprintf(buf, cap, "pngcairo noenhanced size 900,%d", 100 + 270 * panels);
  else if (!strcmp(dot, ".svg")) snprintf(buf, cap, "svg noenhanced size 900,%d", 100 + 270 * panels);
  else if (!strcmp(dot, ".pdf")) snprintf(buf, cap, "pdfcairo noenhanced size 8in,%.1fin", 0.8 + 2.4 * panels);
  else return NULL;
  return buf;
}

/* The gnuplot script. Text is drawn as written (noenhanced: '_' in a run name is no
 * subscript); fixed margins and one x range make the panels' x-axes line up. */
static void write_script(FILE *gp, const char *term, const char *out, const char *title, const char *steps_p,
                         const char *evals_p, const char *ranks_p, const plot_data_t *d) {
  double lo = d->first, hi = d->last > d->first ? d->last : d->first + 1;
  fprintf(gp, "set terminal %s\nset output ", term);
  put_quoted(gp, out);
  fprintf(gp, "\nset multiplot layout %d,1 title ", panels_of(d));
  put_quoted(gp, title);
  fprintf(gp, "\nset grid\nset lmargin 12\nset rmargin 12\nset xrange [%.17g:%.17g]\nset xlabel 'step'\n", lo, hi);
  fprintf(gp, "set key top right\nset ylabel 'loss'\nplot '%s' using 1:2 with lines lw 1 title 'train loss'", steps_p);
  if (d->evals) fprintf(gp, ", '%s' using 1:2 with linespoints pt 7 lw 2 title 'eval loss'", evals_p);
  if (d->accuracy) { /* one evaluation: a range around it, not gnuplot's warning of an empty one */
    fprintf(gp, "\nunset key\nset ylabel 'eval accuracy'\nset yrange [%.6f:%.6f]\n", d->acc_lo - 0.01, d->acc_hi + 0.01);
    fprintf(gp, "plot '%s' using 1:($3 >= 0 ? $3 : NaN) with linespoints pt 7 lw 2\nset autoscale y", evals_p);
  }
  fprintf(gp,
          "\nunset key\nset ylabel '%s'\nplot '%s' using 1:%d with lines lw 1\n"
          "set ylabel 'exposed comm (ms)'\nset y2label '%% of step'\nset y2tics\n"
          "set key outside top center horizontal\n" /* above the panel: never over the data */
          "plot '%s' using 1:5 with lines lw 1 lc rgb '#b8c8e0' title 'ms, each step', "
          "'' using 1:7 with lines lw 2 lc rgb '#1f4e9a' title 'ms, moving mean (~%d steps)', "
          "'' using 1:8 axes x1y2 with lines lw 2 lc rgb '#c0392b' title '%% of step, moving mean'\n"
          "set key inside vertical\n",
          d->tokens ? "tokens/s" : "samples/s", steps_p, d->tokens ? 4 : 3, steps_p, PLOT_MEAN_STEPS);
  if (d->ranks) /* rows are ragged when the world grew: a missing column is no point */
    fprintf(gp,
            "unset y2label\nunset y2tics\nset ylabel 'own work per rank (ms)'\nset key top right %s\n"
            "plot for [i=2:%d] '%s' using 1:(valid(i) ? column(i) : NaN) with linespoints pt 7 ps 0.5 lw 1 "
            "title sprintf('rank %%d', i - 2)\n",
            d->ranks > 8 ? "maxrows 4" : "", d->ranks + 1, ranks_p);
  fprintf(gp, "unset multiplot\n");
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

/* A sweep's folder (cddp bench train --sweep wrote sweep.tsv): throughput and peak RSS per
 * setting, as bars. 0, or 1 after one line saying why not. */
static int plot_sweep(const char *tsv, const char *out, const char *term_for_2, const char *title) {
  int fd = cddp__open_regular(tsv); /* never blocking on a FIFO */
  FILE *in = fd >= 0 ? fdopen(fd, "r") : NULL;
  if (fd >= 0 && !in) close(fd);
  char line[4096], unit[32] = "samples/s", axes[512] = "setting";
  int rows = 0;
  while (in && fgets(line, sizeof line, in)) {
    if (line[0] == '#') {
      if (strstr(line, "tokens_per_s")) snprintf(unit, sizeof unit, "tokens/s");
      if (!strncmp(line, "# axes: ", 8)) line[strcspn(line, "\n")] = '\0', snprintf(axes, sizeof axes, "%.500s", line + 8);
    } else {
      rows++;
    }
  }
  if (in) fclose(in);
  if (rows == 0) {
    fprintf(stderr, "cddp plot: %s has no finished runs to plot\n", tsv);
    return 1;
  }
  char tmp[] = "/tmp/cddp-plot.XXXXXX", script[64];
  if (!mkdtemp(tmp)) {
    fprintf(stderr, "cddp plot: cannot make a temporary directory: %s\n", strerror(errno));
    return 1;
  }
  snprintf(script, sizeof script, "%s/plot.gp", tmp);
  FILE *gp = fopen(script, "w");
  int rc = 1;
  if (gp) {
    fprintf(gp, "set terminal %s\nset output ", term_for_2);
    put_quoted(gp, out);
    fprintf(gp, "\nset multiplot layout 2,1 title ");
    put_quoted(gp, title);
    fprintf(gp,
            "\nset datafile separator '\\t'\nset style data histograms\nset style fill solid 0.6 border -1\n"
            "set boxwidth 0.8\nset grid ytics\nset lmargin 12\nset rmargin 4\nset bmargin 7\nunset key\n"
            "set xtics rotate by -25 left font ',8'\nset yrange [0:*]\nset xlabel ");
    put_quoted(gp, axes);
    fprintf(gp, "\nset ylabel '%s'\nplot ", unit); /* the path quoted: a folder's name may hold a quote */
    put_quoted(gp, tsv);
    fprintf(gp, " using 3:xtic(2)\nset ylabel 'peak RSS (MB)'\nplot ");
    put_quoted(gp, tsv);
    fprintf(gp, " using 6:xtic(2)\nunset multiplot\n");
    fclose(gp);
    int g = run_gnuplot(script);
    if (g == 127) fprintf(stderr, "cddp plot: gnuplot is not installed (apt-get install gnuplot-nox)\n");
    else if (g != 0) fprintf(stderr, "cddp plot: gnuplot failed (exit %d) drawing %s\n", g, out);
    else printf("cddp plot: a sweep of %d runs -> %s\n", rows, out), rc = 0;
  }
  unlink(script), rmdir(tmp);
  return rc;
}

int cddp__cmd_plot(int argc, char **argv) {
  const char *dir = NULL, *out = NULL, *title = NULL;
  int n_dir = 0;
  const cddp__flag_t flags[] = {
      CDDP__FLAG_STR_ROW("--out", NULL, &out),
      CDDP__FLAG_STR_ROW("--title", NULL, &title),
  };
  const cddp__cli_t cli = {.cmd = "plot", .flags = flags, .n_flags = 2, .usage = usage, .positional = &dir,
                           .max_positional = 1, .n_positional = &n_dir};
  int parsed = cddp__flags_parse(&cli, argc, argv);
  if (parsed >= 0) return parsed;
  if (!dir) {
    fprintf(stderr, "cddp plot: RUN_DIR is required (a run folder of cddp train, e.g. runs/fmnist_mlp)\n");
    return 2;
  }
  char path[4096], outbuf[4096], term[128];
  if (!out) snprintf(outbuf, sizeof outbuf, "%s/metrics.png", dir), out = outbuf;
  if (has_control(out)) { /* gnuplot cannot be given it as written, and a changed name is another file */
    fprintf(stderr, "cddp plot: the output path (--out, or RUN_DIR/metrics.png) holds a control character "
            "such as a newline; name another with --out FILE\n");
    return 2;
  }
  if (!terminal_for(out, 3, term, sizeof term)) {
    fprintf(stderr, "cddp plot: --out %s: the name must end in .png, .svg or .pdf (what to draw)\n", out);
    return 2;
  }
  if (!title) {
    const char *base = strrchr(dir, '/');
    title = base && base[1] ? base + 1 : dir;
  }
  snprintf(path, sizeof path, "%s/sweep.tsv", dir);
  if (access(path, R_OK) == 0 && has_control(path)) { /* gnuplot reads the sweep's table by this name */
    fprintf(stderr, "cddp plot: the sweep folder's name holds a control character such as a newline: rename it\n");
    return 2;
  }
  if (access(path, R_OK) == 0) return terminal_for(out, 2, term, sizeof term), plot_sweep(path, out, term, title);
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  int fd = cddp__open_regular(path); /* never blocking on a FIFO */
  FILE *in = fd >= 0 ? fdopen(fd, "r") : NULL;
  if (!in) {
    fprintf(stderr, "cddp plot: cannot read %s: %s\n", path, errno == EINVAL ? "not a regular file" : strerror(errno));
    if (fd >= 0) close(fd);
    return 1;
  }
  char tmp[] = "/tmp/cddp-plot.XXXXXX";
  if (!mkdtemp(tmp)) {
    fprintf(stderr, "cddp plot: cannot make a temporary directory: %s\n", strerror(errno));
    fclose(in);
    return 1;
  }
  char steps_p[64], evals_p[64], ranks_p[64], script_p[64];
  snprintf(steps_p, sizeof steps_p, "%s/steps.dat", tmp);
  snprintf(ranks_p, sizeof ranks_p, "%s/ranks.dat", tmp);
  snprintf(evals_p, sizeof evals_p, "%s/evals.dat", tmp);
  snprintf(script_p, sizeof script_p, "%s/plot.gp", tmp);
  FILE *steps = fopen(steps_p, "w"), *evals = fopen(evals_p, "w"), *ranks = fopen(ranks_p, "w");
  plot_data_t d = {.steps = -1};
  if (steps && evals && ranks) split_metrics(in, steps, evals, ranks, &d);
  fclose(in);
  if (steps) fclose(steps);
  if (evals) fclose(evals);
  if (ranks) fclose(ranks);
  int rc = 1;
  if (d.steps <= 0) {
    fprintf(stderr, "cddp plot: %s has no step lines to plot\n", path);
    goto out;
  }
  terminal_for(out, panels_of(&d), term, sizeof term); /* sized for the panels */
  FILE *gp = fopen(script_p, "w");
  if (!gp) {
    fprintf(stderr, "cddp plot: cannot write %s: %s\n", script_p, strerror(errno));
    goto out;
  }
  write_script(gp, term, out, title, steps_p, evals_p, ranks_p, &d);
  fclose(gp);
  int g = run_gnuplot(script_p);
  if (g == 127) {
    fprintf(stderr, "cddp plot: gnuplot is not installed (apt-get install gnuplot-nox)\n");
  } else if (g != 0) {
    fprintf(stderr, "cddp plot: gnuplot failed (exit %d) drawing %s\n", g, out);
  } else {
    printf("cddp plot: %ld steps, %ld evaluations%s -> %s\n", d.steps, d.evals, d.ranks ? ", per-rank work" : "", out);
    rc = 0;
  }
out:
  unlink(steps_p), unlink(evals_p), unlink(ranks_p), unlink(script_p), rmdir(tmp);
  return rc;
}

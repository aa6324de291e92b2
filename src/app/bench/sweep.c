/* sweep.c - `cddp bench train --sweep`: runs `cddp run cddp train` for every combination of
 * the values given (nodes, processes per node, and any config key), a bounded number of steps
 * each (nodes > 1: one agent per node, on this host's loopback or, --netns PREFIX, each in its
 * namespace host PREFIX-h<i> of tests/cluster/netns.sh, so the ranks meet over TCP), and prints one table: samples/s (tokens/s for text), step time, exposed
 * communication, peak RSS and the loss at the end. A combination far slower than the rest is
 * named (the seeds' "accumulation 8 on 4 nodes may make training abnormally slow"). The table
 * is also written as sweep.tsv, which `cddp plot` draws. */
#include "bench/sweep.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/flags.h"
#include "trainer/metrics.h"
#include "common/check.h"
#include "common/sock.h"

#define AXES_MAX 8
#define VALUES_MAX 16
#define RUNS_MAX 64
#define SLOW_FACTOR 2.0 /* this much slower than a run that differs in one setting only: named */
#define NODES_MAX 8
#define NETNS_SUBNET "10.78.0" /* tests/cluster/netns.sh's default: host i is SUBNET.i */

typedef struct axis {
  char key[128];                 /* "nodes", "nproc" or a config key */
  char *val[VALUES_MAX];
  int n;
} axis_t;

typedef struct result {
  int ok;
  double rate, step_ms, comm_pct, rss_mb, loss;
  int tokens;
} result_t;

static void usage(FILE *f) {
  fprintf(f,
          "usage: cddp bench train --sweep --config PATH [--steps N] [--nodes LIST [--netns PREFIX]] [--nproc LIST]\n"
          "                     [--set KEY=V1,V2...]... [--device LIST] [--out DIR]\n"
          "  --config PATH      the cddp train config every run starts from\n"
          "  --steps N          steps per run (default 30; the first fifth, at most 5, are warm-up)\n"
          "  --nodes LIST       nodes, comma-separated (default 1; at most %d): one `cddp run` agent each\n"
          "  --netns PREFIX     node i runs in the network namespace PREFIX-h<i> at " NETNS_SUBNET ".<i>\n"
          "                     (`tests/cluster/netns.sh up N` with CDDP_NETNS_PREFIX=PREFIX makes them);\n"
          "                     without it the nodes' agents share this host's loopback\n"
          "  --nproc LIST       processes on each node, comma-separated (default 2)\n"
          "  --set KEY=V1,V2    a config key and its values (repeatable, up to %d keys; a value in [...] may\n"
          "                     hold commas): batch.micro=32,64  batch.accum=1,8  ddp.bucket_mb=1,25\n"
          "                     ddp.overlap=on,off  ddp.compress=none,powersgd  train.precision=fp32,bf16\n"
          "  --device LIST      train.device of the runs, comma-separated: cpu, cuda, auto (default: the config's)\n"
          "  --out DIR          the runs, their logs and sweep.tsv (default a new /tmp/cddp-sweep-XXXXXX)\n"
          "Every combination runs `cddp run --nproc-per-node P cddp train` on each node for N steps, one\n"
          "after another (at most %d runs). The table: samples/s (tokens/s for a text model), median\n"
          "step ms, exposed communication in %% of the step, the largest process's peak RSS, and the\n"
          "loss at the end. A run %.0fx slower than one that differs from it in one setting only is\n"
          "named, with that setting. `cddp plot DIR` draws it.\n",
          NODES_MAX, AXES_MAX, RUNS_MAX, SLOW_FACTOR);
}

/* Splits "a,b,[c,d]" at the commas outside brackets into ax (the text is modified). */
static int split_values(char *list, axis_t *ax) {
  int depth = 0;
  char *start = list;
  for (char *c = list;; c++) {
    if (*c == '[') depth++;
    if (*c == ']') depth--;
    if ((*c == ',' && depth == 0) || !*c) {
      int end = !*c;
      *c = '\0';
      if (!*start || ax->n == VALUES_MAX) return -1;
      ax->val[ax->n++] = start;
      if (end) return 0;
      start = c + 1;
    }
  }
}


static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Reads a run's metrics: the timed steps' rate, median step, exposed comm, last loss. */
static int read_metrics(const char *path, int steps, result_t *r) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int warm = CDDP_MIN(5, steps / 5), n = 0;
  double samples = 0, secs = 0, comm = 0, *ms = calloc((size_t)steps + 1, sizeof *ms);
  char line[16384];
  while (ms && fgets(line, sizeof line, f)) {
    double step, step_ms, s, rate, trate, c, loss;
    if (strstr(line, "\"eval\":true") || !cddp__metrics_num(line, "step", &step) || !cddp__metrics_num(line, "step_ms", &step_ms)) continue;
    if (cddp__metrics_num(line, "loss", &loss)) r->loss = loss;
    if (step <= warm || n > steps) continue;
    if (!cddp__metrics_num(line, "samples", &s)) s = 0;
    if (cddp__metrics_num(line, "samples_per_s", &rate) && cddp__metrics_num(line, "tokens_per_s", &trate) && trate > rate * 1.001)
      r->tokens = 1, s *= trate / rate;
    if (!cddp__metrics_num(line, "comm_ms", &c)) c = 0;
    samples += s, secs += step_ms / 1e3, comm += c, ms[n++] = step_ms;
  }
  fclose(f);
  if (n == 0 || secs <= 0) return free(ms), -1;
  qsort(ms, (size_t)n, sizeof *ms, cmp_double);
  r->rate = samples / secs;
  r->step_ms = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  r->comm_pct = 100.0 * comm / (secs * 1e3);
  free(ms);
  return 0;
}

/* The namespace node i (0-based) of a --netns run lives in, and its address. */
static void netns_of(const char *prefix, int i, char *ns, size_t ns_size, char *addr, size_t addr_size) {
  const char *subnet = getenv("CDDP_NETNS_SUBNET");
  snprintf(ns, ns_size, "%s-h%d", prefix, i + 1);
  snprintf(addr, addr_size, "%s.%d", subnet && *subnet ? subnet : NETNS_SUBNET, i + 1);
}

/* Runs one combination (pick[a] = the value index of axis a): one `cddp run` agent per node
 * (node 0's output to DIR/runs/NAME.log, node i's to NAME.node<i>.log), waited for together. */
static int run_one(const char *self, const char *config, int steps, const axis_t *ax, int nax, const int *pick,
                   const char *dir, const char *netns, const char *name, result_t *r) {
  char steps_set[64], runs[4200], *tail[14 + 2 * AXES_MAX];
  char sets[AXES_MAX + 2][700]; /* indexed by axis: nodes and nproc take none */
  const char *nproc = "2";
  int nodes = 1, t = 0;
  snprintf(steps_set, sizeof steps_set, "train.max_steps=%d", steps);
  snprintf(runs, sizeof runs, "%s/runs", dir);
  for (int a = 0; a < nax; a++) {
    if (!strcmp(ax[a].key, "nproc")) nproc = ax[a].val[pick[a]];
    if (!strcmp(ax[a].key, "nodes")) nodes = atoi(ax[a].val[pick[a]]);
  }
  tail[t++] = (char *)self, tail[t++] = "train", tail[t++] = "--config", tail[t++] = (char *)config;
  tail[t++] = "--work-dir", tail[t++] = runs, tail[t++] = "--name", tail[t++] = (char *)name;
  tail[t++] = "--set", tail[t++] = steps_set; /* a speed run: no evaluation, per epoch or at the end */
  tail[t++] = "--set", tail[t++] = "eval.every_epoch=false", tail[t++] = "--set", tail[t++] = "eval.at_end=false";
  for (int a = 0; a < nax; a++) {
    if (!strcmp(ax[a].key, "nproc") || !strcmp(ax[a].key, "nodes")) continue;
    snprintf(sets[a], sizeof sets[a], "%.127s=%.560s", ax[a].key, ax[a].val[pick[a]]);
    tail[t++] = "--set", tail[t++] = sets[a];
  }
  int port = nodes > 1 ? cddp__sock_free_port() : 0;
  char ns[200], master[64]; /* node 0's address: the store's */
  netns_of(netns ? netns : "", 0, ns, sizeof ns, master, sizeof master);
  pid_t pid[NODES_MAX];
  int started = 0, all_ok = 1;
  *r = (result_t){0};
  for (int i = 0; i < nodes; i++) {
    char *argv[48 + 2 * AXES_MAX], addr[64], nn[16], nr[16], mp[16], rid[96], log[4300];
    int k = 0;
    netns_of(netns ? netns : "", i, ns, sizeof ns, addr, sizeof addr);
    if (netns) argv[k++] = "ip", argv[k++] = "netns", argv[k++] = "exec", argv[k++] = ns;
    argv[k++] = (char *)self, argv[k++] = "run";
    snprintf(nn, sizeof nn, "%d", nodes), snprintf(nr, sizeof nr, "%d", i), snprintf(mp, sizeof mp, "%d", port);
    snprintf(rid, sizeof rid, "sweep-%d-%s", (int)getpid(), name);
    if (nodes == 1) {
      argv[k++] = "--standalone";
    } else {
      argv[k++] = "--nnodes", argv[k++] = nn, argv[k++] = "--node-rank", argv[k++] = nr;
      argv[k++] = "--rdzv-backend", argv[k++] = "static", argv[k++] = "--master-addr";
      argv[k++] = netns ? master : "127.0.0.1", argv[k++] = "--master-port", argv[k++] = mp;
      argv[k++] = "--rdzv-id", argv[k++] = rid;
    }
    argv[k++] = "--nproc-per-node", argv[k++] = (char *)nproc;
    for (int x = 0; x < t; x++) argv[k++] = tail[x];
    argv[k] = NULL;
    if (i == 0) snprintf(log, sizeof log, "%s/runs/%s.log", dir, name);
    else snprintf(log, sizeof log, "%s/runs/%s.node%d.log", dir, name, i);
    pid[i] = fork();
    if (pid[i] < 0) {
      all_ok = 0;
      break;
    }
    if (pid[i] == 0) {
      int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
      if (netns) execvp("ip", argv);
      else execv(self, argv);
      _exit(127);
    }
    started++;
  }
  for (int i = 0; i < started; i++) {
    int st;
    struct rusage ru;
    while (wait4(pid[i], &st, 0, &ru) < 0)
      if (errno != EINTR) return -1;
    r->rss_mb = CDDP_MAX(r->rss_mb, (double)ru.ru_maxrss / 1024.0); /* the largest process of any node */
    all_ok = all_ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  char metrics[4300];
  snprintf(metrics, sizeof metrics, "%s/runs/%s/metrics.jsonl", dir, name);
  r->ok = all_ok && read_metrics(metrics, steps, r) == 0;
  return 0;
}

/* Why a run failed, from its log: the trainer's own last line ("cddp train: ..."), else the
 * log's last line (the launcher's). */
static void why_failed(const char *path, char *buf, size_t size) {
  FILE *f = fopen(path, "r");
  char line[1024], last[1024] = "", own[1024] = "";
  while (f && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = '\0';
    if (!line[strspn(line, " \t")]) continue;
    snprintf(last, sizeof last, "%s", line);
    const char *t = strstr(line, "cddp train: ");
    if (t) snprintf(own, sizeof own, "%s", t);
  }
  if (f) fclose(f);
  snprintf(buf, size, "%.500s", own[0] ? own : last);
}

int cddp__bench_sweep(int argc, char **argv) {
  const char *config = NULL, *out = NULL, *nproc = NULL, *nodes = NULL, *netns = NULL, *device = NULL, *sets[AXES_MAX];
  long steps = 30;
  int nsets = 0, sweep = 0, n_pos = 0;
  char *args[64];
  int nargs = 0;
  for (int i = 0; i < argc && nargs < 63; i++) /* --sweep takes no value: the flag table's kinds all do */
    if (!strcmp(argv[i], "--sweep")) sweep = 1;
    else args[nargs++] = argv[i];
  args[nargs] = NULL;
  const cddp__flag_t flags[] = {
      CDDP__FLAG_STR_ROW("--config", NULL, &config),
      CDDP__FLAG_LONG_ROW("--steps", &steps, 2, 100000, "a number of steps, 2 or more"),
      CDDP__FLAG_STR_ROW("--nodes", NULL, &nodes),
      CDDP__FLAG_STR_ROW("--netns", NULL, &netns),
      CDDP__FLAG_STR_ROW("--nproc", NULL, &nproc),
      CDDP__FLAG_LIST_ROW("--set", sets, &nsets, AXES_MAX, NULL, NULL),
      CDDP__FLAG_STR_ROW("--out", NULL, &out),
      CDDP__FLAG_STR_ROW("--device", NULL, &device),
  };
  const cddp__cli_t cli = {.cmd = "bench train", .flags = flags, .n_flags = (int)CDDP_ARRAY_LEN(flags), .usage = usage,
                           .n_positional = &n_pos};
  int parsed = cddp__flags_parse(&cli, nargs, args);
  if (parsed >= 0) return parsed;
  if (!sweep) {
    fprintf(stderr, "cddp bench train: --sweep is needed (a single run is `cddp run ... cddp train`)\n");
    return 2;
  }
  if (!config || access(config, R_OK) != 0) {
    fprintf(stderr, "cddp bench train: --config %s: %s\n", config ? config : "(missing)",
            config ? strerror(errno) : "the config every run starts from is needed");
    return 2;
  }
  char device_set[300];
  if (device) { /* one more --set axis: train.device=LIST */
    static const char *const kinds = ",cpu,cuda,auto,";
    char one[300], *save = NULL;
    snprintf(one, sizeof one, "%s", device);
    for (char *v = strtok_r(one, ",", &save); v; v = strtok_r(NULL, ",", &save)) {
      char key[40];
      snprintf(key, sizeof key, ",%.30s,", v);
      if (!strstr(kinds, key) || strlen(v) > 30) {
        fprintf(stderr, "cddp bench train: --device %s: '%s' is not cpu, cuda or auto\n", device, v);
        return 2;
      }
    }
    if (nsets == AXES_MAX) {
      fprintf(stderr, "cddp bench train: --device with %d --set keys: at most %d axes\n", nsets, AXES_MAX);
      return 2;
    }
    snprintf(device_set, sizeof device_set, "train.device=%s", device);
    sets[nsets++] = device_set;
  }
  axis_t ax[AXES_MAX + 2] = {0};
  int nax = 0;
  char nodes_buf[256], nproc_buf[256];
  if (netns && !nodes) {
    fprintf(stderr, "cddp bench train: --netns %s without --nodes: the namespaces are for the nodes of a run\n", netns);
    return 2;
  }
  if (nodes) { /* an axis only when asked for: the table of a one-node sweep stays as it was */
    snprintf(nodes_buf, sizeof nodes_buf, "%s", nodes);
    snprintf(ax[nax].key, sizeof ax[nax].key, "nodes");
    if (split_values(nodes_buf, &ax[nax]) != 0) {
      fprintf(stderr, "cddp bench train: --nodes %s: expected node counts, comma-separated (1,2)\n", nodes);
      return 2;
    }
    for (int i = 0; i < ax[nax].n; i++) {
      char *end, ns[200], addr[64];
      long v = strtol(ax[nax].val[i], &end, 10);
      if (*end || v < 1 || v > NODES_MAX) {
        fprintf(stderr, "cddp bench train: --nodes %s: '%s' is not a node count 1-%d\n", nodes, ax[nax].val[i], NODES_MAX);
        return 2;
      }
      for (int h = 0; netns && h < v; h++) { /* every namespace a run needs, before any runs */
        char path[300];
        netns_of(netns, h, ns, sizeof ns, addr, sizeof addr);
        snprintf(path, sizeof path, "/run/netns/%s", ns);
        if (access(path, F_OK) != 0) {
          fprintf(stderr, "cddp bench train: --netns %s: no namespace %s for node %d of %ld (make them with "
                  "`CDDP_NETNS_PREFIX=%s tests/cluster/netns.sh up %ld`)\n", netns, ns, h + 1, v, netns, v);
          return 2;
        }
      }
    }
    nax++;
  }
  snprintf(nproc_buf, sizeof nproc_buf, "%s", nproc ? nproc : "2");
  snprintf(ax[nax].key, sizeof ax[nax].key, "nproc");
  if (split_values(nproc_buf, &ax[nax]) != 0) {
    fprintf(stderr, "cddp bench train: --nproc %s: expected counts, comma-separated (1,2)\n", nproc);
    return 2;
  }
  for (int i = 0; i < ax[nax].n; i++) {
    char *end;
    long v = strtol(ax[nax].val[i], &end, 10);
    if (*end || v < 1 || v > 1024) {
      fprintf(stderr, "cddp bench train: --nproc %s: '%s' is not a process count\n", nproc, ax[nax].val[i]);
      return 2;
    }
  }
  nax++;
  char set_buf[AXES_MAX][1024];
  for (int s = 0; s < nsets; s++, nax++) {
    snprintf(set_buf[s], sizeof set_buf[s], "%s", sets[s]);
    char *eq = strchr(set_buf[s], '=');
    if (!eq || eq == set_buf[s] || (size_t)(eq - set_buf[s]) >= sizeof ax[nax].key) {
      fprintf(stderr, "cddp bench train: --set %s: expected KEY=V1,V2,... (batch.micro=32,64)\n", sets[s]);
      return 2;
    }
    *eq = '\0';
    snprintf(ax[nax].key, sizeof ax[nax].key, "%.127s", set_buf[s]);
    if (split_values(eq + 1, &ax[nax]) != 0) {
      fprintf(stderr, "cddp bench train: --set %s: an empty value, or more than %d\n", sets[s], VALUES_MAX);
      return 2;
    }
  }
  long runs = 1;
  for (int a = 0; a < nax; a++) runs *= ax[a].n;
  if (runs > RUNS_MAX) {
    fprintf(stderr, "cddp bench train: %ld combinations; at most %d: sweep fewer values at once\n", runs, RUNS_MAX);
    return 2;
  }
  char dir[4096], path[4200], self[4096];
  if (out) snprintf(dir, sizeof dir, "%s", out);
  else if (!mkdtemp(strcpy(dir, "/tmp/cddp-sweep-XXXXXX"))) return fprintf(stderr, "cddp bench train: mkdtemp: %s\n", strerror(errno)), 1;
  snprintf(path, sizeof path, "%s/runs", dir);
  if ((mkdir(dir, 0755) != 0 && errno != EEXIST) || (mkdir(path, 0755) != 0 && errno != EEXIST)) {
    fprintf(stderr, "cddp bench train: --out %s: cannot create it: %s\n", dir, strerror(errno));
    return 2;
  }
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0) return fprintf(stderr, "cddp bench train: cannot find the cddp binary: %s\n", strerror(errno)), 1;
  self[sl] = '\0';

  printf("cddp bench train --sweep: %s, %ld steps each (the first %ld warm-up), %ld run(s), in %s\n", config, steps,
         CDDP_MIN(5, steps / 5), runs, dir);
  result_t *res = calloc((size_t)runs, sizeof *res);
  int (*picks)[AXES_MAX + 2] = calloc((size_t)runs, sizeof *picks);
  if (!res || !picks) return fprintf(stderr, "cddp bench train: out of memory\n"), 1;
  int failed = 0;
  for (long i = 0; i < runs; i++) {
    long rest = i;
    for (int a = nax - 1; a >= 0; a--) picks[i][a] = (int)(rest % ax[a].n), rest /= ax[a].n;
    char name[32], why[512];
    snprintf(name, sizeof name, "s%02ld", i);
    fprintf(stderr, "cddp bench train: run %ld/%ld:", i + 1, runs);
    for (int a = 0; a < nax; a++) fprintf(stderr, " %s=%s", ax[a].key, ax[a].val[picks[i][a]]);
    fputc('\n', stderr);
    if (run_one(self, config, (int)steps, ax, nax, picks[i], dir, netns, name, &res[i]) != 0 || !res[i].ok) {
      snprintf(path, sizeof path, "%s/runs/%s.log", dir, name);
      why_failed(path, why, sizeof why);
      fprintf(stderr, "cddp bench train: run %ld failed: %s (log: %s)\n", i + 1, why[0] ? why : "no output", path);
      failed++;
    }
  }
  /* the table, and the slow ones */
  int tokens = 0;
  for (long i = 0; i < runs; i++) tokens |= res[i].ok && res[i].tokens;
  snprintf(path, sizeof path, "%s/sweep.tsv", dir);
  FILE *tsv = fopen(path, "w");
  if (tsv) {
    fprintf(tsv, "# axes:");
    for (int a = 0; a < nax; a++) fprintf(tsv, " %s", ax[a].key);
    fputc('\n', tsv);
  }
  if (tsv) fprintf(tsv, "# run\tsetting\t%s\tstep_ms\tcomm_pct\trss_mb\tloss\n", tokens ? "tokens_per_s" : "samples_per_s");
  for (int a = 0; a < nax; a++) printf("%*s ", (int)CDDP_MAX(strlen(ax[a].key), 6), ax[a].key);
  printf("| %12s %9s %7s %12s %10s\n", tokens ? "tokens/s" : "samples/s", "step ms", "comm %", "peak RSS MB", "end loss");
  for (long i = 0; i < runs; i++) {
    char setting[1024] = "";
    size_t o = 0;
    for (int a = 0; a < nax; a++) {
      printf("%*s ", (int)CDDP_MAX(strlen(ax[a].key), 6), ax[a].val[picks[i][a]]);
      o += (size_t)snprintf(setting + o, sizeof setting - CDDP_MIN(o, sizeof setting), "%s%s", a ? " " : "",
                            ax[a].val[picks[i][a]]);
      o = CDDP_MIN(o, sizeof setting - 1);
    }
    if (!res[i].ok) {
      printf("| %12s %9s %7s %12s %10s\n", "failed", "-", "-", "-", "-");
      continue;
    }
    printf("| %12.1f %9.2f %6.1f%% %12.1f %10.4f\n", res[i].rate, res[i].step_ms, res[i].comm_pct, res[i].rss_mb,
           res[i].loss);
    if (tsv)
      fprintf(tsv, "s%02ld\t%s\t%.1f\t%.3f\t%.2f\t%.1f\t%.6f\n", i, setting, res[i].rate, res[i].step_ms, res[i].comm_pct,
              res[i].rss_mb, res[i].loss);
  }
  for (long i = 0; i < runs; i++) { /* named against its best sibling: one setting changed, all else equal */
    int worst_axis = -1;
    long worst_j = -1;
    double worst_ratio = 0;
    for (int a = 0; a < nax && res[i].ok; a++)
      for (long j = 0; j < runs; j++) {
        int sibling = j != i && res[j].ok;
        for (int b = 0; b < nax && sibling; b++) sibling = b == a ? picks[j][b] != picks[i][b] : picks[j][b] == picks[i][b];
        /* across process or node counts, per process: twice the processes, twice the samples is no news */
        double mine = res[i].rate, theirs = res[j].rate;
        if (sibling && (!strcmp(ax[a].key, "nproc") || !strcmp(ax[a].key, "nodes")))
          mine /= atof(ax[a].val[picks[i][a]]), theirs /= atof(ax[a].val[picks[j][a]]);
        if (sibling && theirs >= SLOW_FACTOR * mine && (worst_j < 0 || theirs / mine > worst_ratio))
          worst_axis = a, worst_j = j, worst_ratio = theirs / mine;
      }
    if (worst_j < 0) continue;
    printf("slow: ");
    for (int a = 0; a < nax; a++) printf("%s%s=%s", a ? " " : "", ax[a].key, ax[a].val[picks[i][a]]);
    printf(" runs at %.1f %s, %.1fx below %s=%s with all else equal%s\n", res[i].rate, tokens ? "tokens/s" : "samples/s",
           worst_ratio, ax[worst_axis].key, ax[worst_axis].val[picks[worst_j][worst_axis]],
           strcmp(ax[worst_axis].key, "nproc") && strcmp(ax[worst_axis].key, "nodes") ? "" : " (per process)");
  }
  if (tsv) fclose(tsv), printf("table: %s (cddp plot %s draws it)\n", path, dir);
  free(res), free(picks);
  return failed ? 1 : 0;
}

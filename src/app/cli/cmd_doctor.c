/* cmd_doctor.c - `cddp doctor`: every rank of a job checks interfaces, reachability, latency,
 * bandwidth, clock and config through the store and its own sockets; rank 0 prints one report. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cddp/env.h"
#include "cddp/store.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/check.h"
#include "common/clock.h"
#include "doctor/doctor.h"
#include "trainer/config.h"

#define MAX_SETS 256

typedef struct opts {
  const char *cfg;
  const char *sets[MAX_SETS];
  int nsets;
  double timeout_s, connect_s, max_offset_ms;
  long iters;
  uint64_t bytes;
} opts_t;

typedef struct ctx {
  opts_t o;
  cddp_env_t env;
  cddp_store_t *store;
  cddp_store_server_t *hosted;
  char pfx[64];
  int n, me;         /* members, my index among them */
  int *ranks;        /* [n] */
  cddp__doc_info_t *info;
  cddp__doc_reach_t *reach; /* [n*n] */
  cddp__doc_meas_t *meas;   /* [n*n] */
} ctx_t;

static void usage(FILE *f) {
  fprintf(f,
          "usage: cddp doctor [--config PATH [--set key=value ...]] [--timeout S] [--connect-timeout S]\n"
          "                   [--iters N] [--bytes SIZE] [--max-offset-ms MS]\n"
          "Run it the way the job runs: cddp run --nproc-per-node 2 ... cddp doctor, srun cddp doctor, mpirun.\n"
          "Rank 0 prints one report: per host the interfaces and the one cddp's TCP transport chooses (and why),\n"
          "which ranks reach which, all-pairs latency and bandwidth, clock offsets, config agreement, and one\n"
          "'problem:' line per problem with what to do. Exit 0 healthy, 1 problems found, 2 bad usage.\n"
          "  --config PATH          check that every rank resolves this training config the same\n"
          "  --set key=value        override applied after the file, as cddp train does (repeatable)\n"
          "  --timeout S            how long rank 0 waits for every rank to report (default 30)\n"
          "  --connect-timeout S    bound on each connect between ranks (default 2)\n"
          "  --iters N              ping-pongs per pair; latency is the median (default 50)\n"
          "  --bytes SIZE           bytes sent each way per pair for the bandwidth matrix, K/M/G suffixes\n"
          "                         (default 8M; 0 skips bandwidth)\n"
          "  --max-offset-ms MS     clock offset vs rank 0 reported as a problem above this (default 500)\n");
}

/* "8M": a byte count up to 4G, with K/M/G suffixes. */
static int parse_size(const char *v, void *dst) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  double mul = 1;
  if (*end == 'K' || *end == 'k') mul = 1 << 10, end++;
  else if (*end == 'M' || *end == 'm') mul = 1 << 20, end++;
  else if (*end == 'G' || *end == 'g') mul = 1 << 30, end++;
  if (errno || end == v || *end || !(x >= 0) || x * mul > (double)(4ull << 30)) return -1;
  *(uint64_t *)dst = (uint64_t)(x * mul);
  return 0;
}

static int parse(int argc, char **argv, opts_t *o) {
  *o = (opts_t){.timeout_s = 30, .connect_s = 2, .max_offset_ms = 500, .iters = 50, .bytes = 8u << 20};
  const cddp__flag_t flags[] = {
      CDDP__FLAG_STR_ROW("--config", NULL, &o->cfg),
      CDDP__FLAG_LIST_ROW("--set", o->sets, &o->nsets, MAX_SETS, NULL, NULL),
      CDDP__FLAG_DOUBLE_ROW("--timeout", &o->timeout_s, 0.1, 86400, "a number in [0.1, 86400]"),
      CDDP__FLAG_DOUBLE_ROW("--connect-timeout", &o->connect_s, 0.05, 600, "a number in [0.05, 600]"),
      CDDP__FLAG_LONG_ROW("--iters", &o->iters, 1, 100000, "an integer in [1, 100000]"),
      CDDP__FLAG_FN_ROW("--bytes", &o->bytes, parse_size, "a size up to 4G (e.g. 8M)"),
      CDDP__FLAG_DOUBLE_ROW("--max-offset-ms", &o->max_offset_ms, 0, 1e9, "a number in [0, 1e+09]"),
  };
  const cddp__cli_t cli = {.cmd = "doctor", .flags = flags, .n_flags = (int)CDDP_ARRAY_LEN(flags), .usage = usage};
  int rc = cddp__flags_parse(&cli, argc, argv);
  if (rc >= 0) return rc;
  if (o->nsets && !o->cfg) return fprintf(stderr, "cddp doctor: --set needs --config\n"), 2;
  return -1;
}

static cddp_result_t put(ctx_t *c, const char *key, const char *val, size_t len) {
  char k[256];
  snprintf(k, sizeof k, "%s%s", c->pfx, key);
  return cddp_store_set(c->store, k, val, len);
}

/* NUL-terminated value (caller frees), or NULL after timeout_ms. */
static char *get(ctx_t *c, const char *key, int timeout_ms) {
  char k[256];
  void *v = NULL;
  size_t len;
  snprintf(k, sizeof k, "%s%s", c->pfx, key);
  return cddp_store_get(c->store, k, &v, &len, timeout_ms < 0 ? 0 : timeout_ms) == CDDP_OK ? v : NULL;
}

static int barrier(ctx_t *c, const char *name, int timeout_ms) {
  char k[256];
  int64_t v;
  snprintf(k, sizeof k, "%sbar/%s", c->pfx, name);
  if (cddp_store_add(c->store, k, 1, &v) != CDDP_OK) return -1;
  char go[140];
  snprintf(go, sizeof go, "bar/%s/go", name);
  if (v == c->n) return put(c, go, "1", 1) == CDDP_OK ? 0 : -1;
  char *g = get(c, go, timeout_ms);
  free(g);
  return g ? 0 : -1;
}

static void load_config(ctx_t *c, cddp__doc_info_t *in) {
  if (!c->o.cfg) return;
  cddp_train_config_t cfg;
  if (cddp__config_load(&cfg, c->o.cfg, c->o.sets, c->o.nsets) != CDDP_OK) {
    in->cfg_state = -1;
    snprintf(in->cfg_err, sizeof in->cfg_err, "%s", cddp_last_error());
    return;
  }
  in->cfg_state = 1;
  in->cfg_hash = cddp__config_hash(&cfg);
  int n = cddp__config_key_hashes(&cfg, in->keys, CDDP__DOC_MAX_KEYS);
  in->nkeys = n < CDDP__DOC_MAX_KEYS ? n : CDDP__DOC_MAX_KEYS;
}

/* Rank 0: who reported within the timeout; everyone: that list. -1 when this rank is not in it. */
static int agree_members(ctx_t *c) {
  int W = c->env.world_size;
  c->ranks = calloc((size_t)W, sizeof *c->ranks);
  if (!c->ranks) return -1;
  char key[64];
  if (c->env.rank == 0) {
    uint64_t deadline = cddp__deadline_ms((int64_t)(c->o.timeout_s * 1000));
    char *list = malloc((size_t)W * 12 + 16);
    size_t off = 0;
    for (int r = 0; r < W; r++) {
      snprintf(key, sizeof key, "info/%d", r);
      char *v = get(c, key, cddp__ms_left(deadline));
      if (v) c->ranks[c->n++] = r, off += (size_t)sprintf(list + off, "%d ", r);
      free(v);
    }
    put(c, "members", list, off);
    free(list);
  } else {
    char *v = get(c, "members", (int)(c->o.timeout_s * 1000) + 10000);
    if (!v) {
      fprintf(stderr, "cddp doctor: rank %d: rank 0 named no members within %.0f s -> see rank 0's output\n",
              c->env.rank, c->o.timeout_s + 10);
      return -1;
    }
    char *p = v, *end;
    for (long r; c->n < W && (r = strtol(p, &end, 10), end != p); p = end) c->ranks[c->n++] = (int)r;
    free(v);
  }
  c->me = -1;
  for (int i = 0; i < c->n; i++)
    if (c->ranks[i] == c->env.rank) c->me = i;
  if (c->me < 0) fprintf(stderr, "cddp doctor: rank %d reported too late: rank 0 went on without it\n", c->env.rank);
  return c->me;
}

static int read_infos(ctx_t *c) {
  int n = c->n;
  c->info = calloc((size_t)n, sizeof *c->info);
  c->reach = calloc((size_t)n * n, sizeof *c->reach);
  c->meas = calloc((size_t)n * n, sizeof *c->meas);
  if (!c->info || !c->reach || !c->meas) return -1;
  for (int i = 0; i < n; i++) {
    char key[64];
    snprintf(key, sizeof key, "info/%d", c->ranks[i]);
    char *v = get(c, key, 5000);
    if (!v || cddp__doc_info_decode(v, &c->info[i]) != CDDP_OK) {
      fprintf(stderr, "cddp doctor: rank %d: rank %d's info: %s\n", c->env.rank, c->ranks[i],
              v ? cddp_last_error() : "gone from the store");
      free(v);
      return -1;
    }
    free(v);
  }
  return 0;
}

/* Connect to everyone, publish the row; rank 0 collects the rows and publishes the plan. */
static int reachability(ctx_t *c) {
  int n = c->n;
  const char **addr = calloc((size_t)n, sizeof *addr);
  int *port = calloc((size_t)n, sizeof *port);
  cddp__doc_reach_t *row = calloc((size_t)n, sizeof *row);
  char *s = calloc((size_t)n * n + 1, 1);
  int ret = -1;
  if (!addr || !port || !row || !s) goto out;
  for (int i = 0; i < n; i++) addr[i] = c->info[i].chosen_addr, port[i] = c->info[i].port;
  int ms = (int)(c->o.connect_s * 1000);
  cddp__doc_probe_all(n, addr, port, c->ranks, c->env.rank, ms, row);
  row[c->me] = CDDP__REACH_OK;
  for (int i = 0; i < n; i++) s[i] = (char)('0' + row[i]);
  char key[64];
  snprintf(key, sizeof key, "reach/%d", c->env.rank);
  if (put(c, key, s, (size_t)n) != CDDP_OK) goto out;
  if (c->me == 0) {
    uint64_t deadline = cddp__deadline_ms(2 * ms + 10000);
    for (int i = 0; i < n; i++) {
      snprintf(key, sizeof key, "reach/%d", c->ranks[i]);
      char *v = get(c, key, cddp__ms_left(deadline));
      for (int j = 0; j < n; j++)
        s[i * n + j] = v && strlen(v) == (size_t)n ? v[j] : (char)('0' + (i == j ? CDDP__REACH_OK : CDDP__REACH_UNTRIED));
      free(v);
    }
    if (put(c, "plan", s, (size_t)n * n) != CDDP_OK) goto out;
  }
  char *plan = get(c, "plan", 2 * ms + 15000);
  if (!plan || strlen(plan) != (size_t)n * n) {
    free(plan);
    goto out;
  }
  for (int i = 0; i < n * n; i++) c->reach[i] = (cddp__doc_reach_t)(plan[i] - '0');
  free(plan);
  ret = 0;
out:
  free(addr), free(port), free(row), free(s);
  return ret;
}

/* Round-robin rounds, one pair per rank per round, a store barrier between rounds. */
static void measure(ctx_t *c) {
  int n = c->n, io_ms = (int)(c->o.connect_s * 1000) + 5000;
  for (int k = 0; k < cddp__doc_rounds(n); k++) {
    int p = cddp__doc_partner(n, k, c->me);
    if (p >= 0) {
      int lo = c->me < p ? c->me : p, hi = c->me < p ? p : c->me, client = -1;
      if (c->reach[lo * n + hi] == CDDP__REACH_OK) client = lo;
      else if (c->reach[hi * n + lo] == CDDP__REACH_OK) client = hi;
      if (client == c->me)
        cddp__doc_measure(c->info[p].chosen_addr, c->info[p].port, c->ranks[p], c->env.rank, (int)c->o.iters, c->o.bytes,
                          io_ms, &c->meas[c->me * n + p]);
    }
    char name[32];
    snprintf(name, sizeof name, "m%d", k);
    if (barrier(c, name, (int)(c->o.timeout_s * 1000) + 2 * io_ms) != 0) break; /* a rank is gone: report what we have */
  }
  /* publish my row */
  char *buf = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&buf, &size);
  if (!f) return;
  for (int j = 0; j < n; j++) {
    const cddp__doc_meas_t *m = &c->meas[c->me * n + j];
    fprintf(f, "%d %d %.9g %.9g %.9g %.9g %.9g %s\n", j, m->ok, m->lat_us, m->offset_ms, m->offset_err_ms, m->bw_to,
            m->bw_from, m->err[0] ? m->err : "-");
  }
  fclose(f);
  char key[64];
  snprintf(key, sizeof key, "meas/%d", c->env.rank);
  put(c, key, buf, size);
  free(buf);
}

static void collect_meas(ctx_t *c) {
  int n = c->n;
  uint64_t deadline = cddp__deadline_ms(10000);
  for (int i = 1; i < n; i++) {
    char key[64];
    snprintf(key, sizeof key, "meas/%d", c->ranks[i]);
    char *v = get(c, key, cddp__ms_left(deadline));
    for (char *line = v; line && *line;) {
      char *nl = strchr(line, '\n');
      if (nl) *nl = 0;
      cddp__doc_meas_t m;
      memset(&m, 0, sizeof m);
      int j, used = 0;
      if (sscanf(line, "%d %d %lf %lf %lf %lf %lf %n", &j, &m.ok, &m.lat_us, &m.offset_ms, &m.offset_err_ms,
                 &m.bw_to, &m.bw_from, &used) == 7 && j >= 0 && j < n) {
        if (strcmp(line + used, "-")) snprintf(m.err, sizeof m.err, "%s", line + used);
        c->meas[i * n + j] = m;
      }
      line = nl ? nl + 1 : NULL;
    }
    free(v);
  }
}

static int run(ctx_t *c) {
  cddp__doc_info_t self;
  memset(&self, 0, sizeof self);
  self.rank = c->env.rank;
  if (cddp__doc_info_local(&self) != CDDP_OK) {
    fprintf(stderr, "cddp doctor: rank %d: interfaces: %s\n", c->env.rank, cddp_last_error());
    return 1;
  }
  load_config(c, &self);
  cddp__doc_gpus(self.gpus, sizeof self.gpus);
  cddp__doc_server_t *srv = NULL;
  int io_ms = (int)(c->o.connect_s * 1000) + 5000;
  if (cddp__doc_server_start(&srv, self.chosen_addr, c->env.rank, io_ms) != CDDP_OK) {
    fprintf(stderr, "cddp doctor: rank %d (host %s): %s\n", c->env.rank, self.host, cddp_last_error());
    return 1;
  }
  self.port = cddp__doc_server_port(srv);
  int timeout_ms = (int)(c->o.timeout_s * 1000);
  cddp_result_t r = cddp_env_connect(&c->env, timeout_ms, &c->store, &c->hosted);
  if (r != CDDP_OK) {
    fprintf(stderr, "cddp doctor: rank %d (host %s, %s %s) cannot reach the job's store at %s:%d within %.1f s: %s -> "
            "check this host's link and firewall toward %s; TCP port %d must be open there\n",
            c->env.rank, self.host, self.chosen, self.chosen_addr, c->env.master_addr, c->env.master_port,
            c->o.timeout_s, cddp_last_error(), c->env.master_addr, c->env.master_port);
    cddp__doc_server_stop(srv);
    return 1;
  }
  cddp_store_set_timeout(c->store, timeout_ms + 30000);
  snprintf(c->pfx, sizeof c->pfx, "doctor/%d/", c->env.round);
  size_t len;
  char *text = cddp__doc_info_encode(&self, &len), key[64];
  snprintf(key, sizeof key, "info/%d", c->env.rank);
  int verdict = 1;
  uint64_t t0 = cddp__now_ns();
  if (!text || put(c, key, text, len) != CDDP_OK) {
    fprintf(stderr, "cddp doctor: rank %d: publishing to the store: %s\n", c->env.rank, cddp_last_error());
    goto out;
  }
  if (agree_members(c) < 0 || read_infos(c) != 0) goto out;
  double waited = (double)(cddp__now_ns() - t0) / 1e9;
  if (reachability(c) != 0) {
    fprintf(stderr, "cddp doctor: rank %d: the reachability round did not complete (rank 0 gone?)\n", c->env.rank);
    goto out;
  }
  measure(c);
  if (c->me == 0) {
    collect_meas(c);
    int *missing = calloc((size_t)c->env.world_size, sizeof *missing), nmissing = 0;
    for (int rk = 0, i = 0; rk < c->env.world_size && missing; rk++) {
      if (i < c->n && c->ranks[i] == rk) i++;
      else missing[nmissing++] = rk;
    }
    const char **keys = calloc(CDDP__DOC_MAX_KEYS, sizeof *keys);
    for (int k = 0; keys && k < CDDP__DOC_MAX_KEYS && k < self.nkeys; k++) keys[k] = cddp__config_key_name(k);
    char store[300];
    if (c->env.source == CDDP_ENV_NONE) snprintf(store, sizeof store, "in-process (no launcher: a world of one)");
    else snprintf(store, sizeof store, "%s:%d", c->env.master_addr, c->env.master_port);
    cddp__doc_job_t job = {.world = c->env.world_size, .n = c->n, .info = c->info, .reach = c->reach, .meas = c->meas,
                           .missing = missing, .nmissing = nmissing, .wait_s = nmissing ? c->o.timeout_s : waited,
                           .store = store, .cfg_path = c->o.cfg, .cfg_keys = keys, .iters = (int)c->o.iters,
                           .bytes = c->o.bytes, .max_offset_ms = c->o.max_offset_ms};
    verdict = cddp__doc_report(&job, stdout) ? 1 : 0;
    fflush(stdout);
    free(missing), free(keys);
    put(c, "verdict", verdict ? "1" : "0", 1);
    uint64_t deadline = cddp__deadline_ms(5000); /* others read the verdict before a hosted store goes */
    for (int i = 1; i < c->n; i++) {
      snprintf(key, sizeof key, "done/%d", c->ranks[i]);
      free(get(c, key, cddp__ms_left(deadline)));
    }
  } else {
    char *v = get(c, "verdict", 30000);
    verdict = v && v[0] == '0' ? 0 : 1;
    free(v);
    snprintf(key, sizeof key, "done/%d", c->env.rank);
    put(c, key, "1", 1);
  }
out:
  free(text);
  cddp__doc_server_stop(srv);
  cddp_env_disconnect(c->store, c->hosted);
  free(c->ranks), free(c->info), free(c->reach), free(c->meas);
  return verdict;
}

int cddp__cmd_doctor(int argc, char **argv) {
  ctx_t c;
  memset(&c, 0, sizeof c);
  int rc = parse(argc, argv, &c.o);
  if (rc >= 0) return rc;
  if (cddp_env_read(&c.env) != CDDP_OK) {
    fprintf(stderr, "cddp doctor: %s\n", cddp_last_error());
    return 2;
  }
  return run(&c);
}

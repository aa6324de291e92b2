/* options.c - parses `cddp run` flags and their environment mirrors into cddp_run_opts_t. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/check.h"
#include "common/nearest.h"
#include "launcher/options.h"
#include "launcher/torchrun_flags.h"
#include "common/envp.h"
#include "common/launcher.h"
#include "launcher/gpus.h"
#include "common/mpi_step.h"
#include "common/slurm_step.h"

enum {
  F_NNODES, F_NPROC, F_RDZV_ID, F_RDZV_BACKEND, F_RDZV_ENDPOINT, F_RDZV_TIMEOUT, F_RDZV_LAST_CALL,
  F_STANDALONE, F_NODE_RANK, F_MASTER_ADDR, F_MASTER_PORT, F_MAX_RESTARTS, F_RESTART_MODE, F_LOCAL_ADDR,
  F_LOG_DIR, F_TEE, F_REDIRECTS, F_RANKS_FILTER, F_LAUNCHER, F_GRACE, F_CPU_BIND, F_MONITOR, F_RDZV_CONF,
  F_PYTHON, F_MODULE, F_NO_PYTHON, F_RUN_PATH, F_ROLE, F_START_METHOD, F_HANG_TIMEOUT, F_WARM, F_WARM_PRELOAD, F_WARM_DELAY, F_AGENT_STORE, F_SHUTDOWN, F_HELP, NFLAGS
};

static const struct flag {
  const char *name; /* dash spelling; the underscore spelling is accepted too */
  char short_name;
  int takes_value, mirrored;
  const char *metavar, *help;
} flags[NFLAGS] = {
    [F_NNODES] = {"nnodes", 0, 1, 1, "N|MIN:MAX", "number of nodes, or an elastic range (default 1)"},
    [F_NPROC] = {"nproc-per-node", 0, 1, 1, "N|gpu|cpu|auto", "workers on this node; gpu = visible GPUs, cpu = CPUs, auto = GPUs if any, else CPUs (default 1)"},
    [F_RDZV_ID] = {"rdzv-id", 0, 1, 1, "ID", "job id shared by every node's agent (default none)"},
    [F_RDZV_BACKEND] = {"rdzv-backend", 0, 1, 1, "c10d|static", "c10d: join order gives node ranks; static: --node-rank (default c10d; static, as torchrun, for N > 1 fixed nodes without --rdzv-endpoint)"},
    [F_RDZV_ENDPOINT] = {"rdzv-endpoint", 0, 1, 1, "HOST[:PORT]", "store address; the agent on HOST serves it (default port 29400; port 0 = a free one, one node only)"},
    [F_RDZV_TIMEOUT] = {"rdzv-timeout", 0, 1, 1, "SECONDS", "give up joining after this long (default 300)"},
    [F_RDZV_LAST_CALL] = {"rdzv-last-call", 0, 1, 1, "SECONDS", "with MIN:MAX, wait this long after MIN nodes joined (default 2)"},
    [F_STANDALONE] = {"standalone", 0, 0, 1, NULL, "one node: store on 127.0.0.1, free port, random run id"},
    [F_NODE_RANK] = {"node-rank", 0, 1, 1, "R", "this node's rank (static backend)"},
    [F_MASTER_ADDR] = {"master-addr", 0, 1, 1, "HOST", "static: node 0's address (default 127.0.0.1)"},
    [F_MASTER_PORT] = {"master-port", 0, 1, 1, "PORT", "static: the store's port on node 0 (default 29500; workers get another, free one)"},
    [F_MAX_RESTARTS] = {"max-restarts", 0, 1, 1, "N", "restart workers up to N times after failures (default 0)"},
    [F_RESTART_MODE] = {"restart-mode", 0, 1, 1, "all|replace", "all: every node's workers restart; replace: only the failed one, in place (default all)"},
    [F_LOCAL_ADDR] = {"local-addr", 0, 1, 1, "ADDR", "address other nodes reach this one at (default: route to the store)"},
    [F_LOG_DIR] = {"log-dir", 0, 1, 1, "DIR", "write each rank's output to DIR/rank<N>.log"},
    [F_TEE] = {"tee", 't', 1, 1, "0-3|R:S,...", "streams written to the log files and also shown (1 out, 2 err, 3 both; per local rank R:S; default 0)"},
    [F_REDIRECTS] = {"redirects", 'r', 1, 1, "0-3|R:S,...", "streams written to the log files instead of the console (default 3 with --log-dir, else 0)"},
    [F_RANKS_FILTER] = {"local-ranks-filter", 0, 1, 1, "R,R,...", "only these local ranks' output on the console (log files get every rank)"},
    [F_LAUNCHER] = {"launcher", 0, 1, 1, "slurm|mpi|local", "slurm: ranks from the srun step; mpi: from mpirun (both detected); local: neither"},
    [F_GRACE] = {"grace-period", 0, 1, 1, "SECONDS", "SIGTERM to SIGKILL delay when stopping workers (default 5)"},
    [F_HANG_TIMEOUT] = {"hang-timeout", 0, 1, 1, "SECONDS", "a worker whose collectives stand still this long while its peers wait is hung: dumped, killed, handled as a failure (default 60, 0 = off)"},
    [F_WARM] = {"warm-workers", 0, 1, 1, "on|off", "on: a Python program's restarts take warm spares, started ahead with torch imported (default on)"},
    [F_WARM_PRELOAD] = {"warm-preload", 0, 1, 1, "MOD,...", "what a warm spare imports ahead (default torch,torch.distributed,torch._dynamo when the script imports torch; '' = no spares)"},
    [F_WARM_DELAY] = {"warm-delay", 0, 1, 1, "SECONDS", "start the spares this long after the workers, so as not to slow their start (default 2)"},
    [F_AGENT_STORE] = {"agent-store", 0, 1, 1, "auto|off", "auto: a torch script's workers meet in the job's store, MASTER_PORT its port (TORCHELASTIC_USE_AGENT_STORE=True); off: rank 0 hosts their TCPStore (default auto)"},
    [F_CPU_BIND] = {"cpu-bind", 0, 1, 1, "auto|none", "auto: each worker on its own share of this node's CPUs, when there are enough (default auto)"},
    [F_MONITOR] = {"monitor-interval", 0, 1, 1, "SECONDS", "accepted for torchrun; not needed: an exit is seen at once (SIGCHLD), not polled"},
    [F_RDZV_CONF] = {"rdzv-conf", 0, 1, 1, "K=V,...", "join_timeout, last_call_timeout, close_timeout, read_timeout (seconds), is_host (bool)"},
    [F_PYTHON] = {"python", 0, 1, 1, "PATH", "the interpreter of a PROGRAM ending in .py and of -m (default python3 on PATH)"},
    [F_MODULE] = {"module", 'm', 0, 1, NULL, "PROGRAM is a Python module: each worker runs PYTHON -u -m PROGRAM"},
    [F_NO_PYTHON] = {"no-python", 0, 0, 1, NULL, "run PROGRAM as it is, even when it ends in .py"},
    [F_RUN_PATH] = {"run-path", 0, 0, 1, NULL, "run PROGRAM with Python whatever its name (torchrun's --run-path)"},
    [F_ROLE] = {"role", 0, 1, 1, "NAME", "the workers' ROLE_NAME (default 'default')"},
    [F_START_METHOD] = {"start-method", 0, 1, 1, "spawn|fork|forkserver", "accepted for torchrun; workers are always started by fork + exec"},
    [F_SHUTDOWN] = {"shutdown-timeout", 0, 1, 1, "SECONDS", "torchrun 2.x's name for --grace-period"},
    [F_HELP] = {"help", 'h', 0, 0, NULL, "this text"},
};

static void mirror_name(char *buf, size_t size, const char *prefix, const char *flag) {
  size_t o = (size_t)snprintf(buf, size, "%s", prefix);
  for (const char *c = flag; *c && o + 1 < size; c++) buf[o++] = *c == '-' ? '_' : (char)toupper((unsigned char)*c);
  buf[o] = '\0';
}

void cddp__run_usage(FILE *f) {
  fprintf(f,
          "usage: cddp run [options] PROGRAM [ARGS...]\n\n"
          "Starts --nproc-per-node workers running PROGRAM on this node, after a rendezvous\n"
          "with the agents of the other nodes. Flags take torchrun's names in both spellings\n"
          "(--nproc-per-node or --nproc_per_node), as --flag VALUE or --flag=VALUE.\n\noptions:\n");
  for (int i = 0; i < NFLAGS; i++) {
    char left[64];
    snprintf(left, sizeof left, "%s%c%s--%s%s%s", flags[i].short_name ? "-" : "",
             flags[i].short_name ? flags[i].short_name : ' ', flags[i].short_name ? "," : "",
             flags[i].name, flags[i].metavar ? " " : "", flags[i].metavar ? flags[i].metavar : "");
    fprintf(f, "  %-34s %s\n", flags[i].short_name ? left : left + 1, flags[i].help);
  }
  fprintf(f,
          "\nEvery option above except --help has an environment mirror: CDDP_<FLAG> (CDDP_NPROC_PER_NODE=2,\n"
          "CDDP_STANDALONE=1) and torchrun's PET_<FLAG> (PET_NNODES=2).\n"
          "Precedence, highest first: flags; CDDP_<FLAG>; PET_<FLAG>; XTuner's NPROC_PER_NODE, NNODES,\n"
          "NODE_RANK, ADDR, PORT (a static rendezvous with master ADDR:PORT); Slurm (--launcher slurm,\n"
          "or detected inside an srun step: SLURM_STEP_ID and SLURM_PROCID set); defaults.\n"
          "Without --nnodes > 1 and without an endpoint, cddp run behaves as --standalone.\n"
          "Workers get RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE\n"
          "MASTER_ADDR MASTER_PORT CDDP_RUN_ID CDDP_ROUND CDDP_RESTART_COUNT CDDP_MAX_RESTARTS\n"
          "CDDP_STORE CDDP_TOKEN (and TORCHELASTIC_RUN_ID/RESTART_COUNT/MAX_RESTARTS).\n"
          "The store token comes from CDDP_TOKEN or CDDP_TOKEN_FILE (random with --standalone;\n"
          "under srun, ~/.cddp/slurm-tokens/job-JOBID, made once per job).\n"
          "Output lines are prefixed \"[rank N] \". Exit status: the first failing worker's\n"
          "(128+signal when killed). See docs/launcher.md.\n");
}

/* A raw value and how the user spelled where it came from. */
typedef struct raw {
  const char *val[NFLAGS];
  char src[NFLAGS][64];
  int from_flag[NFLAGS];
} raw_t;

static void put(raw_t *r, int f, const char *val, const char *src, int is_flag) {
  r->val[f] = val;
  snprintf(r->src[f], sizeof r->src[f], "%s", src);
  r->from_flag[f] = is_flag;
}

/* "--nnodes 2" for flags, "NNODES=2" for variables: how messages quote a value. */
static const char *quote(const raw_t *r, int f, char *buf, size_t size) {
  snprintf(buf, size, "%s%s%s", r->src[f], r->from_flag[f] ? " " : "=", r->val[f]);
  return buf;
}

static cddp_result_t bad_value(const raw_t *r, int f, const char *want) {
  return cddp__fail(CDDP_INVALID_ARG, "%s %s, got '%s'", r->src[f], want, r->val[f]);
}

static int parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (!*s || *end || errno || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

static int parse_seconds_ms(const char *s, int *ms) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (!*s || *end || errno || !(v >= 0) || v > 1e6) return 0;
  *ms = (int)(v * 1000 + 0.5);
  return 1;
}

static int parse_bool(const char *s, int *b) {
  if (!strcasecmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on")) *b = 1;
  else if (!*s || !strcasecmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcasecmp(s, "off")) *b = 0;
  else return 0;
  return 1;
}

/* HOST[:PORT], [V6]:PORT, or a bare IPv6 address. */
static cddp_result_t parse_endpoint(const raw_t *r, int f, char *host, size_t hsize, int *port) {
  const char *s = r->val[f], *colon = NULL;
  size_t hlen;
  if (s[0] == '[') {
    const char *close = strchr(s, ']');
    if (!close || (close[1] && close[1] != ':')) return bad_value(r, f, "must be HOST[:PORT]");
    hlen = (size_t)(close - s - 1);
    s++;
    colon = close[1] ? close + 1 : NULL;
  } else {
    colon = strchr(s, ':');
    if (colon && strchr(colon + 1, ':')) colon = NULL; /* bare IPv6 */
    hlen = colon ? (size_t)(colon - s) : strlen(s);
  }
  if (hlen == 0 || hlen >= hsize) return bad_value(r, f, "must be HOST[:PORT]");
  memcpy(host, s, hlen);
  host[hlen] = '\0';
  if (colon) {
    long p;
    if (!parse_long(colon + 1, 0, 65535, &p)) return bad_value(r, f, "must be HOST[:PORT] with a port 0-65535");
    *port = (int)p;
  }
  return CDDP_OK;
}

static void random_id(char *buf, size_t size) {
  unsigned char b[12];
  if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
    for (size_t i = 0; i < sizeof b; i++) b[i] = (unsigned char)(rand() ^ getpid() ^ (int)i);
  size_t o = (size_t)snprintf(buf, size, "standalone-");
  for (size_t i = 0; i < sizeof b && o + 2 < size; i++) o += (size_t)snprintf(buf + o, size - o, "%02x", b[i]);
}

static int lookup_flag(const char *name, size_t len) {
  char norm[64];
  if (len == 0 || len >= sizeof norm) return -1;
  for (size_t i = 0; i < len; i++) norm[i] = name[i] == '_' ? '-' : name[i];
  norm[len] = '\0';
  for (int i = 0; i < NFLAGS; i++)
    if (!strcmp(norm, flags[i].name)) return i;
  return -1;
}

/* A mistyped flag: one line with the nearest flag (INVALID_ARG: no usage under it), else the
 * usage follows (INVALID_USAGE). */
static cddp_result_t unknown_flag(const char *a) {
  const char *names[NFLAGS];
  size_t len = strcspn(a, "=");
  char typed[64];
  snprintf(typed, sizeof typed, "%.*s", (int)CDDP_MIN(len, 63), a);
  for (int k = 0; k < NFLAGS; k++) names[k] = flags[k].name;
  const char *near = typed[0] == '-' && typed[1] == '-' ? cddp__nearest(typed + 2, names, NFLAGS) : NULL;
  if (near) return cddp__fail(CDDP_INVALID_ARG, "unknown flag '%s' (did you mean --%s? cddp run --help lists them)", typed, near);
  return cddp__fail(CDDP_INVALID_USAGE, "unknown flag '%s'", a);
}

/* Flags into r; sets o->prog_index. INVALID_USAGE (print usage) for unknown flags. */
static cddp_result_t parse_argv(int argc, char **argv, raw_t *r, cddp_run_opts_t *o) {
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    int f = -1;
    const char *val = NULL;
    char spelled[64];
    if (!strcmp(a, "--")) { i++; break; }
    if (a[0] != '-' || !a[1]) break;
    if (a[1] == '-') {
      size_t len = strcspn(a + 2, "=");
      f = lookup_flag(a + 2, len);
      if (a[2 + len] == '=') val = a + 3 + len;
      snprintf(spelled, sizeof spelled, "--%.*s", (int)CDDP_MIN(len, 60), a + 2);
    } else if (!a[2] || (a[1] != 'h' && isdigit((unsigned char)a[2]))) {
      for (int k = 0; k < NFLAGS; k++)
        if (flags[k].short_name && flags[k].short_name == a[1]) f = k;
      if (f >= 0 && a[2]) val = a + 2; /* -t3 */
      snprintf(spelled, sizeof spelled, "-%c", a[1]);
    }
    const char *why = f < 0 && a[1] == '-' ? cddp__torchrun_refused(a + 2, strcspn(a + 2, "=")) : NULL;
    if (why) return cddp__fail(CDDP_INVALID_ARG, "torchrun's %s is not supported: %s", spelled, why);
    if (f < 0) return unknown_flag(a);
    if (!flags[f].takes_value) {
      if (val) return cddp__fail(CDDP_INVALID_USAGE, "%s takes no value", spelled);
      val = "1";
    } else if (!val) {
      if (i + 1 >= argc) return cddp__fail(CDDP_INVALID_USAGE, "%s needs a value (%s)", spelled, flags[f].metavar);
      val = argv[++i];
    }
    if (f == F_HELP) {
      o->mode = CDDP_RUN_HELP;
      return CDDP_OK;
    }
    put(r, f, val, spelled, 1);
  }
  o->prog_index = i;
  if (i >= argc) return cddp__fail(CDDP_INVALID_USAGE, "missing PROGRAM (what each worker runs)");
  return CDDP_OK;
}

/* torchrun's PET_<FLAG> of a flag cddp refuses: the same one line as the flag */
static cddp_result_t refuse_pet(char **envp) {
  char name[64];
  for (int i = 0; cddp__torchrun_refused_name(i); i++) {
    const char *flag = cddp__torchrun_refused_name(i);
    mirror_name(name, sizeof name, "PET_", flag);
    if (cddp__envp_get(envp, name))
      return cddp__fail(CDDP_INVALID_ARG, "torchrun's %s (--%s) is not supported: %s", name, flag,
                        cddp__torchrun_refused(flag, strlen(flag)));
  }
  return CDDP_OK;
}

static void fill_env(raw_t *r, char **envp) {
  for (int f = 0; f < NFLAGS; f++) {
    if (r->val[f] || !flags[f].mirrored) continue;
    char name[64];
    const char *prefixes[] = {"CDDP_", "PET_"};
    for (int p = 0; p < 2 && !r->val[f]; p++) {
      mirror_name(name, sizeof name, prefixes[p], flags[f].name);
      const char *v = cddp__envp_get(envp, name);
      if (v) put(r, f, v, name, 0);
    }
  }
}

static void fill_xtuner(raw_t *r, char **envp) {
  static const struct { const char *var; int f; } x[] = {
      {"NPROC_PER_NODE", F_NPROC}, {"NNODES", F_NNODES}, {"NODE_RANK", F_NODE_RANK},
      {"ADDR", F_MASTER_ADDR}, {"PORT", F_MASTER_PORT}};
  if (!cddp__envp_get(envp, "NPROC_PER_NODE") && !cddp__envp_get(envp, "NNODES") &&
      !cddp__envp_get(envp, "NODE_RANK"))
    return; /* ADDR / PORT alone are too generic to mean XTuner */
  int multi = 0;
  for (size_t i = 0; i < CDDP_ARRAY_LEN(x); i++) {
    const char *v = cddp__envp_get(envp, x[i].var);
    if (!v || r->val[x[i].f]) continue;
    put(r, x[i].f, v, x[i].var, 0);
    if (x[i].f != F_NPROC) multi = 1;
  }
  if (multi && !r->val[F_RDZV_BACKEND] && !r->val[F_RDZV_ENDPOINT] && !r->val[F_STANDALONE])
    put(r, F_RDZV_BACKEND, "static", "NNODES/NODE_RANK/ADDR", 0);
}

static int mpi_forced(const raw_t *r) { return r->val[F_LAUNCHER] && !strcmp(r->val[F_LAUNCHER], "mpi"); }

/* Slurm: decides the mode and fills what the step says. bufs hold derived strings. */
static cddp_result_t fill_slurm(raw_t *r, char **envp, cddp_run_opts_t *o, char bufs[5][256]) {
  const char *launcher = r->val[F_LAUNCHER] ? r->val[F_LAUNCHER] : "";
  if (*launcher && strcmp(launcher, "slurm") && strcmp(launcher, "local") && strcmp(launcher, "mpi"))
    return bad_value(r, F_LAUNCHER, "must be slurm, mpi or local");
  const char *jobid = cddp__envp_get(envp, "SLURM_JOB_ID");
  if (!jobid) jobid = cddp__envp_get(envp, "SLURM_JOBID");
  int in_step = cddp__launcher_present(envp, CDDP_ENV_SLURM);
  int explicit_rdzv = r->val[F_STANDALONE] || r->val[F_RDZV_ENDPOINT] || r->val[F_MASTER_ADDR] ||
                      r->val[F_NODE_RANK] || r->val[F_RDZV_BACKEND];
  int want = !strcmp(launcher, "slurm") || (!*launcher && in_step && !explicit_rdzv && !mpi_forced(r));
  if (!want) return CDDP_OK;
  if (!in_step) {
    if (jobid) { /* batch step or salloc shell: one agent per node through srun */
      o->mode = CDDP_RUN_SLURM_BATCH;
      o->slurm = 1;
      o->replace = r->val[F_RESTART_MODE] && !strcmp(r->val[F_RESTART_MODE], "replace"); /* a lost node ends no step */
      return CDDP_OK;
    }
    return cddp__fail(CDDP_INVALID_ARG, "%s slurm: not inside a Slurm job (SLURM_JOB_ID is unset)", r->src[F_LAUNCHER]);
  }
  cddp__slurm_step_t st;
  CDDP_CHECK(cddp__slurm_step_read(envp, &st));
  o->slurm = 1;
  snprintf(bufs[0], 256, "%s", st.master_addr);
  snprintf(bufs[1], 256, "%d", st.master_port);
  snprintf(bufs[2], 256, "%s", st.run_id);
  if (!r->val[F_MASTER_ADDR]) put(r, F_MASTER_ADDR, bufs[0], st.master_var, 0);
  if (!r->val[F_MASTER_PORT]) put(r, F_MASTER_PORT, bufs[1], st.port_var, 0);
  if (!r->val[F_RDZV_ID]) put(r, F_RDZV_ID, bufs[2], "SLURM_JOB_ID", 0);
  if (st.world != st.nnodes) { /* one task per rank: exec PROGRAM as this rank */
    o->mode = CDDP_RUN_SLURM_RANK;
    o->rank = st.rank;
    o->world_size = st.world;
    o->local_rank = st.local_rank;
    o->local_world_size = st.local_world;
    o->node_rank = st.node_rank;
    o->min_nodes = o->max_nodes = st.nnodes;
    return CDDP_OK;
  }
  /* one task per node: this task is the node's agent, static rendezvous over the step's nodes
   * (--nnodes MIN:MAX may say how few the job may go on with, and how many it may take in) */
  o->static_nodes = st.nnodes;
  snprintf(o->store_nodes, sizeof o->store_nodes, "%s", st.nodes);
  snprintf(bufs[3], 256, "%d", st.node_rank);
  snprintf(bufs[4], 256, "%d", st.nnodes);
  if (!r->val[F_NNODES]) put(r, F_NNODES, bufs[4], st.nnodes_var, 0);
  if (!r->val[F_NODE_RANK]) put(r, F_NODE_RANK, bufs[3], "SLURM_NODEID", 0);
  if (!r->val[F_RDZV_BACKEND]) put(r, F_RDZV_BACKEND, "static", "--launcher slurm", 0);
  return CDDP_OK;
}

/* mpirun started this process (--launcher mpi, or detected: OMPI_COMM_WORLD_RANK / PMI_RANK set
 * and no rendezvous configured): PROGRAM is exec'd as MPI's rank, as for a Slurm task. */
static cddp_result_t fill_mpi(raw_t *r, char **envp, cddp_run_opts_t *o, char bufs[5][256]) {
  const char *launcher = r->val[F_LAUNCHER] ? r->val[F_LAUNCHER] : "";
  int explicit_rdzv = r->val[F_STANDALONE] || r->val[F_RDZV_ENDPOINT] || r->val[F_MASTER_ADDR] ||
                      r->val[F_NODE_RANK] || r->val[F_RDZV_BACKEND];
  int by_mpirun = cddp__launcher_present(envp, CDDP_ENV_MPI);
  if (o->slurm || (strcmp(launcher, "mpi") && (*launcher || explicit_rdzv || !by_mpirun)))
    return CDDP_OK;
  if (!by_mpirun)
    return cddp__fail(CDDP_INVALID_ARG, "%s mpi: not started by mpirun (OMPI_COMM_WORLD_RANK and PMI_RANK are unset)",
                      r->src[F_LAUNCHER]);
  cddp__mpi_step_t st;
  CDDP_CHECK(cddp__mpi_step_read(envp, &st));
  o->mode = CDDP_RUN_MPI_RANK;
  o->rank = st.rank, o->world_size = st.world;
  o->local_rank = st.local_rank, o->local_world_size = st.local_world;
  o->node_rank = st.node_rank;
  o->min_nodes = o->max_nodes = st.nnodes;
  snprintf(bufs[0], 256, "%s", st.master_addr);
  snprintf(bufs[1], 256, "%d", st.master_port);
  snprintf(bufs[2], 256, "%s", st.run_id);
  if (!r->val[F_MASTER_ADDR]) put(r, F_MASTER_ADDR, bufs[0], "MASTER_ADDR", 0);
  if (!r->val[F_MASTER_PORT]) put(r, F_MASTER_PORT, bufs[1], "MASTER_PORT", 0);
  if (!r->val[F_RDZV_ID]) put(r, F_RDZV_ID, bufs[2], "the MPI job id", 0);
  return CDDP_OK;
}

/* torchrun's --redirects / --tee: one value 0-3 for every local rank, or "R:S,R:S" per local
 * rank (the ranks not named get 0). Fills std[0..nproc). */
static cddp_result_t parse_stream_map(const raw_t *r, int f, int nproc, unsigned char *std) {
  const char *s = r->val[f];
  long v, rank;
  if (!s) return CDDP_OK;
  if (!strchr(s, ':')) {
    if (!parse_long(s, 0, 3, &v)) return bad_value(r, f, "must be 0-3 (1 stdout, 2 stderr, 3 both) or a map R:S,R:S");
    memset(std, (int)v, (size_t)nproc);
    return CDDP_OK;
  }
  memset(std, 0, (size_t)nproc);
  for (const char *p = s; *p;) {
    char item[32];
    size_t len = strcspn(p, ",");
    const char *colon = memchr(p, ':', len);
    if (!colon || len >= sizeof item) return bad_value(r, f, "must be a map of LOCAL_RANK:STREAMS (0:3,1:1)");
    memcpy(item, p, (size_t)(colon - p));
    item[colon - p] = '\0';
    if (!parse_long(item, 0, CDDP_RUN_MAX_NPROC - 1, &rank)) return bad_value(r, f, "names a local rank that is not a number");
    memcpy(item, colon + 1, len - (size_t)(colon - p) - 1);
    item[len - (size_t)(colon - p) - 1] = '\0';
    if (!parse_long(item, 0, 3, &v)) return bad_value(r, f, "maps a local rank to something other than 0-3");
    if (rank >= nproc)
      return cddp__fail(CDDP_INVALID_ARG, "%s %s names local rank %ld, but this node runs %d workers", r->src[f], s, rank, nproc);
    std[rank] = (unsigned char)v;
    p += len + (p[len] == ',');
  }
  return CDDP_OK;
}

/* --local-ranks-filter 0,2: only those local ranks reach the console. */
static cddp_result_t parse_ranks_filter(const raw_t *r, int nproc, unsigned char *console) {
  const char *s = r->val[F_RANKS_FILTER];
  unsigned char keep[CDDP_RUN_MAX_NPROC] = {0};
  long v;
  if (!s) return CDDP_OK;
  for (const char *p = s; *p;) {
    char item[32];
    size_t len = strcspn(p, ", ");
    if (len == 0 || len >= sizeof item) return bad_value(r, F_RANKS_FILTER, "must be local ranks separated by commas (0,1)");
    memcpy(item, p, len);
    item[len] = '\0';
    if (!parse_long(item, 0, CDDP_RUN_MAX_NPROC - 1, &v)) return bad_value(r, F_RANKS_FILTER, "must be local ranks separated by commas (0,1)");
    if (v >= nproc)
      return cddp__fail(CDDP_INVALID_ARG, "%s %s names local rank %ld, but this node runs %d workers", r->src[F_RANKS_FILTER],
                        s, v, nproc);
    keep[v] = 1;
    p += len;
    while (*p == ',' || *p == ' ') p++;
  }
  for (int i = 0; i < nproc; i++)
    if (!keep[i]) console[i] = 0;
  return CDDP_OK;
}

/* torchrun's --rdzv-conf join_timeout=900,last_call_timeout=5,is_host=true: each key fills what
 * its own flag left unset. */
static cddp_result_t parse_rdzv_conf(const raw_t *r, cddp_run_opts_t *o) {
  const char *s = r->val[F_RDZV_CONF];
  if (!s) return CDDP_OK;
  for (const char *p = s; *p;) {
    char key[64], val[64];
    size_t len = strcspn(p, ","), klen = strcspn(p, "=");
    if (klen >= len || klen == 0 || klen >= sizeof key || len - klen - 1 >= sizeof val)
      return bad_value(r, F_RDZV_CONF, "must be KEY=VALUE pairs separated by commas");
    memcpy(key, p, klen);
    key[klen] = '\0';
    memcpy(val, p + klen + 1, len - klen - 1);
    val[len - klen - 1] = '\0';
    int ms, b;
    if (!strcmp(key, "is_host")) {
      if (!parse_bool(val, &b))
        return cddp__fail(CDDP_INVALID_ARG, "%s: is_host=%s must be true or false", r->src[F_RDZV_CONF], val);
      o->is_host = b;
    } else if (!strcmp(key, "join_timeout") || !strcmp(key, "timeout") || !strcmp(key, "last_call_timeout") ||
               !strcmp(key, "close_timeout") || !strcmp(key, "read_timeout")) {
      if (!parse_seconds_ms(val, &ms) || (ms <= 0 && strcmp(key, "last_call_timeout")))
        return cddp__fail(CDDP_INVALID_ARG, "%s: %s=%s must be a number of seconds", r->src[F_RDZV_CONF], key, val);
      if (!strcmp(key, "last_call_timeout")) {
        if (!r->val[F_RDZV_LAST_CALL]) o->last_call_ms = ms;
      } else if (!strcmp(key, "close_timeout")) {
        o->close_ms = ms;
      } else if (!strcmp(key, "read_timeout")) {
        o->read_ms = ms;
      } else if (!r->val[F_RDZV_TIMEOUT]) {
        o->rdzv_timeout_ms = ms;
      }
    } else {
      return cddp__fail(CDDP_INVALID_ARG, "%s: unknown key '%s' (known: join_timeout, last_call_timeout, close_timeout, "
                        "read_timeout, is_host)", r->src[F_RDZV_CONF], key);
    }
    p += len + (p[len] == ',');
  }
  return CDDP_OK;
}

/* --nproc-per-node N | gpu | cpu | auto */
static cddp_result_t parse_nproc(const raw_t *r, char **envp, cddp_run_opts_t *o) {
  const char *s = r->val[F_NPROC];
  long v, cpus = sysconf(_SC_NPROCESSORS_ONLN);
  char how[128];
  o->nproc_per_node = 1;
  snprintf(o->nproc_src, sizeof o->nproc_src, "default 1");
  if (!s) return CDDP_OK;
  if (cpus < 1) cpus = 1;
  if (!strcasecmp(s, "gpu") || !strcasecmp(s, "auto")) {
    int gpus = cddp__gpus_visible(envp, how, sizeof how);
    if (gpus > 0) {
      o->nproc_per_node = CDDP_MIN(gpus, CDDP_RUN_MAX_NPROC);
      snprintf(o->nproc_src, sizeof o->nproc_src, "%s %s: %d (%s)", r->src[F_NPROC], s, o->nproc_per_node, how);
      return CDDP_OK;
    }
    if (!strcasecmp(s, "gpu"))
      return cddp__fail(CDDP_INVALID_ARG, "%s gpu: no GPU is visible (%s); give a number of workers, or cpu",
                        r->src[F_NPROC], how);
    o->nproc_per_node = (int)CDDP_MIN(cpus, CDDP_RUN_MAX_NPROC);
    snprintf(o->nproc_src, sizeof o->nproc_src, "%s auto: %d CPUs (no GPU: %s)", r->src[F_NPROC], o->nproc_per_node, how);
    return CDDP_OK;
  }
  if (!strcasecmp(s, "cpu")) {
    o->nproc_per_node = (int)CDDP_MIN(cpus, CDDP_RUN_MAX_NPROC);
    snprintf(o->nproc_src, sizeof o->nproc_src, "%s cpu: %d CPUs", r->src[F_NPROC], o->nproc_per_node);
    return CDDP_OK;
  }
  if (!parse_long(s, 1, CDDP_RUN_MAX_NPROC, &v))
    return bad_value(r, F_NPROC, "must be a positive integer (at most 1024), gpu, cpu or auto");
  o->nproc_per_node = (int)v;
  quote(r, F_NPROC, o->nproc_src, sizeof o->nproc_src);
  return CDDP_OK;
}

/* What each worker runs, and where its two streams go. */
static cddp_result_t parse_program_and_streams(const raw_t *r, cddp_run_opts_t *o) {
  if (r->val[F_PYTHON]) {
    if (!*r->val[F_PYTHON] || strlen(r->val[F_PYTHON]) >= sizeof o->python)
      return bad_value(r, F_PYTHON, "must be the path or name of a Python interpreter");
    snprintf(o->python, sizeof o->python, "%s", r->val[F_PYTHON]);
  }
  if (r->val[F_MODULE] && !parse_bool(r->val[F_MODULE], &o->module)) return bad_value(r, F_MODULE, "must be 1 or 0");
  if (r->val[F_NO_PYTHON] && !parse_bool(r->val[F_NO_PYTHON], &o->no_python))
    return bad_value(r, F_NO_PYTHON, "must be 1 or 0");
  if (r->val[F_RUN_PATH] && !parse_bool(r->val[F_RUN_PATH], &o->run_path)) return bad_value(r, F_RUN_PATH, "must be 1 or 0");
  if (o->no_python && (o->module || o->run_path))
    return cddp__fail(CDDP_INVALID_ARG, "%s and %s contradict each other: --no-python runs PROGRAM as it is",
                      r->src[F_NO_PYTHON], o->module ? r->src[F_MODULE] : r->src[F_RUN_PATH]);
  snprintf(o->role, sizeof o->role, "default");
  if (r->val[F_ROLE]) {
    if (!*r->val[F_ROLE] || strlen(r->val[F_ROLE]) >= sizeof o->role || strpbrk(r->val[F_ROLE], " \t\n="))
      return bad_value(r, F_ROLE, "must be a name of 1-63 characters without spaces");
    snprintf(o->role, sizeof o->role, "%s", r->val[F_ROLE]);
  }
  if (r->val[F_START_METHOD] && strcmp(r->val[F_START_METHOD], "spawn") && strcmp(r->val[F_START_METHOD], "fork") &&
      strcmp(r->val[F_START_METHOD], "forkserver"))
    return bad_value(r, F_START_METHOD, "must be spawn, fork or forkserver");
  if (r->val[F_LOG_DIR]) snprintf(o->log_dir, sizeof o->log_dir, "%s", r->val[F_LOG_DIR]);
  int n = o->nproc_per_node;
  unsigned char redirects[CDDP_RUN_MAX_NPROC], tee[CDDP_RUN_MAX_NPROC];
  memset(redirects, o->log_dir[0] ? 3 : 0, (size_t)n);
  memset(tee, 0, (size_t)n);
  CDDP_CHECK(parse_stream_map(r, F_REDIRECTS, n, redirects));
  CDDP_CHECK(parse_stream_map(r, F_TEE, n, tee));
  for (int i = 0; i < n; i++) {
    o->console[i] = (unsigned char)((~redirects[i] | tee[i]) & 3);
    if ((redirects[i] | tee[i]) && !o->log_dir[0]) o->tmp_log_dir = 1; /* torchrun's files go to a temporary folder */
  }
  return parse_ranks_filter(r, n, o->console);
}

cddp_result_t cddp__run_parse(int argc, char **argv, char **envp, cddp_run_opts_t *o) {
  raw_t r;
  char bufs[5][256];
  long v;
  memset(&r, 0, sizeof r);
  memset(o, 0, sizeof *o);
  o->node_rank = -1;
  CDDP_CHECK(parse_argv(argc, argv, &r, o));
  if (o->mode == CDDP_RUN_HELP) return CDDP_OK;
  CDDP_CHECK(refuse_pet(envp));
  fill_env(&r, envp);
  fill_xtuner(&r, envp);
  CDDP_CHECK(fill_slurm(&r, envp, o, bufs));
  if (o->mode == CDDP_RUN_SLURM_BATCH) return CDDP_OK;
  CDDP_CHECK(fill_mpi(&r, envp, o, bufs));
  int task = o->mode == CDDP_RUN_SLURM_RANK || o->mode == CDDP_RUN_MPI_RANK; /* no agent: PROGRAM becomes the rank */

  /* --nnodes N | MIN:MAX (a Slurm rank task already has its node count) */
  if (!task) o->min_nodes = o->max_nodes = 1;
  if (r.val[F_NNODES] && !task) {
    const char *s = r.val[F_NNODES], *c = strchr(s, ':');
    char a[32];
    long lo, hi;
    if (c && (size_t)(c - s) < sizeof a) {
      memcpy(a, s, (size_t)(c - s));
      a[c - s] = '\0';
      if (!parse_long(a, 1, 1 << 20, &lo) || !parse_long(c + 1, 1, 1 << 20, &hi) || lo > hi)
        return bad_value(&r, F_NNODES, "must be N or MIN:MAX with 1 <= MIN <= MAX");
    } else if (!parse_long(s, 1, 1 << 20, &lo)) {
      return bad_value(&r, F_NNODES, "must be a positive integer N or MIN:MAX");
    } else {
      hi = lo;
    }
    o->min_nodes = (int)lo;
    o->max_nodes = (int)hi;
  }
  if (r.val[F_NNODES]) quote(&r, F_NNODES, o->nnodes_src, sizeof o->nnodes_src);
  else snprintf(o->nnodes_src, sizeof o->nnodes_src, "--nnodes 1");

  CDDP_CHECK(parse_nproc(&r, envp, o));

  if (r.val[F_STANDALONE] && !parse_bool(r.val[F_STANDALONE], &o->standalone))
    return bad_value(&r, F_STANDALONE, "must be 1 or 0");
  o->backend = CDDP_RDZV_C10D;
  if (r.val[F_RDZV_BACKEND]) {
    if (!strcmp(r.val[F_RDZV_BACKEND], "static")) o->backend = CDDP_RDZV_STATIC;
    else if (strcmp(r.val[F_RDZV_BACKEND], "c10d")) return bad_value(&r, F_RDZV_BACKEND, "must be c10d or static");
  }
  o->rdzv_timeout_ms = 300000;
  if (r.val[F_RDZV_TIMEOUT] && (!parse_seconds_ms(r.val[F_RDZV_TIMEOUT], &o->rdzv_timeout_ms) || o->rdzv_timeout_ms <= 0))
    return bad_value(&r, F_RDZV_TIMEOUT, "must be a positive number of seconds");
  o->last_call_ms = 2000;
  if (r.val[F_RDZV_LAST_CALL] && !parse_seconds_ms(r.val[F_RDZV_LAST_CALL], &o->last_call_ms))
    return bad_value(&r, F_RDZV_LAST_CALL, "must be a number of seconds >= 0");
  o->grace_ms = 5000;
  int grace = r.val[F_GRACE] || !r.val[F_SHUTDOWN] ? F_GRACE : F_SHUTDOWN; /* --grace-period wins */
  if (r.val[grace] && !parse_seconds_ms(r.val[grace], &o->grace_ms))
    return bad_value(&r, grace, "must be a number of seconds >= 0");
  if (r.val[F_MONITOR] && !parse_seconds_ms(r.val[F_MONITOR], &(int){0}))
    return bad_value(&r, F_MONITOR, "must be a number of seconds");
  o->hang_ms = 60000;
  if (r.val[F_HANG_TIMEOUT] && !parse_seconds_ms(r.val[F_HANG_TIMEOUT], &o->hang_ms))
    return bad_value(&r, F_HANG_TIMEOUT, "must be a number of seconds (0 = off)");
  o->close_ms = o->grace_ms;
  o->is_host = -1;
  CDDP_CHECK(parse_rdzv_conf(&r, o));
  if (r.val[F_MAX_RESTARTS]) {
    if (!parse_long(r.val[F_MAX_RESTARTS], 0, 1000000, &v)) return bad_value(&r, F_MAX_RESTARTS, "must be an integer >= 0");
    o->max_restarts = (int)v;
  }
  o->warm = 1;
  if (r.val[F_WARM] && !parse_bool(r.val[F_WARM], &o->warm)) return bad_value(&r, F_WARM, "must be on or off");
  if (r.val[F_WARM_PRELOAD]) {
    if (strlen(r.val[F_WARM_PRELOAD]) >= sizeof o->warm_preload || strspn(r.val[F_WARM_PRELOAD], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,") != strlen(r.val[F_WARM_PRELOAD]))
      return bad_value(&r, F_WARM_PRELOAD, "must be module names, comma-separated (torch,numpy), or '' for none");
    snprintf(o->warm_preload, sizeof o->warm_preload, "%s", r.val[F_WARM_PRELOAD]);
    o->warm_preload_set = 1;
  }
  o->agent_store = 1;
  if (r.val[F_AGENT_STORE]) {
    if (!strcmp(r.val[F_AGENT_STORE], "off")) o->agent_store = 0;
    else if (strcmp(r.val[F_AGENT_STORE], "auto")) return bad_value(&r, F_AGENT_STORE, "must be auto or off");
  }
  o->warm_delay_ms = 2000;
  if (r.val[F_WARM_DELAY] && !parse_seconds_ms(r.val[F_WARM_DELAY], &o->warm_delay_ms))
    return bad_value(&r, F_WARM_DELAY, "must be a number of seconds >= 0");
  o->cpu_bind = 1;
  if (r.val[F_CPU_BIND]) {
    if (!strcmp(r.val[F_CPU_BIND], "none")) o->cpu_bind = 0;
    else if (strcmp(r.val[F_CPU_BIND], "auto")) return bad_value(&r, F_CPU_BIND, "must be auto or none");
  }
  if (r.val[F_RESTART_MODE]) {
    if (!strcmp(r.val[F_RESTART_MODE], "replace")) o->replace = 1;
    else if (strcmp(r.val[F_RESTART_MODE], "all")) return bad_value(&r, F_RESTART_MODE, "must be all or replace");
  }
  if (r.val[F_NODE_RANK]) {
    if (!parse_long(r.val[F_NODE_RANK], 0, 1 << 20, &v)) return bad_value(&r, F_NODE_RANK, "must be an integer >= 0");
    o->node_rank = (int)v;
    quote(&r, F_NODE_RANK, o->node_rank_src, sizeof o->node_rank_src);
  }
  if (r.val[F_MASTER_PORT]) {
    if (!parse_long(r.val[F_MASTER_PORT], 1, 65535, &v)) return bad_value(&r, F_MASTER_PORT, "must be a port 1-65535");
    o->master_port = (int)v;
  }
  if (r.val[F_MASTER_ADDR]) {
    if (!*r.val[F_MASTER_ADDR] || strlen(r.val[F_MASTER_ADDR]) >= sizeof o->master_addr)
      return bad_value(&r, F_MASTER_ADDR, "must be a host name or address");
    snprintf(o->master_addr, sizeof o->master_addr, "%s", r.val[F_MASTER_ADDR]);
    snprintf(o->master_src, sizeof o->master_src, "%s", r.src[F_MASTER_ADDR]);
  }
  if (r.val[F_RDZV_ENDPOINT]) {
    o->rdzv_port = CDDP_RUN_DEFAULT_RDZV_PORT;
    CDDP_CHECK(parse_endpoint(&r, F_RDZV_ENDPOINT, o->rdzv_host, sizeof o->rdzv_host, &o->rdzv_port));
  }
  if (r.val[F_RDZV_ID]) {
    const char *id = r.val[F_RDZV_ID];
    if (!*id || strlen(id) >= sizeof o->run_id || strpbrk(id, " \t\n/"))
      return bad_value(&r, F_RDZV_ID, "must be 1-127 characters without spaces or '/'");
    snprintf(o->run_id, sizeof o->run_id, "%s", id);
  } else {
    snprintf(o->run_id, sizeof o->run_id, "none");
  }
  if (r.val[F_LOCAL_ADDR]) {
    if (!*r.val[F_LOCAL_ADDR] || strlen(r.val[F_LOCAL_ADDR]) > 63 || strchr(r.val[F_LOCAL_ADDR], ' '))
      return bad_value(&r, F_LOCAL_ADDR, "must be an address or host name of at most 63 characters");
    snprintf(o->local_addr, sizeof o->local_addr, "%s", r.val[F_LOCAL_ADDR]);
  }
  CDDP_CHECK(parse_program_and_streams(&r, o));

  if (task) return CDDP_OK;

  /* the rendezvous shape; torchrun's --standalone is --rdzv-endpoint localhost:0 (a free port) */
  int free_port = r.val[F_RDZV_ENDPOINT] && o->rdzv_port == 0;
  if (free_port && (o->max_nodes > 1 || o->backend != CDDP_RDZV_C10D) && !o->standalone)
    return cddp__fail(CDDP_INVALID_ARG, "%s: port 0 (a free port) works only for one node; give the port every node uses",
                      quote(&r, F_RDZV_ENDPOINT, (char[320]){0}, 320));
  if (o->standalone || (o->backend == CDDP_RDZV_C10D && (!o->rdzv_host[0] || free_port) && o->max_nodes == 1)) {
    o->standalone = 1;
    o->backend = CDDP_RDZV_C10D;
    o->min_nodes = o->max_nodes = 1;
    snprintf(o->rdzv_host, sizeof o->rdzv_host, "127.0.0.1");
    o->rdzv_port = 0;
    if (!r.val[F_RDZV_ID]) random_id(o->run_id, sizeof o->run_id);
    return CDDP_OK;
  }
  /* torchrun's default rendezvous is static on --master-addr:--master-port: the multi-node line
   * without --rdzv-* flags (VILA's, LLaVA's launch scripts) runs as under torchrun */
  if (o->backend == CDDP_RDZV_C10D && !r.val[F_RDZV_BACKEND] && !o->rdzv_host[0] && o->min_nodes == o->max_nodes)
    o->backend = CDDP_RDZV_STATIC;
  if (o->backend == CDDP_RDZV_C10D) {
    if (!o->rdzv_host[0])
      return cddp__fail(CDDP_INVALID_ARG, "%s needs --rdzv-endpoint HOST[:PORT] (the c10d rendezvous store)", o->nnodes_src);
    return CDDP_OK;
  }
  /* static: master = --master-addr, else the endpoint, else 127.0.0.1; a Slurm step's agents
   * wait for the step's nodes, and in replace mode MIN:MAX bounds the job around them */
  if (!o->static_nodes) o->static_nodes = o->max_nodes;
  if (o->min_nodes != o->max_nodes && !(o->slurm && o->replace))
    return cddp__fail(CDDP_INVALID_ARG, "the static rendezvous needs a fixed node count; %s is a range%s", o->nnodes_src,
                      o->slurm ? " (under Slurm, a range needs --restart-mode replace)" : "");
  if (o->static_nodes < o->min_nodes || o->static_nodes > o->max_nodes)
    return cddp__fail(CDDP_INVALID_ARG, "%s does not hold the step's %d nodes (SLURM_STEP_NUM_NODES)", o->nnodes_src,
                      o->static_nodes);
  if (!o->master_addr[0]) snprintf(o->master_addr, sizeof o->master_addr, "%s", o->rdzv_host[0] ? o->rdzv_host : "127.0.0.1");
  if (!o->master_port) o->master_port = o->rdzv_host[0] ? o->rdzv_port : CDDP_RUN_DEFAULT_MASTER_PORT;
  if (o->node_rank < 0) {
    if (o->max_nodes > 1)
      return cddp__fail(CDDP_INVALID_ARG, "the static rendezvous with %s needs --node-rank", o->nnodes_src);
    o->node_rank = 0;
  }
  if (o->node_rank >= o->static_nodes)
    return cddp__fail(CDDP_INVALID_ARG, "%s is not below %s", o->node_rank_src,
                      o->nnodes_src);
  return CDDP_OK;
}

/* cmd_status.c - `cddp status ENDPOINT|RUN_DIR`: asks a running job, through its store, for every
 * node and rank: state, step, step rate, last collective, round and generation, recent events;
 * of a run folder whose job is over (or not started), what the run left there. */
#include <errno.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cddp/store.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cddp/ckpt.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/sock.h"
#include "job/status.h"

#define STALE_MS 5000 /* a record older than this: its agent stopped posting (lost, or stopping) */

static void usage(FILE *f) {
  fprintf(f,
          "usage: cddp status ENDPOINT|RUN_DIR [--rdzv-id ID] [--events N]\n"
          "  ENDPOINT       HOST:PORT of the job's store (cddp run's --rdzv-endpoint, or MASTER_ADDR:PORT)\n"
          "  RUN_DIR        a folder holding the job's record (endpoint): cddp run's --log-dir, or the\n"
          "                 trainer's run folder (work_dir/name)\n"
          "  --rdzv-id ID   the job (cddp run --rdzv-id) at ENDPOINT (default: none, torchrun's default)\n"
          "  --events N     recent events shown (default 10)\n"
          "The token: the record's, else CDDP_TOKEN / CDDP_TOKEN_FILE. Prints every node and rank: state\n"
          "(alive, hung, failed, exited; a node: running, spare, done, failed), step, steps/s, the last\n"
          "collective, the round and generation, and the job's recent events (losses, recovery times).\n"
          "RUN_DIR of a job that is over (its store gone), or not started yet: what the run left there,\n"
          "its last step (metrics.jsonl), newest checkpoint and how it ended (done, stopped by a signal,\n"
          "failed; recorded by the trainer), at once.\n"
          "Exit 0; 1 when there is no job there; 2 for bad input.\n");
}

static uint64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int by_place(const void *a, const void *b) {
  const cddp__status_node_t *x = a, *y = b;
  int rx = x->nranks ? x->ranks[0].rank : x->rank_base, ry = y->nranks ? y->ranks[0].rank : y->rank_base;
  return rx != ry ? (rx > ry) - (rx < ry) : (x->slot > y->slot) - (x->slot < y->slot);
}

static void print_events(const char *title, const cddp__status_event_t *ev, int n) {
  printf("%s%s\n", title, n ? "" : ": none");
  for (int i = 0; i < n; i++) {
    time_t t = (time_t)(ev[i].wall_ms / 1000);
    struct tm tm;
    char when[32];
    strftime(when, sizeof when, "%H:%M:%S", localtime_r(&t, &tm));
    printf("  %s  %s\n", when, ev[i].text);
  }
}

/* The events the job's agent or rank 0 kept in dir when it ended (the store went with it). */
static void print_kept_events(const char *dir, int max) {
  cddp__status_event_t *ev = calloc((size_t)CDDP_MAX(max, 1), sizeof *ev);
  int n = 0;
  cddp_result_t r = ev ? cddp__events_load(dir, ev, max, &n) : CDDP_SYSTEM;
  if (r == CDDP_OK) print_events("events (kept when the job ended)", ev, n);
  else if (r == CDDP_NOT_FOUND) printf("events: none kept (the job ended without saying them: killed, or its store lost)\n");
  else printf("events: %s\n", cddp_last_error());
  cddp__clear_error();
  free(ev);
}

/* A run folder without a live job: its last step, newest checkpoint, how it ended and its last
 * events (at most max). why: why the job is not asked. Exit 0, or 1 when dir holds no run. */
static int print_left(const char *dir, const cddp__endpoint_t *e, const char *why, int max) {
  uint64_t step = 0;
  int has_step = 0;
  char bad[64] = "", path[4200], newest[4200];
  cddp_result_t m = cddp__run_last_step(dir, &step, &has_step, bad, sizeof bad);
  if (m != CDDP_OK && m != CDDP_NOT_FOUND) {
    fprintf(stderr, "cddp status: %s\n", cddp_last_error());
    return 1;
  }
  snprintf(path, sizeof path, "%s/checkpoints", dir);
  int has_ckpt = cddp_ckpt_find_newest(path, newest, sizeof newest) == CDDP_OK;
  cddp__clear_error();
  snprintf(path, sizeof path, "%s/config.yaml", dir);
  int has_config = access(path, F_OK) == 0;
  if (!e && m == CDDP_NOT_FOUND && !has_ckpt && !has_config) {
    fprintf(stderr, "cddp status: %s has no job record (%s/endpoint) nor a run's files (config.yaml, "
            "metrics.jsonl, checkpoints): not a folder of a job started by cddp run or cddp train\n", dir, dir);
    return 1;
  }
  if (e && e->ended[0]) printf("run %s: over, %s\n", dir, e->ended);
  else if (e && (m == CDDP_OK || has_ckpt))
    printf("run %s: over; how it ended is not recorded (killed, or its host lost): %s\n", dir, why);
  else if (e) printf("run %s: over before its first step (%s)\n", dir, why);
  else if (m == CDDP_OK || has_ckpt) printf("run %s: no job record (not started by cddp run)\n", dir);
  else printf("run %s: starting (no metrics yet)\n", dir);
  if (m == CDDP_OK && has_step) printf("  last step %llu (metrics.jsonl)\n", (unsigned long long)step);
  else if (m == CDDP_OK) printf("  metrics.jsonl: no step yet\n");
  else if (has_config || has_ckpt) printf("  no metrics yet (metrics.jsonl)\n");
  if (bad[0]) printf("  metrics.jsonl: its last line does not parse (a write cut short?): '%s'\n", bad);
  /* a launcher's --log-dir holds no run's files: no line about them */
  if (m == CDDP_OK || has_config || has_ckpt)
    printf("  newest checkpoint: %s\n", has_ckpt ? strrchr(newest, '/') + 1 : "none");
  if (e && max > 0) print_kept_events(dir, max);
  return 0;
}

/* The job in dir's record is over when its store refuses (or does not answer) within 1 s: a
 * finished run is told at once, not after the store client's 5 s of retries. why: the reason. */
static int job_gone(const cddp__endpoint_t *e, char *why, size_t size) {
  int fd = -1;
  if (cddp__sock_connect(e->host, e->port, 0, cddp__deadline_ms(1000), &fd) == CDDP_OK) {
    close(fd);
    return 0;
  }
  snprintf(why, size, "its store %s:%d is gone: %s", e->host, e->port, cddp_last_error());
  cddp__clear_error();
  return 1;
}

/* ENDPOINT or RUN_DIR into e (run_id from --rdzv-id for an endpoint; events: how many a folder
 * whose job is over shows). -1: a live job to ask; else
 * the exit code (a folder whose job is over is told here). */
static int resolve(const char *arg, const char *run_id, int events, cddp__endpoint_t *e) {
  struct stat st;
  memset(e, 0, sizeof *e);
  int st_rc = stat(arg, &st), stat_errno = st_rc ? errno : ENOTDIR;
  if (st_rc == 0 && S_ISDIR(st.st_mode)) {
    char why[400] = "";
    cddp_result_t r = cddp__endpoint_read(arg, e);
    if (r == CDDP_NOT_FOUND) return print_left(arg, NULL, "", events);
    if (r != CDDP_OK) {
      fprintf(stderr, "cddp status: %s\n", cddp_last_error());
      return 1;
    }
    /* an ended run whose store still answers: its agents restart it, or are finishing */
    if (job_gone(e, why, sizeof why)) return print_left(arg, e, why, events);
    if (!e->token[0]) (void)cddp_token_from_env(e->token, sizeof e->token);
    return -1;
  }
  const char *colon = strrchr(arg, ':');
  if (!colon && strchr(arg, '/')) {
    fprintf(stderr, "cddp status: no folder '%s' (%s): a run's folder appears once its job has started; "
            "or give HOST:PORT (cddp status --help)\n", arg, strerror(stat_errno));
    return 2;
  }
  char *end = NULL;
  long port = colon ? strtol(colon + 1, &end, 10) : 0;
  if (!colon || colon == arg || !end || *end || port <= 0 || port > 65535) {
    fprintf(stderr, "cddp status: '%s' is neither a folder nor HOST:PORT (cddp status --help)\n", arg);
    return 2;
  }
  int v6 = arg[0] == '[' && colon[-1] == ']';
  snprintf(e->host, sizeof e->host, "%.*s", (int)(colon - arg) - 2 * v6, arg + v6);
  e->port = (int)port;
  snprintf(e->run_id, sizeof e->run_id, "%s", run_id);
  if (cddp_token_from_env(e->token, sizeof e->token) != CDDP_OK) {
    fprintf(stderr, "cddp status: %s\n", cddp_last_error());
    return 2;
  }
  return -1;
}

static void print_node(const cddp__status_node_t *n, uint64_t now) {
  double age = now > n->wall_ms ? (double)(now - n->wall_ms) / 1e3 : 0;
  char agent[16] = "-", ranks[32] = "-";
  if (n->agent_id >= 0) snprintf(agent, sizeof agent, "%d", n->agent_id);
  if (n->nranks) snprintf(ranks, sizeof ranks, "%d-%d", n->ranks[0].rank, n->ranks[n->nranks - 1].rank);
  int silent = age * 1e3 > STALE_MS && !strcmp(n->state, "running");
  printf("node %-3d %-20s agent %-3s %-8s ranks %-7s updated %.1f s ago%s\n", n->node_rank, n->host, agent,
         silent ? "silent" : n->state, ranks, age, silent ? " (its agent stopped posting: lost or stopping)" : "");
  for (int i = 0; i < n->nranks; i++) {
    const cddp__status_rank_t *r = &n->ranks[i];
    printf("  rank %-4d pid %-8d %-8s step %-8llu %7.2f steps/s  %llu collectives, last %s%s%s\n", r->rank, r->pid,
           r->state, (unsigned long long)r->step, r->rate, (unsigned long long)r->coll, r->last,
           r->in_coll ? " (inside it)" : "", r->replaced ? "; a replacement" : "");
    if (r->cpu_pct < 0 && r->out_age_ms < 0 && !r->rss_kb) continue; /* an agent that does not say */
    char cpu[16] = "-", ago[24] = "", idle[64] = "";
    if (r->cpu_pct >= 0) snprintf(cpu, sizeof cpu, "%.0f%%", r->cpu_pct);
    if (r->out_age_ms >= 0) snprintf(ago, sizeof ago, " (%.1f s ago)", r->out_age_ms / 1e3);
    if (r->idle_ms >= 2000) snprintf(idle, sizeof idle, "; idle %.1f s (no line, under 5%% CPU)", r->idle_ms / 1e3);
    printf("            cpu %-5s rss %-7.0f MiB  restarts %d  last line%s: %s%s\n", cpu, r->rss_kb / 1024.0,
           n->restarts, ago, r->out, idle);
  }
}

int cddp__cmd_status(int argc, char **argv) {
  const char *target = NULL, *run_id = "none";
  long events = 10;
  int n_target = 0;
  const cddp__flag_t flags[] = {
      CDDP__FLAG_STR_ROW("--rdzv-id", "--rdzv_id", &run_id),
      CDDP__FLAG_LONG_ROW("--events", &events, 0, 1000, "a count (0-1000)"),
  };
  const cddp__cli_t cli = {.cmd = "status", .flags = flags, .n_flags = 2, .usage = usage, .positional = &target,
                           .max_positional = 1, .n_positional = &n_target};
  int rc = cddp__flags_parse(&cli, argc, argv);
  if (rc >= 0) return rc;
  if (!target) {
    fprintf(stderr, "cddp status: ENDPOINT (HOST:PORT) or RUN_DIR is required (cddp status --help)\n");
    return 2;
  }
  cddp__endpoint_t e;
  if ((rc = resolve(target, run_id, (int)events, &e)) >= 0) return rc; /* bad input, or a folder told from its files */
  cddp_store_t *base = NULL, *s = NULL;
  cddp_result_t r = cddp_store_tcp_connect(&base, e.host, e.port, e.token, 5000);
  struct stat st;
  if (r != CDDP_OK && stat(target, &st) == 0 && S_ISDIR(st.st_mode)) { /* the port is another's now */
    char why[400];
    snprintf(why, sizeof why, "%s:%d is no longer its store: %s", e.host, e.port, cddp_last_error());
    return print_left(target, &e, why, (int)events);
  }
  if (r == CDDP_AUTH) {
    fprintf(stderr, "cddp status: the store at %s:%d refused our token (the job's record, else CDDP_TOKEN / "
            "CDDP_TOKEN_FILE): %s\n", e.host, e.port, cddp_last_error());
    return 1;
  }
  if (r != CDDP_OK) {
    fprintf(stderr, "cddp status: no job at %s:%d: %s\n", e.host, e.port, cddp_last_error());
    return 1;
  }
  char prefix[160];
  snprintf(prefix, sizeof prefix, "%s/", e.run_id);
  cddp__status_node_t *nodes = NULL;
  cddp__status_event_t *ev = calloc((size_t)CDDP_MAX(events, 1), sizeof *ev);
  int n = 0, nev = 0;
  rc = 1;
  if (!ev || cddp_store_prefix_create(&s, base, prefix, 1) != CDDP_OK || cddp__status_read(s, &nodes, &n) != CDDP_OK ||
      cddp__status_events(s, ev, (int)events, &nev) != CDDP_OK) {
    fprintf(stderr, "cddp status: cannot read job '%s' at %s:%d: %s\n", e.run_id, e.host, e.port, cddp_last_error());
    goto exit;
  }
  if (n == 0) {
    fprintf(stderr, "cddp status: no job '%s' at %s:%d (no node posted its status: another --rdzv-id, or it has not "
            "started its workers yet)\n", e.run_id, e.host, e.port);
    goto exit;
  }
  qsort(nodes, (size_t)n, sizeof *nodes, by_place);
  int ranks = 0, round = 0, restarts = 0;
  int64_t gen = 0;
  for (int i = 0; i < n; i++) {
    if (!strcmp(nodes[i].state, "running")) ranks += nodes[i].nranks;
    round = CDDP_MAX(round, nodes[i].round), restarts = CDDP_MAX(restarts, nodes[i].restarts);
    gen = CDDP_MAX(gen, nodes[i].gen);
  }
  printf("job %s at %s:%d: %d node%s, %d rank%s running, round %d (restarts %d), generation %lld\n", e.run_id, e.host,
         e.port, n, n == 1 ? "" : "s", ranks, ranks == 1 ? "" : "s", round, restarts, (long long)gen);
  uint64_t now = wall_ms();
  for (int i = 0; i < n; i++) print_node(&nodes[i], now);
  if (events > 0) print_events("events", ev, nev);
  rc = 0;
exit:
  free(nodes);
  free(ev);
  if (s) cddp_store_close(s);
  else cddp_store_close(base);
  return rc;
}

/* cmd_status.c - `cddp status ENDPOINT|RUN_DIR`: asks a running job, through its store, for every
 * node and rank: state, step, step rate, last collective, round and generation, recent events. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cddp/store.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/check.h"
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

/* ENDPOINT or RUN_DIR into e (run_id from --rdzv-id for an endpoint). 0, or the exit code. */
static int resolve(const char *arg, const char *run_id, cddp__endpoint_t *e) {
  struct stat st;
  memset(e, 0, sizeof *e);
  if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode)) {
    if (cddp__endpoint_read(arg, e) != CDDP_OK) {
      fprintf(stderr, "cddp status: %s\n", cddp_last_error());
      return 1;
    }
    if (!e->token[0]) (void)cddp_token_from_env(e->token, sizeof e->token);
    return 0;
  }
  const char *colon = strrchr(arg, ':');
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
  return 0;
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
  if ((rc = resolve(target, run_id, &e)) != 0) return rc;
  cddp_store_t *base = NULL, *s = NULL;
  cddp_result_t r = cddp_store_tcp_connect(&base, e.host, e.port, e.token, 5000);
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
  if (events > 0) {
    printf("events%s\n", nev ? "" : ": none");
    for (int i = 0; i < nev; i++) {
      time_t t = (time_t)(ev[i].wall_ms / 1000);
      struct tm tm;
      char when[32];
      strftime(when, sizeof when, "%H:%M:%S", localtime_r(&t, &tm));
      printf("  %s  %s\n", when, ev[i].text);
    }
  }
  rc = 0;
exit:
  free(nodes);
  free(ev);
  if (s) cddp_store_close(s);
  else cddp_store_close(base);
  return rc;
}

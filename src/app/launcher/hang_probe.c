/* hang_probe.c - the watchdog for programs without a flight page (a torch script): a worker that
 * neither spends nor wants CPU nor writes a line for the timeout, outside torch.distributed and
 * past its imports, while a peer waits in a collective, is hung; so is one that is stopped. A long
 * silent step spends CPU, and a rank starved on a loaded machine wants it: never a hang. Ranks
 * waiting in the group's set-up wait for ranks still starting, which are not judged. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/io.h"
#include "launcher/hang_probe.h"

#define STACK_EVERY_NS 2000000000ull
#define STACK_SOONER_NS 1000000000ull

int cddp__proc_stat_parse(const char *buf, uint64_t *ticks, char *state) {
  const char *s = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
  unsigned long long ut = 0, st = 0;
  char c = 0;
  /* after the name: state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime(14) stime(15) */
  if (!s || sscanf(s + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &c, &ut, &st) != 3) return -1;
  *ticks = ut + st, *state = c;
  return 0;
}

int cddp__proc_stat(pid_t pid, uint64_t *ticks, char *state) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  if (cddp__read_small(path, buf, sizeof buf) < 0) return -1;
  return cddp__proc_stat_parse(buf, ticks, state);
}

uint64_t cddp__proc_rss_kb(pid_t pid) {
  char path[64], buf[128];
  unsigned long long size = 0, resident = 0;
  snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
  if (cddp__read_small(path, buf, sizeof buf) < 0) return 0;
  if (sscanf(buf, "%llu %llu", &size, &resident) != 2) return 0;
  return resident * (uint64_t)sysconf(_SC_PAGESIZE) / 1024u;
}

static void take(cddp__probe_t *q, uint64_t now_ns, const char *stack_dir) {
  char path[4300];
  snprintf(path, sizeof path, "%s/pystack-rank%d.txt", stack_dir, q->rank);
  q->stack_ns = now_ns;
  q->have_where = 0;
  for (int tries = 0; tries < 2 && !q->have_where; tries++) /* --nonblocking may read a stack mid-change */
    q->have_where = cddp__pystack_take(q->pid, path) == 0 && cddp__pystack_where(path, &q->where) == 0;
}

/* Its main thread runnable (R) or in the kernel's I/O (D): it wants the CPU. On a loaded machine a
 * starved rank gets a sliver of one, so its CPU share alone would call it idle. */
static int wants_cpu(char state) { return state == 'R' || state == 'D'; }

/* Its stack was read since its last sign of progress: it says where the worker is idle. */
static int fresh(const cddp__probe_t *q) { return q->have_where && q->stack_ns >= q->since_ns; }

int cddp__probe_waiting(const cddp__probe_t *q) {
  return q->pid && fresh(q) && q->where.coll[0] && !q->where.setup;
}

const char *cddp__probe_state(const cddp__probe_t *q, uint64_t now_ns, uint64_t idle_ns) {
  if (!q->pid) return NULL;
  if (q->state == 'T' || q->state == 't') return "stopped";
  if (!q->since_ns || now_ns < q->since_ns || now_ns - q->since_ns < idle_ns || !fresh(q)) return NULL;
  if (q->where.importing || q->where.setup) return "starting";
  return q->where.coll[0] ? "waiting" : "stuck";
}

int cddp__probe_find(cddp__probe_t *p, int n, uint64_t now_ns, int timeout_ms, uint64_t remote_since,
                     const char *stack_dir, char *why, size_t size) {
  static long tick_ns;
  if (!tick_ns) tick_ns = 1000000000L / sysconf(_SC_CLK_TCK);
  uint64_t limit = (uint64_t)timeout_ms * 1000000ull;
  int idle_any = 0, due = 0;
  for (int i = 0; i < n; i++) {
    uint64_t ticks = 0;
    char was = p[i].state;
    if (!p[i].pid || cddp__proc_stat(p[i].pid, &ticks, &p[i].state) != 0) {
      p[i].pid = 0;
      continue;
    }
    /* the first thread may sit in D (a long system call) or Z (pthread_exit) while the rest are
     * stopped: then any thread's T names the process stopped */
    if ((p[i].state == 'D' || p[i].state == 'Z') && cddp__proc_stopped(p[i].pid)) p[i].state = 'T';
    int stopped = p[i].state == 'T' || p[i].state == 't';
    uint64_t spent = (ticks - p[i].cpu_ticks) * (uint64_t)tick_ns;
    /* runnable at two looks in a row: a waiting rank's thread caught awake for an instant is not */
    int starved = wants_cpu(was) && wants_cpu(p[i].state);
    int busy = p[i].since_ns && (spent * 100 >= (now_ns - p[i].read_ns) * CDDP__PROBE_BUSY_PCT || starved);
    if (!p[i].since_ns || (!stopped && (busy || p[i].line_ns != p[i].seen_line_ns))) p[i].since_ns = now_ns;
    p[i].cpu_ticks = ticks, p[i].read_ns = now_ns, p[i].seen_line_ns = p[i].line_ns;
    idle_any |= now_ns - p[i].since_ns >= limit / 2; /* stacks from half the timeout on: none to wait for at it */
    due |= now_ns - p[i].since_ns >= limit;
  }
  if (!idle_any) return -1;
  /* where everyone is, now: the idle one and those it may hold up; at the timeout, a peer whose
   * stack predates its last sign of progress (a waiter caught awake) is read again sooner */
  for (int i = 0; i < n; i++)
    if (p[i].pid && (!p[i].stack_ns || now_ns - p[i].stack_ns >= STACK_EVERY_NS ||
                     (due && !fresh(&p[i]) && now_ns - p[i].stack_ns >= STACK_SOONER_NS)))
      take(&p[i], now_ns, stack_dir);
  for (int i = 0; i < n; i++) {
    if (!p[i].pid || now_ns - p[i].since_ns < limit) continue;
    double idle = (double)(now_ns - p[i].since_ns) / 1e9;
    char in[200] = "";
    if (p[i].have_where && p[i].where.user[0]) snprintf(in, sizeof in, "; in %s", p[i].where.user);
    if (p[i].state == 'T' || p[i].state == 't') {
      snprintf(why, size, "hung: stopped (SIGSTOP or a debugger), no progress for %.1f s%s", idle, in);
      return i;
    }
    /* unknown; itself waiting (in a collective or the group's set-up); or still starting (an
     * import): none of these is the rank that holds the others up */
    if (!fresh(&p[i]) || p[i].where.coll[0] || p[i].where.importing) continue;
    char ranks[128] = "", coll[48] = "";
    for (int j = 0; j < n; j++) {
      if (j == i || !cddp__probe_waiting(&p[j])) continue;
      size_t k = strlen(ranks);
      snprintf(ranks + k, sizeof ranks - k, "%s%d", k ? ", " : "", p[j].rank);
      if (!coll[0]) snprintf(coll, sizeof coll, "%s", p[j].where.coll);
    }
    if (!ranks[0] && remote_since && now_ns > remote_since) /* the other node judged its own rank already */
      snprintf(ranks, sizeof ranks, "on other nodes"), snprintf(coll, sizeof coll, "a collective");
    if (!ranks[0]) continue;
    snprintf(why, size, "hung: no progress for %.1f s while ranks %s wait in %s%s", idle, ranks, coll, in);
    return i;
  }
  return -1;
}

/* hang_probe.h - a hung worker found without a flight page: from its output lines, its CPU time
 * and state (/proc) and where its Python threads are (launcher/pystack.h). */
#ifndef CDDP_LAUNCHER_HANG_PROBE_H
#define CDDP_LAUNCHER_HANG_PROBE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "launcher/pystack.h"

/* One worker as the probe sees it. The caller sets pid (0: exited or judged by its flight page:
 * skipped), rank and line_ns before each call; the rest is the probe's. Zero it at each spawn. */
typedef struct cddp__probe {
  pid_t pid;
  int rank;
  uint64_t line_ns;      /* when it last wrote an output line (0: never) */
  uint64_t seen_line_ns; /* line_ns as last seen */
  uint64_t cpu_ticks;    /* utime + stime of all its threads, as last read */
  uint64_t read_ns;      /* when */
  char state;            /* its /proc state letter, as last read */
  uint64_t since_ns;     /* its last sign of progress (0: not read yet) */
  uint64_t stack_ns;     /* when its stack was last taken (0: never) */
  int have_where;        /* the stack was read: where holds it */
  cddp__pywhere_t where;
} cddp__probe_t;

/* utime + stime (clock ticks) and the state letter of pid from /proc; -1 when it is gone. Its own
 * threads only (not cutime): a child's CPU, a DataLoader worker's, is never the rank's progress. */
int cddp__proc_stat(pid_t pid, uint64_t *ticks, char *state);
/* The same from the text of a /proc/PID/stat (NUL-terminated; the name in it is the process's own). */
int cddp__proc_stat_parse(const char *buf, uint64_t *ticks, char *state);
/* pid's resident memory in KiB (/proc/PID/statm); 0 when it is gone. */
uint64_t cddp__proc_rss_kb(pid_t pid);

/* A worker spends CPU (this share of one CPU, in percent, or more) or writes a line: progress. */
#define CDDP__PROBE_BUSY_PCT 5

/* Reads every live worker's signs, then names a hung one: no progress (no CPU spent or wanted, no
 * line) for timeout_ms and stopped (SIGSTOP, a debugger), or idle outside torch.distributed and
 * outside any import while a local peer's main thread waits in a collective, or while a rank of
 * another node waits in one (remote_since: since when, from the nodes' status records; 0: none).
 * A peer in the group's set-up (init_process_group) is no waiting peer: the ranks it waits for are
 * starting. Stacks are taken (into stack_dir/pystack-rank<R>.txt) only once a worker has been idle
 * for half of timeout_ms, at most every 2 s. Blocks for the stacks (py-spy, bounded). Returns its
 * index and why ("hung: no progress for 10.0 s while ranks 0 wait in all_reduce; in f (a.py:7)"),
 * or -1. */
int cddp__probe_find(cddp__probe_t *p, int n, uint64_t now_ns, int timeout_ms, uint64_t remote_since,
                     const char *stack_dir, char *why, size_t size);

/* Whether q waits in a collective now: its stack, taken since its last sign of progress, is inside
 * torch.distributed but not in the group's set-up (what other nodes' watchdogs read from the
 * status record). */
int cddp__probe_waiting(const cddp__probe_t *q);

/* What the watchdog makes of q now, for `cddp status` before any verdict: "stopped" (SIGSTOP, a
 * debugger); idle for idle_ns or more and, by a stack taken since: "waiting" (in a collective),
 * "starting" (importing, or in the group's set-up), "stuck" (in its own code: the rank the waiting
 * ones wait for, named hung at the timeout); else NULL (making progress, or not known). */
const char *cddp__probe_state(const cddp__probe_t *q, uint64_t now_ns, uint64_t idle_ns);

#endif /* CDDP_LAUNCHER_HANG_PROBE_H */

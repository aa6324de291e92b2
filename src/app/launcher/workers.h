/* workers.h - the local workers of one round: spawn, forward output, watch, stop. */
#ifndef CDDP_LAUNCHER_WORKERS_H
#define CDDP_LAUNCHER_WORKERS_H

#include <stdint.h>
#include <sys/types.h>

#include "cddp/cddp.h"
#include "launcher/blame.h"
#include "launcher/hang.h"
#include "launcher/hang_probe.h"
#include "launcher/warm.h"

typedef struct cddp__worker {
  pid_t pid;
  int rank;
  int fd[2];        /* read ends of the worker's stdout / stderr; -1 once closed */
  char *buf[2];     /* partial line per stream */
  size_t len[2];
  int live_open[2]; /* its live line ("\r..." progress, rewritten in place) is on the console */
  int log_fd;       /* DIR/rank<N>.log or -1 */
  int exited, status;
  uint64_t start_ns, exit_ns; /* monotonic: spawned, reaped */
  uint64_t report_ns;         /* when its last stderr line came (0: none yet) */
  char report[256];           /* that line, its own error report as far as the agent knows */
  uint64_t out_ns;            /* when its last output line came, either stream (0: none yet) */
  char out[84];               /* that line, printable ASCII (`cddp status`) */
  char exception[256];        /* the exception line of its last Python traceback on stderr ("": none) */
  int in_traceback;           /* 1: its stderr is inside a traceback, the exception line comes next */
  int replaced;               /* 1: this process replaced one that failed, prev says how */
  cddp__failure_t prev;
  cddp__progress_t progress;  /* its flight page (the watchdog's and `cddp status`'s) */
  cddp__probe_t probe;        /* the watchdog's signs when it keeps no flight page (a torch script) */
  char hang[640];             /* "hung: ...": the watchdog killed it, and why ("" otherwise), with
                                 room for a flight folder's path of 380 characters, uncut */
} cddp__worker_t;

typedef enum cddp__outcome {
  CDDP__OUT_SUCCESS = 0, /* every worker exited 0 */
  CDDP__OUT_FAILED,      /* a worker failed: fail_* say which; the others were stopped */
  CDDP__OUT_SIGNAL,      /* the agent got SIGINT/SIGTERM/SIGHUP: forwarded, workers stopped (also
                            when it came while they were being stopped for another reason) */
  CDDP__OUT_EVENT,       /* the event fd said something (another node): workers stopped; fail_*
                            name a worker that had failed by itself before that (else -1) */
  CDDP__OUT_WAKE         /* wake_fd is readable: returned at once, the workers keep running */
} cddp__outcome_t;

typedef struct cddp__workers {
  int n;
  cddp__worker_t *w;
  const unsigned char *console; /* per slot (local rank): bit 0 stdout, bit 1 stderr reach the console */
  int live;         /* the console is a terminal: a worker's "\r"-led segments (its progress line,
                       CDDP_CONSOLE_LIVE) are shown at once and rewritten in place, with the prefix */
  cddp__worker_t *live_on[2]; /* whose live line is on the console now, per stream (NULL: none) */
  int grace_ms;
  int keep_going;   /* a failed worker does not stop the others: watch returns FAILED at once
                       (fail_index says which slot) and the rest keep running */
  int stop_now;     /* watch starts by stopping every worker (TERM, KILL after grace_ms) */
  int wake_fd;      /* -1, or an fd whose readability makes watch return WAKE (read it) */
  uint64_t stop_at; /* 0, or a monotonic time (ns) at which the workers are stopped (TERM,
                       KILL after grace_ms) if they have not all exited by themselves */
  int termed;       /* stop_at's TERM was sent */
  int cpu_bind;     /* worker i runs on the i-th of n_bind shares of the agent's CPUs (launcher/cpubind.h) */
  int n_bind;       /* set by cddp__workers_start: the round's worker count */
  const char *host; /* this node's name, for the failure records */
  const char *err_dir; /* NULL, or the folder of the workers' torch error files (launcher/errfile.h):
                          a worker's own report of why it failed, and when */
  uint64_t stop_ns; /* when the workers were first told to stop (0: not yet) */
  int hang_ms;      /* > 0 (with err_dir): a worker whose flight page stands still this long while
                       its peers wait is hung (launcher/hang.h): its pages are dumped to
                       flight_dir, its stack taken, and it is killed (a failure, its line why) */
  const char *flight_dir;
  int *flight_named; /* NULL, or set once a line (the watchdog's, SIGUSR1's, an INFO one) names
                        flight_dir: the agent keeps a private folder's records only then */
  void (*tick)(struct cddp__workers *ws, void *arg); /* NULL, or called about every second while
                                                       the workers run (the agent's status record) */
  void *tick_arg;
  int *remote_wanted;           /* NULL, or (atomic) set while a local worker has been idle outside
                                   any collective for half the hang timeout: look at the others */
  const uint64_t *remote_since; /* NULL, or (atomic) since when a rank of another node has been
                                   inside the same collective (0: none): the watchdog's view of
                                   the other nodes, from their status records (status_pub.h) */
  struct cddp__etimer *timer; /* NULL, or torch's elastic timers this agent serves (launcher/elastic_timer.h) */
  cddp__warm_t *warm; /* NULL, or the warm spares (launcher/warm.h): a slot's spare becomes its
                         next worker; new ones start when the pool says */
  /* results of cddp__workers_watch */
  cddp__outcome_t outcome;
  int fail_rank, fail_status, fail_index; /* FAILED: the failure that came first (launcher/blame.h), */
  pid_t fail_pid;                         /* not the first one reaped */
  cddp__failure_t failure;                /* ... and its whole record */
  int signo;
  char event[512];
} cddp__workers_t;

/* Starts n workers running argv (execvp) with env[i] as worker i's environment and
 * global rank rank_base + i. Each gets its own process group, PR_SET_PDEATHSIG(SIGKILL)
 * and an empty signal mask. log_dir "" = no files; else DIR/rank<N>.log (truncated when
 * truncate_logs). On error the ones already started are killed. */
/* mkdir -p DIR (0755); -1 with errno when a part cannot be made. */
int cddp__mkdir_p(const char *dir);

cddp_result_t cddp__workers_start(cddp__workers_t *ws, int n, int rank_base, char *const *argv, char **const *env,
                                  const char *log_dir, int truncate_logs);

/* Forwards output line by line ("[rank N] " prefix, one write per line) until every
 * worker exited and its pipes closed. sig_fd: the agent's signal pipe (launcher/sigguard.h:
 * SIGCHLD/SIGINT/SIGTERM/SIGHUP, one byte each). event_fd (-1 = none): readable means "stop,
 * something happened elsewhere"; accept(msg) decides whether a message read from it counts (stale ones are dropped).
 * Stopping = SIGTERM to each process group, SIGKILL after grace_ms. Each worker's last
 * stderr line and its arrival time are kept: when several failed, fail_* name the one whose
 * failure came first (cddp__blame_first over those that failed by themselves). */
void cddp__workers_watch(cddp__workers_t *ws, int sig_fd, int event_fd, int (*accept)(const char *msg, void *ctx),
                         void *ctx);

/* Starts a new process in slot i (a worker that exited) with the same rank, log file and
 * prefix; its prev is the dead one's failure record. Call watch again afterwards. */
cddp_result_t cddp__workers_respawn(cddp__workers_t *ws, int i, char *const *argv, char **env);

/* The failure record of worker i (it exited non-zero). */
void cddp__workers_failure(const cddp__workers_t *ws, int i, cddp__failure_t *f);

/* SIGKILL to every worker's process group now (a fence: no grace, no last step); watch reaps. */
void cddp__workers_kill(cddp__workers_t *ws);

/* Frees buffers, closes fds and log files. */
void cddp__workers_release(cddp__workers_t *ws);

/* "exited with code 3" / "was killed by signal 9 (SIGKILL)"; returns the exit code the
 * agent should use (code, or 128+signal). */
int cddp__describe_status(int status, char *buf, size_t size);

#endif /* CDDP_LAUNCHER_WORKERS_H */

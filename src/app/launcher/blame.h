/* blame.h - a record per failed worker, and which failure came first (the rank the agent names). */
#ifndef CDDP_LAUNCHER_BLAME_H
#define CDDP_LAUNCHER_BLAME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A worker that ended non-zero, as its agent saw it. Times are monotonic (common/clock.h). */
typedef struct cddp__failure {
  int rank;
  char host[64];
  pid_t pid;
  int status;          /* its wait status: an exit code or a signal */
  uint64_t exit_ns;    /* when the agent reaped it */
  uint64_t report_ns;  /* when its own error report arrived; 0: none */
  char error[256];     /* the first line of its own error report ("": none). Today the last line
                          it wrote to stderr; an error file (TORCHELASTIC_ERROR_FILE) can say better */
  int hung;            /* the agent's watchdog judged it hung and killed it: its SIGKILL is the
                          verdict, and report_ns when it stopped moving */
} cddp__failure_t;

/* A report counts for the failure's time only when it came at most this long before the exit
 * (an older stderr line is a warning from earlier, not the error). */
#define CDDP__BLAME_REPORT_WINDOW_MS 10000
/* A replacement failing within this long of its start, the same way as the worker it replaced,
 * fails deterministically. */
#define CDDP__BLAME_REPEAT_WINDOW_MS 10000

/* When the failure happened: its report's arrival when the worker wrote its error and then took
 * a while to exit, else its exit. */
uint64_t cddp__failure_time(const cddp__failure_t *f);

/* Whether f failed by itself, given stop_ns, when the agent began stopping the workers (0: it did
 * not): it failed before that, and did not end by the agent's own SIGTERM / SIGKILL (the
 * watchdog's SIGKILL of a hung worker is no stop: the hang is its failure). */
int cddp__failure_own(const cddp__failure_t *f, uint64_t stop_ns);

/* The index of the failure that came first among f[0..n-1] (the earliest cddp__failure_time; a tie
 * goes to the lower rank), -1 when n is 0. This is the rank the agent names. */
int cddp__blame_first(const cddp__failure_t *f, int n);

/* Why retrying would fail the same way, or NULL: the worker exited 2 (a usage error: a bad flag,
 * a bad config, a batch that does not split), or cur is a replacement started at start_ns that
 * failed within CDDP__BLAME_REPEAT_WINDOW_MS the way prev (the worker it replaced) did: the same
 * status (not a signal from outside: KILL, TERM, INT, HUP) and the same error line. prev may be
 * NULL (cur is no replacement). */
const char *cddp__failure_deterministic(const cddp__failure_t *prev, const cddp__failure_t *cur, uint64_t start_ns);

#endif /* CDDP_LAUNCHER_BLAME_H */

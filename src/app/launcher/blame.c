/* blame.c - which of a round's failed workers failed first, and whether a failure would repeat. */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "launcher/blame.h"

#define MS 1000000ull

uint64_t cddp__failure_time(const cddp__failure_t *f) {
  /* the watchdog measured when the hang began: however long its stack took (gdb on a loaded
   * host: seconds), that is the failure's time, not the kill's */
  if (f->hung && f->report_ns && f->report_ns <= f->exit_ns) return f->report_ns;
  if (f->report_ns && f->report_ns <= f->exit_ns && f->exit_ns - f->report_ns <= CDDP__BLAME_REPORT_WINDOW_MS * MS)
    return f->report_ns;
  return f->exit_ns;
}

/* The worker ended by a signal sent from outside it (the agent's stop, an operator, the OOM
 * killer), or exited with the code a shell or a trainer gives for one. */
static int outside_signal(int status) {
  int sig = WIFSIGNALED(status) ? WTERMSIG(status) : WIFEXITED(status) ? WEXITSTATUS(status) - 128 : 0;
  return sig == SIGKILL || sig == SIGTERM || sig == SIGINT || sig == SIGHUP;
}

int cddp__failure_own(const cddp__failure_t *f, uint64_t stop_ns) {
  if (!stop_ns || f->exit_ns < stop_ns) return 1; /* it ended before anyone told it to */
  /* the watchdog's kill often lands after a peer's lost-connection exit began the stop */
  return cddp__failure_time(f) < stop_ns && (f->hung || !outside_signal(f->status));
}

int cddp__blame_first(const cddp__failure_t *f, int n) {
  int best = -1;
  for (int i = 0; i < n; i++) {
    if (best < 0) {
      best = i;
      continue;
    }
    uint64_t t = cddp__failure_time(&f[i]), tb = cddp__failure_time(&f[best]);
    if (t < tb || (t == tb && f[i].rank < f[best].rank)) best = i;
  }
  return best;
}

const char *cddp__failure_deterministic(const cddp__failure_t *prev, const cddp__failure_t *cur, uint64_t start_ns) {
  if (WIFEXITED(cur->status) && WEXITSTATUS(cur->status) == 2) return "a usage error";
  if (prev && prev->status == cur->status && !outside_signal(cur->status) && !strcmp(prev->error, cur->error) &&
      cur->exit_ns >= start_ns && cur->exit_ns - start_ns <= CDDP__BLAME_REPEAT_WINDOW_MS * MS)
    return "the same failure again, at once";
  return NULL;
}

/* test_run_blame.c - which failed worker the agent names (the first to fail, not the first
 * reaped) and which failures it does not retry (usage errors, a failure repeating at once). */
#include <signal.h>
#include <string.h>

#include "launcher/blame.h"
#include "test.h"

#define S(x) ((uint64_t)(x) * 1000000000ull) /* seconds -> ns */
#define MS(x) ((uint64_t)(x) * 1000000ull)
#define EXITED(code) ((code) << 8)
#define KILLED(sig) (sig)

static cddp__failure_t failure(int rank, int status, uint64_t exit_ns, uint64_t report_ns, const char *error) {
  cddp__failure_t f = {.rank = rank, .pid = 100 + rank, .status = status, .exit_ns = exit_ns, .report_ns = report_ns};
  snprintf(f.host, sizeof f.host, "vm");
  snprintf(f.error, sizeof f.error, "%s", error);
  return f;
}

/* rank 0 writes its error and takes 0.5 s to exit; rank 1 fails 0.1 s after rank 0's error and
 * exits at once, so it is reaped first: rank 0 is named */
TEST(the_first_report_wins_over_the_first_exit) {
  cddp__failure_t f[2] = {failure(1, EXITED(2), S(100) + MS(100), S(100) + MS(100), "rank 0 could not load the checkpoint"),
                          failure(0, EXITED(2), S(100) + MS(500), S(100), "checkpoint /x is corrupt")};
  CHECK_EQ(cddp__failure_time(&f[1]), S(100));
  CHECK_EQ(cddp__blame_first(f, 2), 1);
  /* rank 0 failed by itself: its report came before the agent stopped the workers (at rank 1's
   * exit), even though it exited after that */
  CHECK(cddp__failure_own(&f[1], S(100) + MS(100)));
}

/* without reports, the exit times decide; a tie goes to the lower rank */
TEST(exit_times_decide_without_reports) {
  cddp__failure_t f[3] = {failure(2, EXITED(1), S(7), 0, ""), failure(1, KILLED(SIGSEGV), S(5), 0, ""),
                          failure(0, EXITED(1), S(5), 0, "")};
  CHECK_EQ(cddp__blame_first(f, 3), 2);
  CHECK_EQ(cddp__blame_first(f, 1), 0);
  CHECK_EQ(cddp__blame_first(f, 0), -1);
}

/* a stderr line long before the exit is a warning from earlier, not the failure's report */
TEST(an_old_report_is_not_the_failure_time) {
  cddp__failure_t old = failure(0, EXITED(1), S(100), S(1), "warning: slow disk");
  CHECK_EQ(cddp__failure_time(&old), S(100));
  cddp__failure_t f[2] = {failure(1, KILLED(SIGKILL), S(99) + MS(900), 0, ""), old};
  CHECK_EQ(cddp__blame_first(f, 2), 0);
}

/* a worker the agent stopped (SIGTERM / SIGKILL, or 143 from a trainer that caught it) did not
 * fail by itself; one that ended before the stop did, whatever its status */
TEST(stopped_workers_are_not_blamed) {
  uint64_t stop = S(10);
  cddp__failure_t termed = failure(0, KILLED(SIGTERM), S(11), 0, "");
  cddp__failure_t caught = failure(0, EXITED(143), S(11), S(9) + MS(900), "warning");
  cddp__failure_t before = failure(1, KILLED(SIGKILL), S(9), 0, "");
  cddp__failure_t late = failure(2, EXITED(1), S(11), S(10) + MS(500), "peer lost");
  CHECK(!cddp__failure_own(&termed, stop));
  CHECK(!cddp__failure_own(&caught, stop));
  CHECK(cddp__failure_own(&before, stop));
  CHECK(!cddp__failure_own(&late, stop));
  CHECK(cddp__failure_own(&late, 0));
}

/* the watchdog killed rank 1 (hung since 4 s) and rank 0's lost-connection exit at 10 s began
 * the stop before rank 1 was reaped: the watchdog's SIGKILL is its verdict, rank 1 is named */
TEST(a_worker_the_watchdog_killed_is_blamed) {
  uint64_t stop = S(10) + MS(1); /* taken just after rank 0 was reaped */
  cddp__failure_t f[2] = {failure(0, EXITED(1), S(10), S(10), "peer closed the connection"),
                          failure(1, KILLED(SIGKILL), S(10) + MS(50), S(4), "hung: no progress for 5.0 s")};
  f[1].hung = 1;
  CHECK(cddp__failure_own(&f[0], stop));
  CHECK(cddp__failure_own(&f[1], stop));
  CHECK_EQ(cddp__blame_first(f, 2), 1);
  f[1].hung = 0; /* the same SIGKILL from outside is a stop */
  CHECK(!cddp__failure_own(&f[1], stop));
}

/* the same, but the stack took 12 s (gdb on a loaded host): the hang began more than the report
 * window before the kill. Rank 1 is still named (it was rank 0, not blamed at all, 7 times in
 * 120 trials of test_hang_blame at load 25-127) */
TEST(a_hung_worker_whose_stack_took_long_is_blamed) {
  uint64_t stop = S(16) + MS(1);
  cddp__failure_t f[2] = {failure(0, EXITED(1), S(16), S(16), "peer closed the connection"),
                          failure(1, KILLED(SIGKILL), S(16) + MS(50), S(2), "hung: no progress for 2.0 s")};
  f[1].hung = 1;
  CHECK_EQ(cddp__failure_time(&f[1]), S(2));
  CHECK(cddp__failure_own(&f[1], stop));
  CHECK_EQ(cddp__blame_first(f, 2), 1);
}

TEST(deterministic_failures_are_not_retried) {
  uint64_t start = S(50);
  cddp__failure_t usage = failure(1, EXITED(2), S(50) + MS(20), S(50) + MS(10), "cddp train: batch does not split");
  CHECK(cddp__failure_deterministic(NULL, &usage, start) != NULL);
  CHECK(strstr(cddp__failure_deterministic(NULL, &usage, start), "usage") != NULL);
  cddp__failure_t prev = failure(1, EXITED(1), S(40), S(40), "out of memory");
  cddp__failure_t again = failure(1, EXITED(1), S(51), S(51), "out of memory");
  CHECK(cddp__failure_deterministic(&prev, &again, start) != NULL);
  CHECK(cddp__failure_deterministic(NULL, &again, start) == NULL);        /* not a replacement */
  cddp__failure_t later = failure(1, EXITED(1), S(90), S(90), "out of memory");
  CHECK(cddp__failure_deterministic(&prev, &later, start) == NULL);       /* it ran a while */
  cddp__failure_t other = failure(1, EXITED(1), S(51), S(51), "disk full");
  CHECK(cddp__failure_deterministic(&prev, &other, start) == NULL);       /* another cause */
  cddp__failure_t k1 = failure(1, KILLED(SIGKILL), S(40), 0, ""), k2 = failure(1, KILLED(SIGKILL), S(50) + MS(5), 0, "");
  CHECK(cddp__failure_deterministic(&k1, &k2, start) == NULL);            /* killed from outside */
  cddp__failure_t s1 = failure(1, KILLED(SIGSEGV), S(40), 0, ""), s2 = failure(1, KILLED(SIGSEGV), S(50) + MS(5), 0, "");
  CHECK(cddp__failure_deterministic(&s1, &s2, start) != NULL);
}

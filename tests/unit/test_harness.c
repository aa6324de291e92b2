/* test_harness.c - the harness itself (tests/test_main.c): a skip is reported as a skip with
 * its reason, never as a pass; a failure and a crash are failures. The fixtures below run only
 * when this program starts itself again with CDDP_TEST_FIXTURES=1. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "test.h"

TEST_FIXTURE(fixture_passes) { CHECK(1); }
TEST_FIXTURE(fixture_skips) {
  CDDP_TEST_SKIP("[cpu:fixture_flag] a reason on %s\nline", "one");
  TEST_FAIL("a skip came back");
}
TEST_FIXTURE(fixture_skips_with_no_reason) { CDDP_TEST_SKIP("%s", ""); }
TEST_FIXTURE(fixture_fails) { CHECK_EQ(1, 2); }
TEST_FIXTURE(fixture_crashes) { raise(SIGSEGV); }

/* The fixtures' TAP lines and the harness's exit status. */
static char *run_fixtures(int *status) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    if (!freopen("/dev/null", "w", stderr)) _exit(126); /* the fixtures' failures are expected */
    close(fds[0]), close(fds[1]);
    setenv("CDDP_TEST_FIXTURES", "1", 1);
    execl("/proc/self/exe", "test_harness", "fixture_", (char *)NULL);
    _exit(126);
  }
  close(fds[1]);
  static char out[8192];
  size_t n = 0;
  ssize_t r;
  while (n < sizeof out - 1 && (r = read(fds[0], out + n, sizeof out - 1 - n)) > 0) n += (size_t)r;
  out[n] = 0;
  close(fds[0]);
  CHECK(waitpid(pid, status, 0) == pid);
  return out;
}

static void expect_line(const char *out, const char *line) {
  if (!strstr(out, line)) TEST_FAIL("no line '%s' in:\n%s", line, out);
}

TEST(a_skip_is_reported_as_a_skip_never_as_a_pass) {
  int status;
  char *out = run_fixtures(&status);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1); /* two failed */
  expect_line(out, "ok 1 - test_harness:fixture_passes (");
  /* the reason on one line, the directive after the description as TAP has it */
  expect_line(out, "ok 2 - test_harness:fixture_skips (");
  expect_line(out, " ms) # SKIP [cpu:fixture_flag] a reason on one line\n");
  expect_line(out, " # SKIP (no reason given)\n");
  expect_line(out, "not ok 4 - test_harness:fixture_fails (exit 1)\n");
  expect_line(out, "not ok 5 - test_harness:fixture_crashes (signal 11)\n");
  /* exactly one plain pass: the skips carry their directive */
  int plain = 0;
  for (char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
    if (strncmp(l, "ok ", 3) == 0) {
      const char *end = strchr(l, '\n');
      const char *skip = strstr(l, " # SKIP ");
      plain += !skip || (end && skip > end);
    }
  CHECK_EQ(plain, 1);
}

TEST(fixtures_stay_out_of_an_ordinary_run) {
  CHECK(getenv("CDDP_TEST_FIXTURES") == NULL || strcmp(getenv("CDDP_TEST_FIXTURES"), "1") != 0);
}

static int stopped(void *pid) { return cddp_test_proc_state(*(pid_t *)pid) == 'T'; }
static int never(void *arg) { return (void)arg, 0; }
static int second_call(void *arg) { return ++*(int *)arg >= 2; }

TEST(wait_for_polls_until_the_event_or_the_scaled_time) {
  int calls = 0;
  CHECK(cddp_test_wait_for(second_call, &calls, 5) == 1);
  CHECK_EQ(calls, 2);
  setenv("CDDP_TEST_SCALE", "2", 1);
  uint64_t t0 = cddp__now_ns();
  CHECK(cddp_test_wait_for(never, NULL, 0.05) == 0);
  CHECK(cddp__now_ns() - t0 >= 100000000ull); /* 0.05 s scaled by 2 */
  CHECK_EQ(cddp_test_proc_state(getpid()), 'R');
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  kill(child, SIGSTOP);
  CHECK(cddp_test_wait_for(stopped, &child, 10));
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  CHECK_EQ(cddp_test_proc_state(-1), 0);
}

TEST(the_scale_is_one_factor_from_the_environment) {
  unsetenv("CDDP_TEST_SCALE");
  CHECK(cddp_test_scale() == 1);
  setenv("CDDP_TEST_SCALE", "4", 1);
  CHECK(cddp_test_scale() == 4);
  setenv("CDDP_TEST_SCALE", "-2", 1);
  CHECK(cddp_test_scale() == 1);
  setenv("CDDP_TEST_SCALE", "x", 1);
  CHECK(cddp_test_scale() == 1);
}

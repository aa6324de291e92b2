/* test.h - a tiny libuv-style runner: each TEST runs in its own forked process with a timeout. */
#ifndef CDDP_TEST_H
#define CDDP_TEST_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cddp/cddp.h"

typedef void (*cddp_test_fn)(void);
void cddp_test_register(const char *name, cddp_test_fn fn, int timeout_s, int fixture);

#define CDDP_TEST_DEFINE(name, secs, fixture)                                         \
  static void name(void);                                                            \
  __attribute__((constructor)) static void register_##name(void) {                  \
    cddp_test_register(#name, name, secs, fixture);                                  \
  }                                                                                  \
  static void name(void)
#define TEST_TIMEOUT(name, secs) CDDP_TEST_DEFINE(name, secs, 0)
#define TEST(name) TEST_TIMEOUT(name, 60)
/* A test of the harness itself: run only when CDDP_TEST_FIXTURES=1 (test_harness.c runs them). */
#define TEST_FIXTURE(name) CDDP_TEST_DEFINE(name, 10, 1)

/* Ends the test as skipped, never passed: "ok N - name # SKIP why" (exit 77, as libuv's
 * RETURN_SKIP). A skip for missing hardware starts its reason with a tag that tests/run.sh
 * checks against the host on its own: "[cpu:FLAG]" (a /proc/cpuinfo flag) or "[gpu]". With
 * CI=true only such a confirmed skip is accepted; any other skip is a failure (docs: README). */
#define CDDP_TEST_SKIP_EXIT 77
void cddp_test_skip(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
#define CDDP_TEST_SKIP(...) cddp_test_skip(__VA_ARGS__)

/* Writes to out "<this test's own folder>/<name>": a new private folder (0700, mkdtemp under
 * $TMPDIR, else /tmp) made before each test and removed with all it holds once the test has
 * ended, however it ended; so no test file has a name another user could guess and plant first.
 * Fails the test when the path does not fit in size. */
void cddp_test_path(char *out, size_t size, const char *name);

/* The one factor every time bound of the tests is scaled by: CDDP_TEST_SCALE (4 under the
 * sanitizers in tests/run.sh; raise it on a loaded host), 1 when unset or not a positive number. */
double cddp_test_scale(void);

/* Polls cond(arg) every 2 ms until it holds (returns 1) or secs, scaled by cddp_test_scale(),
 * have passed (returns 0): waiting for the event itself instead of sleeping a guess. */
int cddp_test_wait_for(int (*cond)(void *arg), void *arg, double secs);

/* The state letter of process pid in /proc/PID/stat ('R', 'S', 'T' when stopped...), 0 if none. */
char cddp_test_proc_state(int pid);

#define TEST_FAIL(...)                                                               \
  do {                                                                               \
    fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                  \
    fprintf(stderr, __VA_ARGS__);                                                    \
    fprintf(stderr, "\n");                                                           \
    exit(1);                                                                         \
  } while (0)

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) TEST_FAIL("CHECK(%s) failed", #cond);                               \
  } while (0)

#define CHECK_EQ(a, b)                                                               \
  do {                                                                               \
    long long cddp_t_a = (long long)(a), cddp_t_b = (long long)(b);                  \
    if (cddp_t_a != cddp_t_b)                                                        \
      TEST_FAIL("CHECK_EQ(%s, %s): %lld != %lld", #a, #b, cddp_t_a, cddp_t_b);       \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                        \
  do {                                                                               \
    double cddp_t_a = (double)(a), cddp_t_b = (double)(b);                           \
    if (!(fabs(cddp_t_a - cddp_t_b) <= (tol)))                                       \
      TEST_FAIL("CHECK_NEAR(%s, %s): %.9g vs %.9g (diff %.3g > %.3g)", #a, #b,       \
                cddp_t_a, cddp_t_b, fabs(cddp_t_a - cddp_t_b), (double)(tol));       \
  } while (0)

#define CHECK_RESULT(call, expected)                                                 \
  do {                                                                               \
    cddp_result_t cddp_t_r = (call);                                                 \
    if (cddp_t_r != (expected))                                                      \
      TEST_FAIL("%s returned %s, expected %s (last error: %s)", #call,               \
                cddp_result_name(cddp_t_r), cddp_result_name(expected),              \
                cddp_last_error());                                                  \
  } while (0)
#define CHECK_OK(call) CHECK_RESULT(call, CDDP_OK)

/* Forks n processes running fn(rank, n, arg) and waits for all of them, at most
 * timeout_s, scaled by cddp_test_scale() (then kills the rest). Returns how many failed (non-zero exit or signal). */
int cddp_test_fork_ranks(int n, void (*fn)(int rank, int world, void *arg), void *arg,
                         int timeout_s);

/* A store server in a process of its own (forking ranks from a process whose server thread may
 * hold the allocator lock at that instant left a rank deadlocked in malloc under ASan/TSan).
 * Returns its pid (SIGKILL it when done); its port in *port. */
int cddp_test_store_process(int *port);

/* A free TCP port on 127.0.0.1 (bound then released). */
int cddp_test_free_port(void);

/* A store server on 127.0.0.1 in a child process of its own, so the process that forks ranks
 * runs no server thread (forking while it holds a lock, the sanitizers' allocator's for one,
 * could hang a rank). Returns its port; cddp_test_store_child_stop ends it and returns 1 when
 * it exited cleanly. */
typedef struct {
  int pid, keep_fd, port;
} cddp_test_store_child_t;
int cddp_test_store_child_start(cddp_test_store_child_t *c);
int cddp_test_store_child_stop(cddp_test_store_child_t *c);

#endif /* CDDP_TEST_H */

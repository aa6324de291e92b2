/* test_run_probe.c - the watchdog's rule for workers without a flight page (launcher/hang_probe.c)
 * on real processes, with a stand-in py-spy that prints a stack chosen per pid: the rank idle in
 * its own code while a peer waits in all_reduce is named; ranks still starting (a peer in the
 * group's set-up, or itself importing) and a rank that wants the CPU (starved) are not; a stopped
 * rank is named whatever its stack. Times are the test's own clock, so a starved rank is simulated:
 * its CPU share over the window is nil, but it is runnable. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/io.h"
#include "launcher/hang_probe.h"
#include "test.h"

#define S 1000000000ull

static const char *WAIT_ALL_REDUCE =
    "Thread 1 (idle): \"MainThread\"\n"
    "    all_reduce (/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:1541)\n"
    "    main (/w/hang.py:31)\n";
static const char *WAIT_SETUP =
    "Thread 1 (idle): \"MainThread\"\n"
    "    _new_process_group_helper (/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:900)\n"
    "    init_process_group (/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:760)\n"
    "    main (/w/hang.py:26)\n";
static const char *SLEEPING =
    "Thread 1 (idle): \"MainThread\"\n"
    "    sleepy_data_loader (/w/hang.py:13)\n"
    "    main (/w/hang.py:30)\n";
static const char *IMPORTING =
    "Thread 1 (idle): \"MainThread\"\n"
    "    <module> (/usr/lib/python3/dist-packages/torch/__init__.py:229)\n"
    "    _find_and_load (<frozen importlib._bootstrap>:1178)\n"
    "    <module> (/w/hang.py:7)\n";

static char dir[] = "/tmp/cddp-probe-XXXXXX";

static int state_is(void *arg) {
  const int *pc = arg;
  return cddp_test_proc_state(pc[0]) == pc[1];
}

/* The stack the stand-in py-spy prints for pid. */
static void put_stack(pid_t pid, const char *stack) {
  char path[128];
  snprintf(path, sizeof path, "%s/%d.txt", dir, (int)pid);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  fputs(stack, f);
  fclose(f);
}

/* A child that sleeps (spin 0) or spins (1), and the stack the stand-in py-spy prints for it. */
static pid_t child(int spin, const char *stack) {
  pid_t p = fork();
  CHECK(p >= 0);
  if (p == 0) {
    for (volatile unsigned long x = 0;; x++)
      if (!spin) pause();
  }
  put_stack(p, stack);
  int want[2] = {p, spin ? 'R' : 'S'};
  CHECK(cddp_test_wait_for(state_is, want, 10));
  return p;
}

static void remove_dir(void) {
  pid_t p = fork();
  if (p == 0) execlp("rm", "rm", "-rf", dir, (char *)NULL), _exit(127);
  if (p > 0) waitpid(p, NULL, 0);
}

static void spy(void) {
  CHECK(mkdtemp(dir) != NULL);
  char path[128];
  snprintf(path, sizeof path, "%s/spy", dir);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  fprintf(f, "#!/bin/sh\nfor a; do p=$a; done\nexec cat \"%s/$p.txt\"\n", dir);
  fclose(f);
  CHECK_EQ(chmod(path, 0700), 0);
  CHECK_EQ(setenv("CDDP_PY_SPY", path, 1), 0);
}

/* Two ranks: rank 0 as s0, rank 1 as s1 (spinning when spin1); probed at 1 s, 4 s and 7 s of a
 * 5 s timeout, then at 60 s. Returns the index named at 7 s, or at 60 s when none was at 7 s. */
static int judge(const char *s0, const char *s1, int spin1, int stop1, char *why, size_t size) {
  cddp__probe_t p[2];
  memset(p, 0, sizeof p);
  p[0].pid = child(0, s0), p[1].pid = child(spin1, s1), p[1].rank = 1;
  if (stop1) {
    kill(p[1].pid, SIGSTOP);
    int want[2] = {p[1].pid, 'T'};
    CHECK(cddp_test_wait_for(state_is, want, 10));
  }
  CHECK_EQ(cddp__probe_find(p, 2, 1 * S, 5000, 0, dir, why, size), -1);
  CHECK_EQ(cddp__probe_find(p, 2, 4 * S, 5000, 0, dir, why, size), -1); /* stacks taken, no verdict yet */
  CHECK(p[0].have_where && p[0].stack_ns == 4 * S);
  int h = cddp__probe_find(p, 2, 7 * S, 5000, 0, dir, why, size);
  if (h < 0) h = cddp__probe_find(p, 2, 60 * S, 5000, 0, dir, why, size);
  for (int i = 0; i < 2; i++) kill(p[i].pid, SIGKILL), waitpid(p[i].pid, NULL, 0);
  return h;
}

TEST(probe_sleeper_named_while_a_peer_waits) {
  char why[320];
  spy();
  CHECK_EQ(judge(WAIT_ALL_REDUCE, SLEEPING, 0, 0, why, sizeof why), 1);
  if (!strstr(why, "no progress for 6.0 s while ranks 0 wait in all_reduce; in sleepy_data_loader (hang.py:13)"))
    TEST_FAIL("why: %s", why);
  remove_dir();
}

TEST(probe_starting_ranks_not_judged) {
  char why[320] = "";
  spy();
  CHECK_EQ(judge(WAIT_SETUP, SLEEPING, 0, 0, why, sizeof why), -1); /* rank 0 forms the group: 1 starts */
  CHECK_EQ(judge(WAIT_ALL_REDUCE, IMPORTING, 0, 0, why, sizeof why), -1);
  if (why[0]) TEST_FAIL("why: %s", why);
  remove_dir();
}

TEST(probe_starved_rank_not_judged) {
  char why[320] = "";
  spy();
  CHECK_EQ(judge(WAIT_ALL_REDUCE, SLEEPING, 1, 0, why, sizeof why), -1); /* runnable: it wants the CPU */
  if (why[0]) TEST_FAIL("why: %s", why);
  remove_dir();
}

TEST(probe_stopped_rank_named) {
  char why[320];
  spy();
  CHECK_EQ(judge(WAIT_SETUP, IMPORTING, 0, 1, why, sizeof why), 1);
  if (!strstr(why, "hung: stopped (SIGSTOP or a debugger), no progress for 6.0 s; in <module> (hang.py:7)"))
    TEST_FAIL("why: %s", why);
  remove_dir();
}

/* a worker names itself "x) T 1 2 3" (prctl PR_SET_NAME): the state and times are read after the
 * last ')', never from the name; a line without them is refused */
TEST(probe_stat_name_is_hostile) {
  uint64_t ticks = 0;
  char state = 0;
  CHECK_EQ(cddp__proc_stat_parse("42 (x) T 1 2 3) S 1 42 42 0 -1 4194560 9 0 0 0 1234 56 0 0 20 0 3 0\n", &ticks, &state), 0);
  CHECK_EQ(state, 'S');
  CHECK_EQ(ticks, 1290);
  CHECK_EQ(cddp__proc_stat_parse("42 (x) S 1 2", &ticks, &state), -1);
  CHECK_EQ(cddp__proc_stat_parse("no name at all", &ticks, &state), -1);
}

static void *sleep_forever(void *arg) {
  for (;;) pause();
  return arg;
}
static int any_thread_stopped(void *pid) { return cddp__proc_stopped(*(pid_t *)pid); }

/* a stopped rank whose first thread shows no T (it left by pthread_exit and shows Z; one in a long
 * system call shows D) is named stopped, not idle in its own code */
TEST(probe_stopped_rank_whose_leader_shows_no_T) {
  char why[320];
  spy();
  cddp__probe_t p[2];
  memset(p, 0, sizeof p);
  p[0].pid = child(0, WAIT_ALL_REDUCE);
  pid_t c = fork();
  CHECK(c >= 0);
  if (c == 0) {
    pthread_t t;
    if (pthread_create(&t, NULL, sleep_forever, NULL) != 0) _exit(1);
    pthread_exit(NULL); /* the process lives on in t */
  }
  put_stack(c, SLEEPING);
  int zombie[2] = {c, 'Z'};
  CHECK(cddp_test_wait_for(state_is, zombie, 10));
  kill(c, SIGSTOP);
  CHECK(cddp_test_wait_for(any_thread_stopped, &c, 10));
  p[1].pid = c, p[1].rank = 1;
  CHECK_EQ(cddp__probe_find(p, 2, 1 * S, 5000, 0, dir, why, sizeof why), -1);
  cddp__probe_find(p, 2, 4 * S, 5000, 0, dir, why, sizeof why);
  int h = cddp__probe_find(p, 2, 7 * S, 5000, 0, dir, why, sizeof why);
  for (int i = 0; i < 2; i++) kill(p[i].pid, SIGKILL), waitpid(p[i].pid, NULL, 0);
  CHECK_EQ(h, 1);
  if (!strstr(why, "hung: stopped (SIGSTOP or a debugger)")) TEST_FAIL("why: %s", why);
  remove_dir();
}

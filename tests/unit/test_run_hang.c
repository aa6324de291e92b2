/* test_run_hang.c - the watchdog's rule on synthetic flight pages: a stopped worker, a worker
 * outside any collective while a peer waits inside one, and the cases that are not hangs. */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/flight.h"
#include "common/io.h"
#include "launcher/hang.h"
#include "test.h"

#define S 1000000000ull

static cddp__flight_page_t pages[2];

static void setup(cddp__progress_t *p, uint64_t seq0, uint64_t done0, uint64_t seq1, uint64_t done1) {
  memset(pages, 0, sizeof pages);
  memset(p, 0, 2 * sizeof *p);
  for (int i = 0; i < 2; i++) pages[i].magic = CDDP__FLIGHT_MAGIC, p[i].page = &pages[i];
  pages[0].seq = seq0, pages[0].done = done0, pages[1].seq = seq1, pages[1].done = done1;
  for (uint64_t s = 1; s <= 8; s++) {
    pages[0].ring[s - 1] = (cddp__flight_rec_t){.seq = s, .count = 4096, .kind = 0, .dt = 0, .op = 0};
    pages[1].ring[s - 1] = pages[0].ring[s - 1];
  }
}

TEST(hang_outside_a_collective_while_a_peer_waits) {
  cddp__progress_t p[2];
  pid_t pid[2] = {getpid(), getpid()};
  char why[320];
  setup(p, 5, 5, 6, 5);
  CHECK_EQ(cddp__hang_find(p, pid, 2, 1 * S, 5000, 0, why, sizeof why), -1); /* first look: pages just read */
  CHECK_EQ(cddp__hang_find(p, pid, 2, 4 * S, 5000, 0, why, sizeof why), -1); /* 4 s: not yet */
  CHECK_EQ(cddp__hang_find(p, pid, 2, 7 * S, 5000, 0, why, sizeof why), 0);
  if (!strstr(why, "no progress for 6.0 s since allreduce #5") || !strstr(why, "outside any collective"))
    TEST_FAIL("why: %s", why);
  /* its page moves: not hung any more */
  pages[0].beat++;
  CHECK_EQ(cddp__hang_find(p, pid, 2, 8 * S, 5000, 0, why, sizeof why), -1);
}

TEST(hang_not_when_all_wait_or_all_work) {
  cddp__progress_t p[2];
  pid_t pid[2] = {getpid(), getpid()};
  char why[320];
  setup(p, 6, 5, 6, 5); /* both inside, both stalled: a peer elsewhere, not ours to name */
  CHECK_EQ(cddp__hang_find(p, pid, 2, 0, 5000, 0, why, sizeof why), -1);
  CHECK_EQ(cddp__hang_find(p, pid, 2, 60 * S, 5000, 0, why, sizeof why), -1);
  setup(p, 5, 5, 5, 5); /* both outside (computing, an eval): nobody waits */
  CHECK_EQ(cddp__hang_find(p, pid, 2, 0, 5000, 0, why, sizeof why), -1);
  CHECK_EQ(cddp__hang_find(p, pid, 2, 60 * S, 5000, 0, why, sizeof why), -1);
  setup(p, 5, 5, 6, 5); /* the peer that waits has exited: nobody waits */
  pid[1] = 0;
  CHECK_EQ(cddp__hang_find(p, pid, 2, 0, 5000, 0, why, sizeof why), -1);
  CHECK_EQ(cddp__hang_find(p, pid, 2, 60 * S, 5000, 0, why, sizeof why), -1);
  setup(p, 5, 5, 6, 5); /* a program without libcddp's collectives (no magic) is never judged */
  pages[0].magic = 0;
  pid[1] = getpid();
  CHECK_EQ(cddp__hang_find(p, pid, 2, 0, 5000, 0, why, sizeof why), -1);
  CHECK_EQ(cddp__hang_find(p, pid, 2, 60 * S, 5000, 0, why, sizeof why), -1);
}

static int child_is_stopped(void *pid) { return cddp_test_proc_state(*(pid_t *)pid) == 'T'; }

TEST(hang_stopped_worker_inside_a_collective) {
  cddp__progress_t p[2];
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  kill(child, SIGSTOP);
  CHECK(cddp_test_wait_for(child_is_stopped, &child, 10)); /* the kernel shows it: 'T' */
  pid_t pid[2] = {getpid(), child};
  char why[320];
  setup(p, 6, 5, 6, 5); /* both inside the same collective; worker 1 is stopped */
  CHECK_EQ(cddp__hang_find(p, pid, 2, 0, 5000, 0, why, sizeof why), -1);
  int h = cddp__hang_find(p, pid, 2, 6 * S, 5000, 0, why, sizeof why);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  CHECK_EQ(h, 1);
  if (!strstr(why, "inside allreduce #6 (4096 f32, sum)") || !strstr(why, "stopped")) TEST_FAIL("why: %s", why);
}

static void *sleep_forever(void *arg) {
  for (;;) pause();
  return arg;
}

static int leader_gone(void *pid) { return cddp_test_proc_state(*(pid_t *)pid) == 'Z'; }
static int any_thread_stopped(void *pid) { return cddp__proc_stopped(*(pid_t *)pid); }

/* A stopped worker whose first thread does not show 'T' (here its leader left by pthread_exit and
 * shows 'Z'; on a loaded host, one inside a long system call shows 'D' until it returns) is
 * still named stopped: its peers' wait is not its own story (CI saw "outside any collective") */
TEST(hang_stopped_worker_whose_leader_shows_no_T) {
  cddp__progress_t p[2];
  pid_t child = fork();
  if (child == 0) {
    pthread_t t;
    if (pthread_create(&t, NULL, sleep_forever, NULL) != 0) _exit(1);
    pthread_exit(NULL); /* the process lives on in t */
  }
  CHECK(cddp_test_wait_for(leader_gone, &child, 10));
  kill(child, SIGSTOP);
  CHECK(cddp_test_wait_for(any_thread_stopped, &child, 10));
  char leader = cddp_test_proc_state(child);
  pid_t pid[2] = {getpid(), child};
  char why[320];
  setup(p, 7, 6, 6, 6); /* worker 1 is outside any collective, worker 0 waits inside one */
  CHECK_EQ(cddp__hang_find(p, pid, 2, 0, 5000, 0, why, sizeof why), -1);
  int h = cddp__hang_find(p, pid, 2, 6 * S, 5000, 0, why, sizeof why);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  CHECK(leader != 'T');
  CHECK_EQ(h, 1);
  if (!strstr(why, "stopped (SIGSTOP or a debugger)")) TEST_FAIL("why: %s", why);
  CHECK_EQ(cddp__proc_stopped(getpid()), 0);
}

TEST(flight_records_start_and_end) {
  uint64_t s = cddp__flight_start(0, 0, 0, 0, 123, 0, 2, 0, 7);
  const cddp__flight_page_t *pg = cddp__flight_page();
  CHECK(pg != NULL && pg->magic == CDDP__FLIGHT_MAGIC);
  CHECK_EQ(pg->seq, s);
  CHECK(pg->done < s);
  cddp__flight_end(s, 1);
  CHECK_EQ(pg->done, s);
  CHECK_EQ(pg->ring[(s - 1) % CDDP__FLIGHT_RING].count, 123);
  CHECK_EQ(pg->ring[(s - 1) % CDDP__FLIGHT_RING].state, CDDP__FLIGHT_DONE);
  char path[4200];
  cddp_test_path(path, sizeof path, "flight.json");
  CHECK_EQ(cddp__flight_dump(pg, 0, path, pg->ring[0].t_start), 0);
  FILE *f = fopen(path, "r");
  char buf[2048] = "";
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = '\0';
  unlink(path);
  if (!strstr(buf, "\"op\": \"allreduce\"") || !strstr(buf, "\"count\": 123") || !strstr(buf, "\"state\": \"done\"") ||
      !strstr(buf, "\"cseq\": 7"))
    TEST_FAIL("dump: %s", buf);
}

/* alone on its node (no local peer): outside any collective while a rank of another node has
 * waited inside one for the timeout (the nodes' status records say since when) */
TEST(hang_alone_while_another_node_waits) {
  cddp__progress_t p[2];
  pid_t pid[2] = {getpid(), 0}; /* one worker on this node */
  char why[320];
  setup(p, 5, 5, 5, 5);
  CHECK_EQ(cddp__hang_find(p, pid, 2, 1 * S, 5000, 0, why, sizeof why), -1);
  CHECK_EQ(cddp__hang_find(p, pid, 2, 9 * S, 5000, 0, why, sizeof why), -1); /* nobody waits: computing */
  CHECK_EQ(cddp__hang_find(p, pid, 2, 9 * S, 5000, 6 * S, why, sizeof why), -1); /* a wait of 3 s: not yet */
  CHECK_EQ(cddp__hang_find(p, pid, 2, 9 * S, 5000, 3 * S, why, sizeof why), 0);
  if (!strstr(why, "no progress for 8.0 s since allreduce #5") || !strstr(why, "ranks on other nodes wait"))
    TEST_FAIL("why: %s", why);
  pages[0].seq = 6; /* it went into the next collective: not idle, not hung */
  CHECK_EQ(cddp__hang_find(p, pid, 2, 10 * S, 5000, 3 * S, why, sizeof why), -1);
}

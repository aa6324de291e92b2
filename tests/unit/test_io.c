/* test_io.c - write_all / read_all and their socket forms: whole buffers, end of file, EINTR
 * retried, errors reported. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/io.h"
#include "test.h"

static void on_alarm(int sig) { (void)sig; }

/* read_all waits through a signal (EINTR) and stops at end of file with what it got. */
TEST(read_all_retries_eintr_and_stops_at_end_of_file) {
  int p[2];
  CHECK(pipe(p) == 0);
  struct sigaction sa = {.sa_handler = on_alarm}; /* no SA_RESTART: read returns EINTR */
  sigaction(SIGALRM, &sa, NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    usleep(200000);
    if (cddp__write_all(p[1], "hello", 5) != 0) _exit(1);
    _exit(0);
  }
  close(p[1]);
  struct itimerval it = {.it_value = {.tv_usec = 50000}};
  setitimer(ITIMER_REAL, &it, NULL);
  char buf[16];
  ssize_t n = cddp__read_all(p[0], buf, sizeof buf);
  CHECK_EQ(n, 5);
  CHECK(memcmp(buf, "hello", 5) == 0);
  CHECK_EQ(cddp__read_all(p[0], buf, sizeof buf), 0);
  close(p[0]);
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

TEST(write_all_reports_a_closed_pipe) {
  int p[2];
  CHECK(pipe(p) == 0);
  signal(SIGPIPE, SIG_IGN);
  close(p[0]);
  CHECK_EQ(cddp__write_all(p[1], "x", 1), -1);
  CHECK_EQ(errno, EPIPE);
  close(p[1]);
}

/* The temporary folders' home: $TMPDIR only when it is a folder this process can write into; a
 * missing one, a file, or an empty value falls back to /tmp (the watchdog's pages live there). */
TEST(tmp_base_takes_a_usable_tmpdir_else_tmp) {
  char dir[] = "/tmp/cddp-test-tmpbase.XXXXXX", missing[64], file[64];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(missing, sizeof missing, "%s/nope", dir);
  snprintf(file, sizeof file, "%s/file", dir);
  FILE *f = fopen(file, "w");
  CHECK(f != NULL);
  fclose(f);
  const char *saved = getenv("TMPDIR");
  char *keep = saved ? strdup(saved) : NULL;
  setenv("TMPDIR", dir, 1);
  CHECK(strcmp(cddp__tmp_base(), dir) == 0);
  setenv("TMPDIR", missing, 1);
  CHECK(strcmp(cddp__tmp_base(), "/tmp") == 0);
  setenv("TMPDIR", file, 1);
  CHECK(strcmp(cddp__tmp_base(), "/tmp") == 0);
  setenv("TMPDIR", "", 1);
  CHECK(strcmp(cddp__tmp_base(), "/tmp") == 0);
  unsetenv("TMPDIR");
  CHECK(strcmp(cddp__tmp_base(), "/tmp") == 0);
  if (keep) setenv("TMPDIR", keep, 1);
  free(keep);
  unlink(file);
  rmdir(dir);
}

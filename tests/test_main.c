/* test_main.c - runs each registered test in a child process with a timeout; TAP-style lines. */
#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cddp/store.h"
#include "test.h"

#define MAX_TESTS 256
static struct {
  const char *name;
  cddp_test_fn fn;
  int timeout_s, fixture;
} tests[MAX_TESTS];
static int ntests;

void cddp_test_register(const char *name, cddp_test_fn fn, int timeout_s, int fixture) {
  if (ntests < MAX_TESTS) tests[ntests++] = (typeof(tests[0])){name, fn, timeout_s, fixture};
}

/* A page shared with each test's process: the reason of a skip comes back through it. */
#define SKIP_REASON_MAX 256
static char *skip_reason;

void cddp_test_skip(const char *fmt, ...) {
  if (skip_reason) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(skip_reason, SKIP_REASON_MAX, fmt, ap);
    va_end(ap);
  }
  fflush(NULL);
  exit(CDDP_TEST_SKIP_EXIT); /* exit, not _exit: a test's atexit cleanup still runs */
}

/* The running test's own folder (cddp_test_path): made by the runner before the fork, so the
 * test's process inherits its name, and removed by the runner after the test. */
static char test_dir[4096];

void cddp_test_path(char *out, size_t size, const char *name) {
  int n = snprintf(out, size, "%s/%s", test_dir, name);
  if (!test_dir[0] || n < 0 || (size_t)n >= size)
    TEST_FAIL("cddp_test_path: no room for %s/%s in %zu bytes", test_dir, name, size);
}

static int open_up(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)ftw;
  if (flag == FTW_D) chmod(path, st->st_mode | S_IRWXU); /* a test's read-only folder, as test_durable's */
  return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  remove(path);
  return 0;
}

/* The test's folder and all it holds, read-only folders too (a user other than root could not
 * empty them): opened up first, then removed depth first. */
static void remove_test_dir(void) {
  nftw(test_dir, open_up, 16, FTW_PHYS);
  nftw(test_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A new private folder for the test about to run; 0 when none could be made. */
static int make_test_dir(const char *prog) {
  const char *base = getenv("TMPDIR");
  if (!base || !*base) base = "/tmp";
  int n = snprintf(test_dir, sizeof test_dir, "%s/cddp-%s.XXXXXX", base, prog);
  if (n < 0 || (size_t)n >= sizeof test_dir || !mkdtemp(test_dir)) {
    fprintf(stderr, "%s: cannot make a test folder under %s: %s\n", prog, base, strerror(errno));
    test_dir[0] = 0;
    return 0;
  }
  return 1;
}

static double now_s(void);

int cddp_test_wait_for(int (*cond)(void *arg), void *arg, double secs) {
  double deadline = now_s() + secs * cddp_test_scale();
  for (;;) {
    if (cond(arg)) return 1;
    if (now_s() > deadline) return 0;
    usleep(2000);
  }
}

char cddp_test_proc_state(int pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *paren = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
  return paren && paren[1] == ' ' ? paren[2] : 0;
}

double cddp_test_scale(void) {
  const char *v = getenv("CDDP_TEST_SCALE");
  double scale = v ? atof(v) : 1;
  return scale > 0 ? scale : 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Waits for pid until deadline; kills it (and its process group) past the deadline. */
static int wait_until(pid_t pid, double deadline, int *timed_out) {
  int status = 0;
  *timed_out = 0;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return -1;
    if (now_s() > deadline) {
      *timed_out = 1;
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return status;
    }
    usleep(2000);
  }
}

int cddp_test_fork_ranks(int n, void (*fn)(int, int, void *), void *arg, int timeout_s) {
  pid_t pids[256];
  int failed = 0;
  fflush(NULL);
  for (int r = 0; r < n && r < 256; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      fn(r, n, arg);
      fflush(NULL);
      _exit(0);
    }
  }
  double deadline = now_s() + timeout_s * cddp_test_scale();
  for (int r = 0; r < n && r < 256; r++) {
    int to, st = wait_until(pids[r], deadline, &to);
    if (to || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "rank %d of %d %s (status 0x%x)\n", r, n,
              to ? "timed out" : "failed", st);
      failed++;
    }
  }
  return failed;
}

/* Below the kernel's ephemeral range (32768-60999 here): a port handed out for a server to
 * bind later must not be taken meanwhile by some process's outgoing connection. */
int cddp_test_free_port(void) {
  unsigned seed = (unsigned)getpid() ^ (unsigned)(now_s() * 1e6);
  for (int attempt = 0; attempt < 200; attempt++) {
    int port = 20000 + (int)(rand_r(&seed) % 12768);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0) close(fd);
    if (ok) return port;
  }
  perror("free port");
  exit(1);
}

int main(int argc, char **argv) {
  const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  const char *filter = argc > 1 ? argv[1] : NULL;
  double scale = cddp_test_scale();
  const char *fx = getenv("CDDP_TEST_FIXTURES");
  int fixtures = fx && strcmp(fx, "1") == 0;
  skip_reason = mmap(NULL, SKIP_REASON_MAX, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (skip_reason == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  int failed = 0, run = 0;
  for (int i = 0; i < ntests; i++) {
    if (filter && !strstr(tests[i].name, filter)) continue;
    if (tests[i].fixture != fixtures) continue;
    run++;
    memset(skip_reason, 0, SKIP_REASON_MAX);
    fflush(NULL);
    if (!make_test_dir(prog)) {
      failed++;
      printf("not ok %d - %s:%s (no folder of its own)\n", run, prog, tests[i].name);
      continue;
    }
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0); /* so a timeout kills the test's own children too */
      tests[i].fn();
      fflush(NULL);
      _exit(0);
    }
    int to, st = wait_until(pid, t0 + tests[i].timeout_s * scale, &to);
    kill(-pid, SIGKILL); /* leftovers of the test's process group */
    remove_test_dir();
    double ms = (now_s() - t0) * 1e3;
    if (!to && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
      printf("ok %d - %s:%s (%.0f ms)\n", run, prog, tests[i].name, ms);
    } else if (!to && WIFEXITED(st) && WEXITSTATUS(st) == CDDP_TEST_SKIP_EXIT) {
      skip_reason[SKIP_REASON_MAX - 1] = 0; /* written by the test's process: bound it */
      for (char *c = skip_reason; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' '; /* one TAP line */
      printf("ok %d - %s:%s (%.0f ms) # SKIP %s\n", run, prog, tests[i].name, ms,
             skip_reason[0] ? skip_reason : "(no reason given)");
    } else {
      failed++;
      if (to)
        printf("not ok %d - %s:%s (timed out after %d s)\n", run, prog, tests[i].name,
               (int)(tests[i].timeout_s * scale));
      else if (WIFSIGNALED(st))
        printf("not ok %d - %s:%s (signal %d)\n", run, prog, tests[i].name, WTERMSIG(st));
      else
        printf("not ok %d - %s:%s (exit %d)\n", run, prog, tests[i].name, WEXITSTATUS(st));
    }
    fflush(stdout);
  }
  return failed ? 1 : 0;
}

int cddp_test_store_child_start(cddp_test_store_child_t *c) {
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(up[0]), close(down[1]);
    cddp_store_server_t *srv;
    if (cddp_store_server_start(&srv, "127.0.0.1", 0, NULL) != CDDP_OK) _exit(1);
    int port = cddp_store_server_port(srv);
    if (write(up[1], &port, sizeof port) != (ssize_t)sizeof port) _exit(1);
    char ch;
    while (read(down[0], &ch, 1) > 0) { /* until the test closes its end */ }
    cddp_store_server_stop(srv);
    _exit(0);
  }
  close(up[1]), close(down[0]);
  struct pollfd pf = {up[0], POLLIN, 0};
  int ok = poll(&pf, 1, 10000) == 1 && read(up[0], &c->port, sizeof c->port) == (ssize_t)sizeof c->port;
  close(up[0]);
  c->pid = pid, c->keep_fd = down[1];
  return ok ? c->port : -1;
}

int cddp_test_store_child_stop(cddp_test_store_child_t *c) {
  close(c->keep_fd);
  int status = 0;
  return waitpid(c->pid, &status, 0) == c->pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int cddp_test_store_process(int *port) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    cddp_store_server_t *srv;
    int p = cddp_store_server_start(&srv, "127.0.0.1", 0, "") == CDDP_OK ? cddp_store_server_port(srv) : -1;
    if (write(fds[1], &p, sizeof p) != (ssize_t)sizeof p || p < 0) _exit(1);
    close(fds[1]);
    for (;;) pause(); /* until SIGKILLed by the test */
  }
  close(fds[1]);
  *port = -1;
  CHECK(read(fds[0], port, sizeof *port) == (ssize_t)sizeof *port && *port > 0);
  close(fds[0]);
  return pid;
}

/* sigguard.c - signals to a pipe (SIGUSR1 too: a request for the flight records), and a guard thread that ends the agent on a stop signal its busy
 * main thread cannot take. Handlers (not a signalfd) so that a thread the agent did not start (BLAS
 * starts some before main, with every signal unblocked) cannot take a signal's default action. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/check.h"
#include "common/clock.h"
#include "launcher/sigguard.h"

static const int guarded[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1};

static struct {
  int pipe[2];
  int grace_ms;
  char host[64];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int held;                    /* the main thread reads the pipe itself */
  int pending;                 /* a stop signal the guard took, not yet acted on or put back */
  uint64_t pending_at;
  int taken;                   /* the stop signal the main thread took: the agent is ending on it */
  uint64_t taken_at;
  const cddp__workers_t *ws;
  int dump_asked;              /* SIGUSR1 came: the workers' flight records are wanted */
  void (*at_exit)(void *);     /* run before the guard ends the process */
  void *at_exit_arg;
} g = {.pipe = {-1, -1}, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void on_signal(int sig) {
  int saved = errno;
  unsigned char b = (unsigned char)sig;
  ssize_t w = write(g.pipe[1], &b, 1); /* a full pipe is readable already: dropping one is fine */
  (void)w;
  errno = saved;
}

/* The first stop signal among those waiting on the pipe (0: only SIGCHLD and SIGUSR1, or none);
 * a SIGUSR1 is noted for cddp__sigguard_dump_asked. */
static int drain(int fd) {
  unsigned char b[64];
  int stop = 0;
  ssize_t n;
  while ((n = read(fd, b, sizeof b)) > 0 || (n < 0 && errno == EINTR))
    for (ssize_t i = 0; i < n; i++) {
      if (b[i] == SIGUSR1) __atomic_store_n(&g.dump_asked, 1, __ATOMIC_RELAXED);
      else if (b[i] != SIGCHLD && !stop) stop = b[i];
    }
  return stop;
}

int cddp__sigguard_dump_asked(void) { return __atomic_exchange_n(&g.dump_asked, 0, __ATOMIC_RELAXED); }

int cddp__sigguard_read(int sig_fd) {
  int sig = drain(sig_fd);
  pthread_mutex_lock(&g.mu);
  if (sig && !g.taken) g.taken = sig, g.taken_at = cddp__now_ns();
  pthread_mutex_unlock(&g.mu);
  return sig;
}

static void say(int sig, const char *how) {
  const char *ab = sigabbrev_np(sig);
  fprintf(stderr, "cddp run: the agent on %s received SIG%s while it waited on the store or its peers; %s\n", g.host,
          ab ? ab : "?", how);
}

/* Sleeps on the condition variable until the monotonic time until (or a wake-up). */
static void wait_until(uint64_t until) {
  uint64_t now = cddp__now_ns();
  if (now >= until) return;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts); /* the condition variable's clock */
  uint64_t ns = (uint64_t)ts.tv_nsec + (until - now);
  ts.tv_sec += (time_t)(ns / 1000000000ull), ts.tv_nsec = (long)(ns % 1000000000ull);
  pthread_cond_timedwait(&g.cv, &g.mu, &ts);
}

static void leave(int code) {
  if (g.at_exit) g.at_exit(g.at_exit_arg);
  _exit(code);
}

void cddp__sigguard_at_exit(void (*fn)(void *arg), void *arg) {
  pthread_mutex_lock(&g.mu);
  g.at_exit = fn, g.at_exit_arg = arg;
  pthread_mutex_unlock(&g.mu);
}

/* The agent cannot take the signal where it is: stop the workers as its own loop would (the
 * signal, then SIGKILL after the grace period), say so, and end. Called with g.mu held, which it
 * keeps: the main thread cannot go on meanwhile. */
static void act(int sig) {
  const cddp__workers_t *ws = g.ws;
  int alive = 0;
  for (int i = 0; ws && i < ws->n; i++)
    if (ws->w[i].pid > 0 && !ws->w[i].exited) {
      kill(-ws->w[i].pid, sig);
      alive++;
    }
  say(sig, alive ? "workers stopped" : "exiting");
  uint64_t until = cddp__deadline_ms(g.grace_ms);
  while (alive && cddp__now_ns() < until) { /* the main thread reaps only in its loop: not now */
    alive = 0;
    for (int i = 0; i < ws->n; i++)
      if (ws->w[i].pid > 0 && !ws->w[i].exited && waitpid(ws->w[i].pid, NULL, WNOHANG) == 0) alive++;
    if (alive) usleep(10000);
  }
  for (int i = 0; ws && i < ws->n; i++)
    if (ws->w[i].pid > 0) kill(-ws->w[i].pid, SIGKILL);
  leave(128 + sig);
}

static void *guard_main(void *arg) {
  (void)arg;
  sigset_t set;
  sigemptyset(&set);
  for (size_t i = 0; i < CDDP_ARRAY_LEN(guarded); i++) sigaddset(&set, guarded[i]);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL); /* the handlers run here (or in a thread we did not start) */
  pthread_mutex_lock(&g.mu);
  for (;;) {
    if (g.held) {
      pthread_cond_wait(&g.cv, &g.mu);
      continue;
    }
    if (g.taken) { /* the agent ends on it by itself: its workers' grace period, its exit barrier's, a second */
      uint64_t until = g.taken_at + (2 * (uint64_t)g.grace_ms + 1000) * 1000000ull;
      if (cddp__now_ns() >= until) {
        fprintf(stderr, "cddp run: the agent on %s did not end within twice --grace-period after a signal; exiting\n",
                g.host);
        leave(128 + g.taken);
      }
      drain(g.pipe[0]); /* a repeat does not shorten it */
      wait_until(CDDP_MIN(until, cddp__now_ns() + 100000000ull));
      continue;
    }
    if (g.pending) {
      uint64_t until = g.pending_at + CDDP__SIGGUARD_PATIENCE_MS * 1000000ull;
      if (cddp__now_ns() >= until) act(g.pending);
      wait_until(until);
      continue;
    }
    pthread_mutex_unlock(&g.mu);
    struct pollfd p = {.fd = g.pipe[0], .events = POLLIN};
    int r = poll(&p, 1, -1); /* the main thread may hold meanwhile: looked at again under the lock */
    pthread_mutex_lock(&g.mu);
    if (r > 0 && !g.held && !g.taken && (g.pending = drain(g.pipe[0]))) g.pending_at = cddp__now_ns();
  }
  return NULL;
}

cddp_result_t cddp__sigguard_start(int grace_ms, const char *host, int *sig_fd) {
  if (pipe2(g.pipe, O_CLOEXEC | O_NONBLOCK) != 0) return cddp__fail_errno(CDDP_SYSTEM, "signal pipe");
  g.grace_ms = grace_ms;
  snprintf(g.host, sizeof g.host, "%s", host);
  sigset_t set;
  sigemptyset(&set);
  struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART | SA_NOCLDSTOP};
  sigfillset(&sa.sa_mask);
  for (size_t i = 0; i < CDDP_ARRAY_LEN(guarded); i++) {
    sigaddset(&set, guarded[i]);
    if (sigaction(guarded[i], &sa, NULL) != 0) return cddp__fail_errno(CDDP_SYSTEM, "sigaction");
  }
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  pthread_t t;
  int e = pthread_create(&t, NULL, guard_main, NULL);
  if (e != 0) return cddp__fail(CDDP_SYSTEM, "cannot start the signal guard: %s", strerror(e));
  pthread_detach(t);
  *sig_fd = g.pipe[0];
  return CDDP_OK;
}

void cddp__sigguard_hold(void) {
  pthread_mutex_lock(&g.mu);
  g.held = 1;
  if (g.pending) { /* the main thread's loop takes it as if it had come now */
    unsigned char b = (unsigned char)g.pending;
    ssize_t w = write(g.pipe[1], &b, 1);
    (void)w;
    g.pending = 0;
  }
  pthread_mutex_unlock(&g.mu);
}

void cddp__sigguard_release(void) {
  pthread_mutex_lock(&g.mu);
  g.held = 0;
  pthread_cond_signal(&g.cv);
  pthread_mutex_unlock(&g.mu);
}

int cddp__sigguard_end(int code) {
  pthread_mutex_lock(&g.mu); /* kept to the end: the guard does not act any more */
  if (!g.pending || g.taken) return code;
  say(g.pending, "exiting");
  return 128 + g.pending;
}

void cddp__sigguard_workers(const cddp__workers_t *ws) {
  pthread_mutex_lock(&g.mu);
  g.ws = ws;
  pthread_mutex_unlock(&g.mu);
}

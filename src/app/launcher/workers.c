/* workers.c - spawns a round's workers, forwards their output by line, stops them TERM->KILL. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/io.h"
#include "common/log.h"
#include "launcher/cpubind.h"
#include "launcher/elastic_timer.h"
#include "launcher/errfile.h"
#include "launcher/proc.h"
#include "launcher/pystack.h"
#include "launcher/sigguard.h"
#include "launcher/warm.h"
#include "launcher/workers.h"
#include "launcher/torch_fr_vars.h"

#define LINE_MAX_BYTES 65536
#define DRAIN_MS 500      /* after the last exit, wait this long for pipes held by grandchildren */
#define HANG_CHECK_MS 500 /* how often the watchdog reads the flight pages */
#define TICK_MS 1000      /* how often ws->tick runs (the agent's status record) */

/* A Python program without torch's @record writes no error file, but its traceback on stderr
 * ends with the exception: the first unindented line after "Traceback (most recent call last):".
 * The last traceback wins (a chained exception, "During handling of the above ...", comes last).
 * torch 2.x's excepthook prefixes each line with "[rank<N>]: ", which is skipped. line is one
 * bounded line of the worker's, n bytes without its newline. */
static void traceback_line(cddp__worker_t *w, const char *line, size_t n) {
  static const char head[] = "Traceback (most recent call last):";
  size_t d = 5;
  if (n > 8 && !memcmp(line, "[rank", 5)) {
    while (d < n && d < 16 && line[d] >= '0' && line[d] <= '9') d++;
    if (d > 5 && d + 2 < n && line[d] == ']' && line[d + 1] == ':' && line[d + 2] == ' ') line += d + 3, n -= d + 3;
  }
  if (n == sizeof head - 1 && !memcmp(line, head, n)) {
    w->in_traceback = 1;
    return;
  }
  if (!w->in_traceback || !n || line[0] == ' ' || line[0] == '\t') return;
  w->in_traceback = 0;
  snprintf(w->exception, sizeof w->exception, "%.*s", (int)CDDP_MIN(n, sizeof w->exception - 1), line);
}

/* A log file that cannot take a line (a full disk): said once, with its path and the error, and
 * the worker's output is no longer logged; the job goes on (its output is not its result). */
static void log_failed(cddp__worker_t *w) {
  int err = errno;
  char link[64], path[4200];
  snprintf(link, sizeof link, "/proc/self/fd/%d", w->log_fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  path[n > 0 ? n : 0] = '\0';
  fprintf(stderr, "cddp run: cannot write rank %d's log %s: %s; the rest of its output is not logged, the job goes on\n",
          w->rank, n > 0 ? path : "(--log-dir)", strerror(err));
  close(w->log_fd);
  w->log_fd = -1;
}

/* One line (with its newline) of stream s of worker w: to the console with the prefix,
 * in a single write, and to the log file. */
static void emit(cddp__workers_t *ws, cddp__worker_t *w, int s, const char *line, size_t len) {
  static char out[LINE_MAX_BYTES + 64];
  if (ws->console[w - ws->w] & (1 << s)) {
    for (int k = 0; k < 2; k++) /* a line below a progress line (either stream, one terminal): clear
                                   the progress line; its next update redraws it */
      if (ws->live_on[k]) {
        (void)cddp__write_all(k ? STDERR_FILENO : STDOUT_FILENO, "\r\033[K", 4);
        ws->live_on[k]->live_open[k] = 0, ws->live_on[k] = NULL;
      }
    int p = snprintf(out, 64, "[rank %d] ", w->rank);
    memcpy(out + p, line, len);
    (void)cddp__write_all(s ? STDERR_FILENO : STDOUT_FILENO, out, (size_t)p + len); /* console gone: dropped */
  }
  if (w->log_fd >= 0 && cddp__write_all(w->log_fd, line, len) != 0) log_failed(w);
  w->probe.line_ns = cddp__now_ns(); /* a sign of progress for the watchdog */
  size_t n = len;
  while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ')) n--;
  if (n) { /* what `cddp status` shows of it: printable ASCII, so a line cannot move the terminal */
    size_t k = 0;
    for (; k < n && k < sizeof w->out - 1; k++) w->out[k] = line[k] >= 0x20 && line[k] < 0x7f ? line[k] : '?';
    w->out[k] = '\0';
    w->out_ns = w->probe.line_ns;
  }
  if (s == 1 && n) { /* its own word on why it fails, if it fails */
    snprintf(w->report, sizeof w->report, "%.*s", (int)CDDP_MIN(n, sizeof w->report - 1), line);
    w->report_ns = cddp__now_ns();
  }
  if (s == 1) traceback_line(w, line, n);
}

/* Emits complete lines of the buffer; at_eof flushes a partial last line with a newline. */
/* A live segment (what followed a '\r': a progress line) to the console, rewritten in place:
 * "\r[rank N] text". Log files get only whole lines. */
static void emit_live(cddp__workers_t *ws, cddp__worker_t *w, int s, const char *text, size_t len) {
  static char out[LINE_MAX_BYTES + 64];
  if (!(ws->console[w - ws->w] & (1 << s)) || !len) return;
  int p = snprintf(out, 64, "\r[rank %d] ", w->rank);
  memcpy(out + p, text, len);
  (void)cddp__write_all(s ? STDERR_FILENO : STDOUT_FILENO, out, (size_t)p + len);
  w->live_open[s] = 1, ws->live_on[s] = w;
}

/* Emits complete lines of the buffer; at_eof flushes a partial last line with a newline. With a
 * live console, '\r' ends a segment too, and the text after the last one is shown at once. */
static void flush_lines(cddp__workers_t *ws, cddp__worker_t *w, int s, int at_eof) {
  char *b = w->buf[s];
  size_t start = 0;
  int after_cr = 0;
  for (size_t i = 0; i < w->len[s]; i++) {
    if (ws->live && b[i] == '\r' && !(i + 1 < w->len[s] && b[i + 1] == '\n')) {
      if (after_cr) emit_live(ws, w, s, b + start, i - start);
      else if (i > start) emit(ws, w, s, b + start, i - start); /* text before it, as it was */
      start = i + 1, after_cr = 1;
      continue;
    }
    if (b[i] != '\n') continue;
    if (w->live_open[s]) { /* the live line ends here: its text stays, the next line starts below */
      if (after_cr && i > start) emit_live(ws, w, s, b + start, i - start);
      (void)cddp__write_all(s ? STDERR_FILENO : STDOUT_FILENO, "\n", 1);
      w->live_open[s] = 0, ws->live_on[s] = NULL;
      if (after_cr || i == start) {
        start = i + 1, after_cr = 0;
        continue;
      }
    }
    emit(ws, w, s, b + start, i + 1 - start);
    start = i + 1, after_cr = 0;
  }
  size_t rest = w->len[s] - start;
  if (rest && after_cr && !at_eof) { /* a progress update: show it now, not at the next one */
    emit_live(ws, w, s, b + start, rest);
    rest = 0;
    start = w->len[s];
  }
  if (rest && (at_eof || (start == 0 && rest == LINE_MAX_BYTES))) { /* partial: flush as a line */
    b[w->len[s]] = '\n';
    emit(ws, w, s, b + start, rest + 1);
    rest = 0;
    start = w->len[s];
  }
  if (at_eof && w->live_open[s])
    (void)cddp__write_all(s ? STDERR_FILENO : STDOUT_FILENO, "\n", 1), w->live_open[s] = 0, ws->live_on[s] = NULL;
  memmove(b, b + start, rest);
  w->len[s] = rest;
}

static void pump(cddp__workers_t *ws, cddp__worker_t *w, int s) {
  for (;;) {
    ssize_t r = read(w->fd[s], w->buf[s] + w->len[s], LINE_MAX_BYTES - w->len[s]);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) return;
    if (r <= 0) { /* EOF or error */
      flush_lines(ws, w, s, 1);
      close(w->fd[s]);
      w->fd[s] = -1;
      return;
    }
    w->len[s] += (size_t)r;
    flush_lines(ws, w, s, 0);
  }
}

int cddp__describe_status(int status, char *buf, size_t size) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char *abbrev = sigabbrev_np(sig);
    snprintf(buf, size, "was killed by signal %d (SIG%s)", sig, abbrev ? abbrev : "?");
    return 128 + sig;
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  snprintf(buf, size, "exited with code %d", code);
  return code;
}

static void kill_groups(cddp__workers_t *ws, int sig) {
  for (int i = 0; i < ws->n; i++) {
    cddp__worker_t *w = &ws->w[i];
    if (w->pid <= 0) continue;
    /* the group outlives its leader while grandchildren remain */
    if (kill(-w->pid, sig) != 0 && !w->exited) kill(w->pid, sig);
  }
}

void cddp__workers_kill(cddp__workers_t *ws) { kill_groups(ws, SIGKILL); }

int cddp__mkdir_p(const char *dir) {
  char p[4096];
  snprintf(p, sizeof p, "%s", dir);
  for (char *c = p + 1; *c; c++) {
    if (*c != '/') continue;
    *c = '\0';
    if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
    *c = '/';
  }
  return mkdir(p, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* Forks worker w (its buffers and log file are ready) running argv with env. */
static cddp_result_t spawn(cddp__workers_t *ws, cddp__worker_t *w, char *const *argv, char **env) {
  w->exited = 0, w->status = 0;
  w->start_ns = cddp__now_ns(), w->exit_ns = 0, w->report_ns = 0, w->report[0] = '\0';
  w->out_ns = 0, w->out[0] = '\0';
  w->exception[0] = '\0', w->in_traceback = 0;
  /* worker i of the round on the i-th share of the agent's CPUs, set in the child before exec
   * (cpubind.c says why) */
  cpu_set_t allowed, share;
  int bound = ws->cpu_bind && sched_getaffinity(0, sizeof allowed, &allowed) == 0 &&
              cddp__cpu_share(&allowed, ws->n_bind, (int)(w - ws->w), &share);
  if (ws->err_dir) { /* the last start's error file (its failure record is taken) is not this one's */
    char path[4200];
    cddp__errfile_path(ws->err_dir, w->rank, path, sizeof path);
    unlink(path);
    w->hang[0] = '\0';
    memset(&w->probe, 0, sizeof w->probe);
    cddp__progress_close(&w->progress);
    cddp__flight_file_path(ws->err_dir, w->rank, path, sizeof path);
    if (cddp__progress_open(&w->progress, path, w->start_ns) != CDDP_OK) /* the watchdog's, `cddp status`'s */
      CDDP_WARN("no hang detection or status for rank %d: %s", w->rank, cddp_last_error());
  }
  char what[32];
  snprintf(what, sizeof what, "rank %d", w->rank);
  int slot = (int)(w - ws->w);
  if (cddp__warm_take(ws->warm, slot, argv, env, bound ? &share : NULL, &w->pid, w->fd)) return CDDP_OK;
  CDDP_CHECK(cddp__proc_spawn(argv, env, bound ? &share : NULL, -1, 0, what, &w->pid, w->fd));
  if (bound) {
    char cpus[256];
    CDDP_INFO(CDDP_SUB_RUN, "rank %d runs on CPUs %s", w->rank, cddp__cpu_list(&share, cpus, sizeof cpus));
  }
  return CDDP_OK;
}

cddp_result_t cddp__workers_start(cddp__workers_t *ws, int n, int rank_base, char *const *argv, char **const *env,
                                  const char *log_dir, int truncate_logs) {
  cddp_result_t ret = CDDP_OK;
  ws->n = 0;
  ws->n_bind = n;
  ws->w = calloc((size_t)n, sizeof *ws->w);
  ws->outcome = CDDP__OUT_SUCCESS;
  ws->fail_rank = -1;
  if (!ws->w) return cddp__fail(CDDP_SYSTEM, "out of memory starting %d workers", n);
  if (log_dir && *log_dir && cddp__mkdir_p(log_dir) != 0) return cddp__fail_errno(CDDP_SYSTEM, "cannot create --log-dir %s", log_dir);
  for (int i = 0; i < n; i++) {
    cddp__worker_t *w = &ws->w[i];
    w->rank = rank_base + i;
    w->fd[0] = w->fd[1] = w->log_fd = -1;
    ws->n = i + 1;
    w->buf[0] = malloc(LINE_MAX_BYTES + 1);
    w->buf[1] = malloc(LINE_MAX_BYTES + 1);
    if (!w->buf[0] || !w->buf[1]) { ret = cddp__fail(CDDP_SYSTEM, "out of memory"); goto fail; }
    if (log_dir && *log_dir) {
      char path[4200];
      snprintf(path, sizeof path, "%s/rank%d.log", log_dir, w->rank);
      w->log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate_logs ? O_TRUNC : 0), 0644);
      if (w->log_fd < 0) { ret = cddp__fail_errno(CDDP_SYSTEM, "cannot open log file %s", path); goto fail; }
    }
    if ((ret = spawn(ws, w, argv, env[i])) != CDDP_OK) goto fail;
  }
  cddp__warm_plan(ws->warm, n, env, ws->cpu_bind);
  return CDDP_OK;
fail:
  kill_groups(ws, SIGKILL);
  for (int i = 0; i < ws->n; i++)
    if (ws->w[i].pid > 0) waitpid(ws->w[i].pid, NULL, 0);
  cddp__workers_release(ws);
  return ret;
}

cddp_result_t cddp__workers_respawn(cddp__workers_t *ws, int i, char *const *argv, char **env) {
  cddp__worker_t *w = &ws->w[i];
  for (int s = 0; s < 2; s++)
    if (w->fd[s] >= 0) {
      flush_lines(ws, w, s, 1);
      close(w->fd[s]);
      w->fd[s] = -1;
    }
  if (w->pid > 0) kill(-w->pid, SIGKILL); /* what the dead one left in its process group */
  cddp__workers_failure(ws, i, &w->prev);
  w->replaced = 1;
  ws->outcome = CDDP__OUT_SUCCESS;
  return spawn(ws, w, argv, env);
}

void cddp__workers_failure(const cddp__workers_t *ws, int i, cddp__failure_t *f) {
  const cddp__worker_t *w = &ws->w[i];
  *f = (cddp__failure_t){.rank = w->rank, .pid = w->pid, .status = w->status, .exit_ns = w->exit_ns,
                         .report_ns = w->report_ns};
  snprintf(f->host, sizeof f->host, "%s", ws->host ? ws->host : "?");
  snprintf(f->error, sizeof f->error, "%s", w->report);
  if (w->hang[0]) { /* killed by the watchdog: its hang is the cause, and it began before the kill */
    snprintf(f->error, sizeof f->error, "%.255s", w->hang);
    f->report_ns = w->progress.since_ns ? w->progress.since_ns : w->exit_ns;
    f->hung = 1;
    return;
  }
  if (!ws->err_dir) return;
  /* the exception it recorded (torch's @record) says why, else its traceback's, better than its
   * last stderr line; the file's time says when: wall clock, moved onto the monotonic one */
  char path[4200];
  uint64_t mtime = 0;
  cddp__errfile_path(ws->err_dir, w->rank, path, sizeof path);
  if (!cddp__errfile_read(path, f->error, sizeof f->error, &mtime)) {
    snprintf(f->error, sizeof f->error, "%s", w->exception[0] ? w->exception : w->report);
    return;
  }
  struct timespec real;
  clock_gettime(CLOCK_REALTIME, &real);
  uint64_t now_real = (uint64_t)real.tv_sec * 1000000000ull + (uint64_t)real.tv_nsec, now = cddp__now_ns();
  uint64_t age = now_real > mtime ? now_real - mtime : 0;
  f->report_ns = age < now ? now - age : 1;
}

/* Sends sig to every worker's group: the workers are being stopped, KILL follows after grace. */
static void stop_all(cddp__workers_t *ws, int sig, int *stopping, uint64_t *kill_at) {
  kill_groups(ws, sig);
  if (!ws->stop_ns) ws->stop_ns = cddp__now_ns();
  *stopping = 1;
  *kill_at = cddp__deadline_ms(ws->grace_ms);
}

/* fail_* and failure: of the worker whose failure came first, among those that failed by themselves. */
static void blame(cddp__workers_t *ws) {
  cddp__failure_t *f = calloc((size_t)ws->n, sizeof *f);
  int *slot = calloc((size_t)ws->n, sizeof *slot), n = 0;
  if (!f || !slot) goto exit; /* keep the first one reaped */
  for (int i = 0; i < ws->n; i++) {
    const cddp__worker_t *w = &ws->w[i];
    if (!w->exited || (WIFEXITED(w->status) && WEXITSTATUS(w->status) == 0)) continue;
    cddp__workers_failure(ws, i, &f[n]);
    if (cddp__failure_own(&f[n], ws->stop_ns)) slot[n++] = i;
  }
  int b = cddp__blame_first(f, n);
  if (b >= 0) {
    ws->failure = f[b];
    ws->fail_index = slot[b];
    ws->fail_rank = f[b].rank, ws->fail_pid = f[b].pid, ws->fail_status = f[b].status;
  }
exit:
  free(f);
  free(slot);
}

/* Runs `gdb -batch` on pid (every thread's stack) into path, bounded; nothing when gdb is absent. */
static void take_stack(pid_t pid, const char *path) {
  pid_t g = fork();
  if (g == 0) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600); /* a planted link: refused */
    if (fd < 0) _exit(127);
    dup2(fd, STDOUT_FILENO), dup2(fd, STDERR_FILENO);
    char p[32];
    snprintf(p, sizeof p, "%d", (int)pid);
    execlp("timeout", "timeout", "15", "gdb", "-batch", "-nx", "-p", p, "-ex", "thread apply all bt", (char *)NULL);
    _exit(127);
  }
  if (g > 0) waitpid(g, NULL, 0);
  /* what the kernel says of each thread, which needs no ptrace (often refused in containers) */
  int afd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  FILE *f = afd >= 0 ? fdopen(afd, "a") : NULL;
  if (!f && afd >= 0) close(afd);
  char dir[64], p2[400], line[512];
  snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
  DIR *d = f ? opendir(dir) : NULL;
  if (f) fprintf(f, "\n# threads of pid %d: tid, state, wchan, syscall\n", (int)pid);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    const char *what[] = {"stat", "wchan", "syscall"};
    fprintf(f, "%s", e->d_name);
    for (int k = 0; k < 3; k++) {
      snprintf(p2, sizeof p2, "%s/%s/%s", dir, e->d_name, what[k]);
      FILE *q = fopen(p2, "r");
      size_t n = q ? fread(line, 1, sizeof line - 1, q) : 0;
      if (q) fclose(q);
      line[n] = '\0';
      line[strcspn(line, "\n")] = '\0';
      if (k == 0) { /* stat: "tid (comm) S ...": keep comm and state */
        char *close = strrchr(line, ')');
        if (close && close[1] && close[2]) close[3] = '\0';
      }
      fprintf(f, "  %s", line);
    }
    fprintf(f, "\n");
  }
  if (d) closedir(d);
  if (f) fclose(f);
}

/* Every HANG_CHECK_MS: a hung worker gets its flight records (and its peers') dumped, its stack
 * taken, and SIGKILL; the failure it becomes carries why (w->hang). */
/* Every worker's flight page to flight_dir/rank<R>.json: how many, -1 when there is no folder. */
static int dump_pages(cddp__workers_t *ws, uint64_t now) {
  if (!ws->flight_dir || cddp__mkdir_p(ws->flight_dir) != 0) return -1;
  int k = 0;
  for (int i = 0; i < ws->n; i++) {
    if (!ws->w[i].progress.page) continue;
    char path[4300];
    snprintf(path, sizeof path, "%s/rank%d.json", ws->flight_dir, ws->w[i].rank);
    k += cddp__flight_dump(ws->w[i].progress.page, ws->w[i].rank, path, now) == 0;
  }
  return k;
}

/* The watchdog's own stack of worker w, taken since it went idle (hang_probe.c reads them from
 * half the timeout on), moved to path: the verdict costs no second py-spy run on a loaded host. */
static int reuse_probe_stack(const cddp__workers_t *ws, const cddp__worker_t *w, const char *path) {
  if (!ws->err_dir || w->probe.pid != w->pid || !w->probe.have_where || w->probe.stack_ns < w->probe.since_ns) return -1;
  char from[4300];
  snprintf(from, sizeof from, "%s/pystack-rank%d.txt", ws->err_dir, w->rank);
  return rename(from, path);
}

/* pid's Python stack in path, whole (a main thread with frames). */
static int stack_read(pid_t pid, const char *path) {
  cddp__pywhere_t where;
  return cddp__pystack_take(pid, path) == 0 && cddp__pystack_where(path, &where) == 0;
}

/* Every live Python worker's stack (all threads, py-spy) to flight_dir/rank<R>.pystack.txt: how
 * many, -1 when there is no folder. reuse: the watchdog's fresh stacks may stand in. */
static int dump_pystacks(cddp__workers_t *ws, int reuse) {
  if (!ws->flight_dir || cddp__mkdir_p(ws->flight_dir) != 0) return -1;
  int k = 0;
  for (int i = 0; i < ws->n; i++) {
    if (ws->w[i].exited) continue;
    cddp__torch_fr_poke(ws->flight_dir, ws->w[i].rank); /* torch's own records too, where it takes the request */
    char path[4300], tmp[4320];
    snprintf(path, sizeof path, "%s/rank%d.pystack.txt", ws->flight_dir, ws->w[i].rank);
    snprintf(tmp, sizeof tmp, "%s.part", path); /* a miss keeps the stack an earlier dump wrote */
    if (reuse && reuse_probe_stack(ws, &ws->w[i], path) == 0) k++;
    else if (stack_read(ws->w[i].pid, tmp) || stack_read(ws->w[i].pid, tmp)) /* read without a pause, */
      k += rename(tmp, path) == 0;                                          /* it can miss */
    else unlink(tmp);
  }
  return k;
}

/* A line is about to name the flight folder: what is in it stays after the job. */
static void said_where(cddp__workers_t *ws) {
  if (ws->flight_named) __atomic_store_n(ws->flight_named, 1, __ATOMIC_RELEASE);
}

/* What every local rank was doing when the job lost one of them: their records and (stacks) Python
 * stacks, before they are stopped (a respawn or the next round replaces the pages). */
static void dump_on_failure(cddp__workers_t *ws, const char *what, int stacks) {
  for (int i = 0; i < ws->n; i++)
    if (ws->w[i].hang[0]) return; /* the watchdog's, taken before its kill, say more than these */
  int k = dump_pages(ws, cddp__now_ns()), s = stacks ? dump_pystacks(ws, 0) : 0;
  if ((k > 0 || s > 0) && cddp__log_enabled(CDDP_LOG_INFO, CDDP_SUB_RUN)) said_where(ws);
  if (k > 0 && s > 0)
    CDDP_INFO(CDDP_SUB_RUN, "on %s: the Python stacks of %d worker(s) and the flight records of %d worker(s) are in %s",
              what, s, k, ws->flight_dir);
  else if (k > 0)
    CDDP_INFO(CDDP_SUB_RUN, "on %s: the flight records of %d worker(s) are in %s", what, k, ws->flight_dir);
  else if (s > 0)
    CDDP_INFO(CDDP_SUB_RUN, "on %s: the Python stacks of %d worker(s) are in %s", what, s, ws->flight_dir);
}

/* The watchdog's judgement of the workers that keep no flight page (launcher/hang_probe.h). */
static int probe(cddp__workers_t *ws, uint64_t now, uint64_t remote, char *why, size_t size) {
  cddp__probe_t *q = calloc((size_t)ws->n, sizeof *q);
  if (!q) return -1;
  for (int i = 0; i < ws->n; i++) {
    const cddp__worker_t *w = &ws->w[i];
    int paged = w->progress.page && __atomic_load_n(&w->progress.page->magic, __ATOMIC_ACQUIRE) == CDDP__FLIGHT_MAGIC;
    q[i] = w->probe;
    q[i].pid = w->exited || paged ? 0 : w->pid, q[i].rank = w->rank;
  }
  int h = cddp__probe_find(q, ws->n, now, ws->hang_ms, remote, ws->err_dir, why, size);
  for (int i = 0; i < ws->n; i++) ws->w[i].probe = q[i];
  free(q);
  return h;
}

static void watchdog(cddp__workers_t *ws) {
  cddp__progress_t *pr = calloc((size_t)ws->n, sizeof *pr);
  pid_t *pid = calloc((size_t)ws->n, sizeof *pid);
  if (!pr || !pid) goto exit;
  /* a worker judged once is not judged again: killed but not yet reaped, it would be found
   * still hung and its stack, records and reason overwritten with the zombie's */
  for (int i = 0; i < ws->n; i++)
    pr[i] = ws->w[i].progress, pid[i] = ws->w[i].exited || ws->w[i].hang[0] ? 0 : ws->w[i].pid;
  char why[320];
  uint64_t now = cddp__now_ns();
  uint64_t remote = ws->remote_since ? __atomic_load_n(ws->remote_since, __ATOMIC_ACQUIRE) : 0;
  int h = cddp__hang_find(pr, pid, ws->n, now, ws->hang_ms, remote, why, sizeof why);
  for (int i = 0; i < ws->n; i++) ws->w[i].progress = pr[i];
  int probed = h < 0 && ws->err_dir ? (h = probe(ws, now, remote, why, sizeof why)) >= 0 : 0;
  if (ws->remote_wanted) { /* a worker idle outside any collective: are the other nodes waiting on it? */
    int want = 0;
    for (int i = 0; i < ws->n; i++)
      want |= (pid[i] && pr[i].page && pr[i].seq > 0 && pr[i].done == pr[i].seq &&
               now - pr[i].since_ns >= (uint64_t)ws->hang_ms * 500000ull) ||
              (ws->w[i].probe.pid && ws->w[i].probe.since_ns && !cddp__probe_waiting(&ws->w[i].probe) &&
               now - ws->w[i].probe.since_ns >= (uint64_t)ws->hang_ms * 500000ull);
    __atomic_store_n(ws->remote_wanted, want, __ATOMIC_RELEASE);
  }
  if (h < 0) goto exit;
  cddp__worker_t *w = &ws->w[h];
  char path[4300], where[4200] = "";
  if (dump_pages(ws, now) >= 0) {
    snprintf(path, sizeof path, "%s/rank%d.stack.txt", ws->flight_dir, w->rank);
    if (dump_pystacks(ws, probed) <= 0 || !probed) take_stack(w->pid, path); /* gdb: slow on a Python process */
    snprintf(where, sizeof where, "; flight records and stack in %s", ws->flight_dir);
    said_where(ws);
  }
  snprintf(w->hang, sizeof w->hang, "%.220s%.419s", why, where);
  /* said now: the job's closing line waits for the other workers to stop, seconds on a loaded host */
  fprintf(stderr, "cddp run: the watchdog kills rank %d (host %s, pid %d) as %s\n", w->rank,
          ws->host ? ws->host : "?", (int)w->pid, w->hang);
  kill(-w->pid, SIGKILL);
  kill(w->pid, SIGKILL);
exit:
  free(pr);
  free(pid);
}

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* torch's elastic timers (launcher/elastic_timer.h): a worker whose timer expired gets the signal
 * it asked for, and its line says which timer. Only this node's live workers are ever signalled:
 * the pid in a request is the requester's word, not a right. */
static void serve_timers(cddp__workers_t *ws, int readable) {
  cddp__etimer_req_t r;
  if (readable) cddp__etimer_read(ws->timer);
  double now = wall_s();
  while (cddp__etimer_expired(ws->timer, now, &r)) {
    cddp__worker_t *w = NULL;
    for (int i = 0; i < ws->n && !w; i++)
      if (!ws->w[i].exited && !ws->w[i].hang[0] && ws->w[i].pid == r.pid) w = &ws->w[i];
    if (!w) CDDP_WARN("elastic timer '%s' of pid %lld expired; that pid is no worker of this node: nothing signalled", r.scope, r.pid);
    else if (r.signal <= 0)
      fprintf(stderr, "cddp run: rank %d (host %s, pid %d): timer '%s' expired %.1f s ago; it asked for no signal, so it runs on\n",
              w->rank, ws->host ? ws->host : "?", (int)w->pid, r.scope, now - r.expiration_time);
    else {
      snprintf(w->hang, sizeof w->hang, "timer '%s' expired %.1f s ago (torch.distributed.elastic.timer)", r.scope,
               now - r.expiration_time);
      kill(-w->pid, r.signal);
      kill(w->pid, r.signal);
    }
  }
}

/* The monotonic deadline of the next timer's expiry, UINT64_MAX when none is held. */
static uint64_t timer_due(const cddp__workers_t *ws) {
  double next = cddp__etimer_next(ws->timer);
  if (next <= 0) return UINT64_MAX;
  double left = next - wall_s();
  return cddp__now_ns() + (left > 0 ? (uint64_t)(left * 1e9) : 0);
}

static cddp__worker_t *by_pid(cddp__workers_t *ws, pid_t pid) {
  for (int i = 0; i < ws->n; i++)
    if (ws->w[i].pid == pid) return &ws->w[i];
  return NULL;
}

void cddp__workers_watch(cddp__workers_t *ws, int sig_fd, int event_fd, int (*accept)(const char *, void *),
                         void *ctx) {
  int nfds = 4 + 2 * ws->n, stopping = 0, nexited = 0, replace_now = 0, wake_now = 0, first = 1;
  uint64_t kill_at = UINT64_MAX, drain_until = UINT64_MAX, hang_check_at = cddp__deadline_ms(HANG_CHECK_MS);
  uint64_t tick_at = cddp__deadline_ms(TICK_MS);
  struct pollfd *pfd = calloc((size_t)nfds, sizeof *pfd);
  if (!pfd) abort();
  for (int i = 0; i < ws->n; i++) nexited += ws->w[i].exited;
  if (nexited == ws->n) drain_until = cddp__deadline_ms(DRAIN_MS);
  if (ws->stop_now) { /* the agent gave up after a keep-going failure: stop the rest */
    ws->stop_now = 0;
    stop_all(ws, SIGTERM, &stopping, &kill_at);
  }
  if (ws->stop_at && ws->termed) { /* a second watch after stop_at: keep its KILL deadline */
    stopping = 1;
    kill_at = ws->stop_at + (uint64_t)ws->grace_ms * 1000000ull;
  }
  while (!replace_now && !wake_now) {
    int open_fds = 0;
    for (int i = 0; i < ws->n; i++) open_fds += (ws->w[i].fd[0] >= 0) + (ws->w[i].fd[1] >= 0);
    if (nexited == ws->n && (open_fds == 0 || cddp__now_ns() >= drain_until)) break;
    if (cddp__now_ns() >= kill_at) {
      kill_groups(ws, SIGKILL);
      kill_at = UINT64_MAX;
    }
    if (ws->stop_at && !ws->termed && cddp__now_ns() >= ws->stop_at) {
      ws->termed = 1;
      if (!stopping) stop_all(ws, SIGTERM, &stopping, &kill_at);
    }
    uint64_t next = CDDP_MIN(kill_at, drain_until);
    if (ws->stop_at && !ws->termed) next = CDDP_MIN(next, ws->stop_at);
    if (ws->hang_ms > 0 && !stopping) next = CDDP_MIN(next, hang_check_at);
    if (ws->tick && !stopping) next = CDDP_MIN(next, tick_at);
    if (!stopping) next = CDDP_MIN(next, cddp__warm_due(ws->warm));
    if (ws->timer && !stopping) next = CDDP_MIN(next, timer_due(ws));
    int timeout = next == UINT64_MAX ? -1 : cddp__ms_left(next);
    if (first) timeout = 0, first = 0; /* children that died while nobody watched: reap them now */
    pfd[0] = (struct pollfd){.fd = sig_fd, .events = POLLIN};
    pfd[1] = (struct pollfd){.fd = event_fd, .events = POLLIN};
    for (int i = 0; i < ws->n; i++)
      for (int s = 0; s < 2; s++) pfd[2 + 2 * i + s] = (struct pollfd){.fd = ws->w[i].fd[s], .events = POLLIN};
    pfd[nfds - 2] = (struct pollfd){.fd = stopping ? -1 : cddp__etimer_fd(ws->timer), .events = POLLIN};
    pfd[nfds - 1] = (struct pollfd){.fd = stopping ? -1 : ws->wake_fd, .events = POLLIN};
    int r = poll(pfd, (nfds_t)nfds, timeout);
    if (ws->hang_ms > 0 && !stopping && cddp__now_ns() >= hang_check_at) {
      watchdog(ws);
      hang_check_at = cddp__deadline_ms(HANG_CHECK_MS); /* after it: gdb may have taken seconds */
    }
    if (ws->tick && !stopping && cddp__now_ns() >= tick_at) {
      tick_at = cddp__deadline_ms(TICK_MS);
      ws->tick(ws, ws->tick_arg);
    }
    if (r < 0 && errno != EINTR) break;
    if (!stopping) cddp__warm_tick(ws->warm);
    if (ws->timer && !stopping) serve_timers(ws, r > 0 && (pfd[nfds - 2].revents & POLLIN));
    for (int i = 0; i < ws->n; i++)
      for (int s = 0; s < 2; s++)
        if (ws->w[i].fd[s] >= 0 && (pfd[2 + 2 * i + s].revents & (POLLIN | POLLHUP | POLLERR))) pump(ws, &ws->w[i], s);
    int sig = pfd[0].revents & POLLIN ? cddp__sigguard_read(sig_fd) : 0; /* SIGCHLD: reaped below */
    if (cddp__sigguard_dump_asked()) {
      int k = dump_pages(ws, cddp__now_ns()), s = dump_pystacks(ws, 0);
      if (k > 0 || s > 0) said_where(ws);
      if (s > 0) fprintf(stderr, "cddp run: SIGUSR1: the Python stacks of %d worker(s) are in %s\n", s, ws->flight_dir);
      if (k > 0) fprintf(stderr, "cddp run: SIGUSR1: the flight records of %d worker(s) are in %s\n", k, ws->flight_dir);
      else if (s <= 0) fprintf(stderr, "cddp run: SIGUSR1: no flight records to write (%s)\n",
                   k < 0 ? "no folder for them" : "no worker keeps one: --hang-timeout 0, or none runs cddp's library");
    }
    if (sig && ws->outcome != CDDP__OUT_SIGNAL) { /* a stop for another reason ends on the signal too */
      ws->outcome = CDDP__OUT_SIGNAL;
      ws->signo = sig;
      if (!stopping) stop_all(ws, sig, &stopping, &kill_at);
    } /* a repeat (timeout(1) sends its signal twice) keeps the grace period */
    if (event_fd >= 0 && (pfd[1].revents & (POLLIN | POLLHUP))) {
      char msg[512];
      ssize_t n = read(event_fd, msg, sizeof msg - 1);
      if (n > 0) {
        msg[n] = '\0';
        if (!stopping && (!accept || accept(msg, ctx))) {
          ws->outcome = CDDP__OUT_EVENT;
          dump_on_failure(ws, "another node's failure", 1);
          snprintf(ws->event, sizeof ws->event, "%s", msg);
          stop_all(ws, SIGTERM, &stopping, &kill_at);
        }
      }
    }
    if (!stopping && ws->wake_fd >= 0 && (pfd[nfds - 1].revents & POLLIN)) {
      ws->outcome = CDDP__OUT_WAKE;
      wake_now = 1;
    }
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
      cddp__worker_t *w = by_pid(ws, pid);
      if (!w || w->exited) continue;
      cddp__etimer_forget(ws->timer, pid); /* its pid may be reused */
      w->exited = 1;
      w->status = st;
      w->exit_ns = cddp__now_ns();
      if (++nexited == ws->n) drain_until = cddp__deadline_ms(DRAIN_MS);
      int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!ok && !stopping) {
        ws->outcome = CDDP__OUT_FAILED;
        dump_on_failure(ws, "a worker's failure", !w->hang[0]); /* a hang's are taken */
        ws->fail_rank = w->rank;
        ws->fail_pid = w->pid;
        ws->fail_status = st;
        ws->fail_index = (int)(w - ws->w);
        if (ws->keep_going) { /* the others go on; the agent decides about this one */
          replace_now = 1, wake_now = 0;
          break;
        }
        stop_all(ws, SIGTERM, &stopping, &kill_at);
      }
    }
  }
  for (int i = 0; i < ws->n && !wake_now; i++)
    for (int s = 0; s < 2; s++)
      if (ws->w[i].fd[s] >= 0 && (!replace_now || i == ws->fail_index)) {
        if (replace_now) pump(ws, &ws->w[i], s); /* what the dead one wrote last */
        if (ws->w[i].fd[s] < 0) continue;
        flush_lines(ws, &ws->w[i], s, 1);
        close(ws->w[i].fd[s]);
        ws->w[i].fd[s] = -1;
      }
  if (stopping) kill_groups(ws, SIGKILL); /* leftovers of the workers' process groups */
  if (ws->outcome == CDDP__OUT_FAILED && replace_now) cddp__workers_failure(ws, ws->fail_index, &ws->failure);
  /* the first reaped is not always the first failed; and a worker may have failed by itself
   * just before another node's event stopped the rest (fail_rank says so, the outcome stays) */
  else if (ws->outcome == CDDP__OUT_FAILED || ws->outcome == CDDP__OUT_EVENT) blame(ws);
  free(pfd);
}

void cddp__workers_release(cddp__workers_t *ws) {
  for (int i = 0; i < ws->n; i++) {
    cddp__worker_t *w = &ws->w[i];
    for (int s = 0; s < 2; s++) {
      if (w->fd[s] >= 0) close(w->fd[s]);
      free(w->buf[s]);
    }
    if (w->log_fd >= 0) close(w->log_fd);
    cddp__progress_close(&w->progress);
  }
  free(ws->w);
  ws->w = NULL;
  ws->n = 0;
}

/* warm.c - warm spare workers (warm.h).
 *
 * A spare is the program's interpreter running a small stub (STUB below): it imports the
 * preload list (and stops at the next module once fd 3 is readable: taken early, the script
 * should not wait for modules it may never import), then blocks reading fd 3. When a restart takes it, the agent writes the
 * worker's arguments and environment there and closes it; the stub replaces os.environ, sets
 * sys.argv and sys.path[0] as the interpreter would have, and runs the script (runpy) as
 * __main__. An empty read (the agent gave it up) ends it. The spare is a child of the agent,
 * in its own process group, with its pipes: to the agent it is a worker like any other. */
#include "launcher/warm.h"

#include <dirent.h>
#include <errno.h>
#include <linux/capability.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"
#include "launcher/cpubind.h"
#include "launcher/program.h"
#include "launcher/proc.h"

#define MSG_MAX (1 << 20) /* arguments + environment; larger: a fresh start */
#define DEFAULT_PRELOAD "torch,torch.distributed,torch._dynamo"

static const char STUB[] =
    "import os, sys\n"
    "def _cddp_warm():\n"
    "    import select\n"
    "    fd = int(os.environ.pop('CDDP_WARM_FD'))\n"
    "    for m in os.environ.pop('CDDP_WARM_PRELOAD', '').split(','):\n"
    "        if select.select([fd], [], [], 0)[0]:\n" /* taken mid-preload: the script now, */
    "            break  # it imports what it needs itself\n"      /* not modules it may never use */
    "        try:\n"
    "            m and __import__(m)\n"
    "        except Exception:\n"
    "            pass  # the program imports it again and reports what is wrong\n"
    "    buf = bytearray()\n"
    "    while True:\n"
    "        b = os.read(fd, 1 << 16)\n"
    "        if not b:\n"
    "            break\n"
    "        buf += b\n"
    "    os.close(fd)\n"
    "    if not buf:\n"
    "        os._exit(0)\n"
    "    parts = bytes(buf).split(b'\\0')[:-1]\n"
    "    n = int(parts[0])\n"
    "    args = [os.fsdecode(a) for a in parts[1:1 + n]]\n"
    "    os.environb.clear()\n"
    "    for e in parts[1 + n:]:\n"
    "        k, _, v = e.partition(b'=')\n"
    "        os.environb[k] = v\n"
    "    return args\n"
    "def _cddp_run(a):\n"  /* as python SCRIPT / python -m: the program runs in __main__ */
    "    import os, sys, runpy, importlib.machinery\n"
    "    g = sys.modules['__main__'].__dict__\n"
    "    for k in [k for k in g if k not in ('__name__', '__builtins__')]:\n"
    "        del g[k]\n"
    "    if a[0] == '-m':\n"
    "        sys.argv = ['-m'] + a[2:]\n"
    "        sys.path[0] = os.getcwd()\n"
    "        runpy._run_module_as_main(a[1])\n"
    "        return\n"
    "    sys.argv = a\n"
    "    p = os.path.abspath(a[0])\n"
    "    sys.path[0] = os.path.dirname(os.path.realpath(a[0]))\n"
    "    with open(p, 'rb') as f:\n"
    "        code = compile(f.read(), p, 'exec')\n"
    "    g.update(__file__=p, __cached__=None, __doc__=None, __package__=None, __spec__=None,\n"
    "             __loader__=importlib.machinery.SourceFileLoader('__main__', p))\n"
    "    exec(code, g)\n"
    "_cddp_run(_cddp_warm())\n";

typedef struct spare {
  pid_t pid; /* 0: none */
  int fd[2]; /* its stdout / stderr read ends */
  int ctl;   /* the write end of its fd 3 */
  uint64_t born_ns;
} spare_t;

struct cddp__warm {
  char **argv;        /* INTERPRETER FLAGS... -c STUB */
  int args_at;        /* where the program's own arguments (SCRIPT or -m MODULE) start in its argv */
  char preload[512];
  int delay_ms;
  int n, cpu_bind;
  spare_t *s;         /* per slot */
  char ***env;        /* per slot: the last round's environment, copied */
  uint64_t due;
  int nice;           /* > 0: spares import at this nice value (CDDP_WARM_NICE), set back to the agent's when taken */
};

/* Whether the agent may set a spare back from CDDP_WARM_NICE to its own nice when it is taken:
 * CAP_SYS_NICE, or an RLIMIT_NICE that allows nice 0. Without it spares run at 0 (a spare left at 19 would be
 * a slow worker) and only --warm-delay keeps them out of the workers' way. */
static int may_renice(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NICE, &rl) == 0 && rl.rlim_cur >= 20) return 1;
  struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct d[2];
  return syscall(SYS_capget, &h, d) == 0 && (d[CAP_TO_INDEX(CAP_SYS_NICE)].effective & CAP_TO_MASK(CAP_SYS_NICE));
}

/* Every thread of pid to nice (a thread's nice is its own; the import may have started some). */
static void renice_all(pid_t pid, int nice) {
  char dir[64];
  snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.') setpriority(PRIO_PROCESS, (id_t)atoi(e->d_name), nice);
  if (d) closedir(d);
  else setpriority(PRIO_PROCESS, (id_t)pid, nice);
}

/* What a spare of argv preloads (warm_new says when), and where SCRIPT or -m is in argv (*at). */
static const char *preload_of(char *const *argv, const char *preload, int *at_out, char *why, size_t why_size) {
  int at = *at_out = cddp__program_python_args(argv, why, why_size);
  if (at < 0) return NULL;
  if (preload) {
    if (!*preload) snprintf(why, why_size, "nothing to preload (--warm-preload '')");
    return *preload ? preload : NULL;
  }
  /* torch 2.x imports torch._dynamo (sympy, inductor) at a script's first optimizer: almost as
   * long as torch's own import, on every restart; 1.13 has no such module and the stub skips it */
  if (strcmp(argv[at], "-m") != 0 && cddp__program_imports_torch(argv[at])) return DEFAULT_PRELOAD;
  snprintf(why, why_size, "%.200s does not import torch (name modules with --warm-preload)", argv[at]);
  return NULL;
}

cddp__warm_t *cddp__warm_new(char *const *argv, const char *preload, int delay_ms, char *why, size_t why_size) {
  int at;
  const char *what = preload_of(argv, preload, &at, why, why_size);
  if (!what) return NULL;
  cddp__warm_t *wp = calloc(1, sizeof *wp);
  if (!wp || !(wp->argv = calloc((size_t)at + 3, sizeof *wp->argv))) {
    free(wp);
    snprintf(why, why_size, "out of memory");
    return NULL;
  }
  for (int i = 0; i < at; i++) wp->argv[i] = argv[i];
  wp->argv[at] = "-c";
  wp->argv[at + 1] = (char *)STUB;
  wp->args_at = at;
  snprintf(wp->preload, sizeof wp->preload, "%s", what);
  wp->delay_ms = delay_ms;
  wp->due = UINT64_MAX;
  /* nice 0 by default: on a host whose CPUs the workers keep busy (CPU training), a spare at
   * nice 19 gets 1.5% of a core and was still importing 60 s on, when the restart came */
  int64_t nice = cddp__knob_int(CDDP_KNOB_WARM_NICE);
  wp->nice = nice > 0 && may_renice() ? (int)CDDP_MIN(nice, (int64_t)19) : 0;
  return wp;
}

static void drop(spare_t *s, int kill_it) {
  if (s->pid <= 0) return;
  if (s->ctl >= 0) close(s->ctl);
  for (int k = 0; k < 2; k++) close(s->fd[k]);
  if (kill_it) kill(-s->pid, SIGKILL);
  waitpid(s->pid, NULL, 0); /* ECHILD when the workers' watch reaped it first */
  *s = (spare_t){.ctl = -1, .fd = {-1, -1}};
}

static void free_env(char **env) {
  for (size_t i = 0; env && env[i]; i++) free(env[i]);
  free(env);
}

static char **copy_env(char *const *env, const char *fd_var, const char *preload_var) {
  size_t n = 0;
  while (env[n]) n++;
  char **c = calloc(n + 3, sizeof *c);
  if (!c) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (!(c[k++] = strdup(env[i]))) goto fail;
  if (fd_var && !(c[k++] = strdup(fd_var))) goto fail;
  if (preload_var && !(c[k++] = strdup(preload_var))) goto fail;
  return c;
fail:
  free_env(c);
  return NULL;
}

static void release_slots(cddp__warm_t *wp) {
  for (int i = 0; i < wp->n; i++) {
    drop(&wp->s[i], 1);
    free_env(wp->env[i]);
  }
  free(wp->s);
  free(wp->env);
  wp->s = NULL, wp->env = NULL, wp->n = 0;
}

void cddp__warm_free(cddp__warm_t *wp) {
  if (!wp) return;
  release_slots(wp);
  free(wp->argv);
  free(wp);
}

void cddp__warm_plan(cddp__warm_t *wp, int n, char **const *env, int cpu_bind) {
  if (!wp) return;
  if (n != wp->n) { /* another slot count: other shares of the CPUs too */
    release_slots(wp);
    wp->s = calloc((size_t)n, sizeof *wp->s);
    wp->env = calloc((size_t)n, sizeof *wp->env);
    if (!wp->s || !wp->env) {
      free(wp->s), free(wp->env);
      wp->s = NULL, wp->env = NULL;
      return;
    }
    for (int i = 0; i < n; i++) wp->s[i] = (spare_t){.ctl = -1, .fd = {-1, -1}};
    wp->n = n;
  }
  wp->cpu_bind = cpu_bind;
  for (int i = 0; i < n; i++) {
    free_env(wp->env[i]);
    wp->env[i] = copy_env(env[i], "CDDP_WARM_FD=3", NULL);
  }
  wp->due = cddp__deadline_ms(wp->delay_ms);
}

uint64_t cddp__warm_due(const cddp__warm_t *wp) { return wp ? wp->due : UINT64_MAX; }

static void start_spare(cddp__warm_t *wp, int i) {
  spare_t *s = &wp->s[i];
  char preload[600], what[48];
  snprintf(preload, sizeof preload, "CDDP_WARM_PRELOAD=%s", wp->preload);
  snprintf(what, sizeof what, "a warm spare for slot %d", i);
  char **env = wp->env[i] ? copy_env(wp->env[i], NULL, preload) : NULL;
  cpu_set_t allowed, share;
  int bound = wp->cpu_bind && sched_getaffinity(0, sizeof allowed, &allowed) == 0 &&
              cddp__cpu_share(&allowed, wp->n, i, &share);
  int ctl[2] = {-1, -1};
  if (!env || pipe2(ctl, O_CLOEXEC) != 0 ||
      cddp__proc_spawn(wp->argv, env, bound ? &share : NULL, ctl[0], wp->nice, what, &s->pid, s->fd) != CDDP_OK) {
    CDDP_INFO(CDDP_SUB_RUN, "no warm spare for slot %d: %s", i, env ? strerror(errno) : "out of memory");
    if (ctl[1] >= 0) close(ctl[1]);
    s->pid = 0;
  } else {
    s->ctl = ctl[1];
    s->born_ns = cddp__now_ns();
    (void)fcntl(s->ctl, F_SETPIPE_SZ, MSG_MAX); /* best effort: the message fits in one write */
  }
  if (ctl[0] >= 0) close(ctl[0]);
  free_env(env);
}

void cddp__warm_tick(cddp__warm_t *wp) {
  if (!wp || cddp__now_ns() < wp->due) return;
  wp->due = UINT64_MAX;
  int started = 0;
  for (int i = 0; i < wp->n; i++)
    if (wp->s[i].pid <= 0) start_spare(wp, i), started += wp->s[i].pid > 0;
  if (started)
    CDDP_INFO(CDDP_SUB_RUN, "started %d warm spare(s) preloading %s, for the next restart", started, wp->preload);
}

typedef struct msg {
  char *buf;
  size_t len, cap;
} msg_t;

/* Appends part and its NUL; 0 when the message would pass MSG_MAX (or memory ran out). */
static int append(msg_t *m, const char *part) {
  size_t n = strlen(part) + 1;
  if (m->len + n > MSG_MAX) return 0;
  if (m->len + n > m->cap) {
    size_t cap = CDDP_MAX(m->cap * 2, CDDP_MAX(m->len + n, (size_t)4096));
    char *bigger = realloc(m->buf, cap);
    if (!bigger) return 0;
    m->buf = bigger, m->cap = cap;
  }
  memcpy(m->buf + m->len, part, n);
  m->len += n;
  return 1;
}

/* Whether the spare is still alive (the workers' watch reaps any child it does not know). */
static int alive(const spare_t *s) {
  siginfo_t si = {0};
  return waitid(P_PID, (id_t)s->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == 0;
}

int cddp__warm_take(cddp__warm_t *wp, int slot, char *const *argv, char **env, const cpu_set_t *cpus, pid_t *pid,
                    int fd[2]) {
  if (!wp || slot >= wp->n || wp->s[slot].pid <= 0) return 0;
  spare_t *s = &wp->s[slot];
  if (!alive(s)) {
    CDDP_INFO(CDDP_SUB_RUN, "the warm spare for slot %d (pid %d) has exited; starting afresh", slot, (int)s->pid);
    drop(s, 0);
    return 0;
  }
  /* its arguments (from SCRIPT or -m on) and environment, NUL-separated: "N\0ARGS...\0ENV...\0" */
  msg_t m = {0};
  char count[32];
  int nargs = 0;
  while (argv[wp->args_at + nargs]) nargs++;
  snprintf(count, sizeof count, "%d", nargs);
  int ok = append(&m, count);
  for (int i = 0; ok && i < nargs; i++) ok = append(&m, argv[wp->args_at + i]);
  for (size_t i = 0; ok && env[i]; i++) ok = append(&m, env[i]);
  size_t len = m.len;
  char *msg = m.buf;
  ssize_t w = ok ? write(s->ctl, msg, len) : -1; /* the pipe holds MSG_MAX: one write, no wait */
  free(msg);
  if (w != (ssize_t)len) {
    CDDP_INFO(CDDP_SUB_RUN, "the warm spare for slot %d could not be handed its start (%s); starting afresh", slot,
              w < 0 && ok ? strerror(errno) : "arguments and environment too large");
    drop(s, 1);
    return 0;
  }
  close(s->ctl);
  if (cpus) sched_setaffinity(s->pid, sizeof *cpus, cpus);
  if (wp->nice > 0) { /* to the agent's own nice, which a fresh worker inherits */
    errno = 0;
    int own = getpriority(PRIO_PROCESS, 0);
    renice_all(s->pid, errno ? 0 : own);
  }
  CDDP_INFO(CDDP_SUB_RUN, "slot %d: the warm spare (pid %d, up %.1f s) takes over", slot, (int)s->pid,
            (double)(cddp__now_ns() - s->born_ns) / 1e9);
  *pid = s->pid;
  fd[0] = s->fd[0], fd[1] = s->fd[1];
  *s = (spare_t){.ctl = -1, .fd = {-1, -1}};
  if (wp->due == UINT64_MAX) wp->due = cddp__deadline_ms(wp->delay_ms); /* a spare for the one after */
  return 1;
}

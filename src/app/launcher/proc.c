/* proc.c - forks one worker process the way every worker starts, fresh or warm. */
#include "launcher/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/check.h"
#include "common/io.h"

static void child(int out[2], int err[2], int keep_fd, char *const *argv, char **env, pid_t parent) {
  sigset_t none;
  sigemptyset(&none);
  int agents[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP}; /* the agent's handlers (launcher/sigguard.h) are not ours */
  for (size_t i = 0; i < CDDP_ARRAY_LEN(agents); i++) signal(agents[i], SIG_DFL);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL);
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(137); /* the agent died before prctl */
  prctl(PR_SET_PTRACER, parent, 0, 0, 0); /* Yama scope 1: the watchdog's py-spy, the agent's child, may read us */
  dup2(out[1], STDOUT_FILENO);
  dup2(err[1], STDERR_FILENO);
  if (keep_fd >= 0) {
    if (keep_fd != 3) dup2(keep_fd, 3);
    else fcntl(3, F_SETFD, 0); /* dup2 onto itself would leave it close-on-exec */
  }
  close_range(keep_fd >= 0 ? 4 : 3, ~0u, 0); /* store sockets, listening ports, other workers' pipes */
  execvpe(argv[0], argv, env);
  char msg[512];
  int n = snprintf(msg, sizeof msg, "cddp run: cannot run '%s': %s\n", argv[0], strerror(errno));
  (void)cddp__write_all(STDERR_FILENO, msg, (size_t)n);
  _exit(127);
}

cddp_result_t cddp__proc_spawn(char *const *argv, char **env, const cpu_set_t *cpus, int keep_fd, int nice,
                               const char *what, pid_t *pid, int fd[2]) {
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  cddp_result_t ret = CDDP_OK;
  pid_t self = getpid();
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    ret = cddp__fail_errno(CDDP_SYSTEM, "pipe for %s", what);
    goto fail;
  }
  *pid = fork();
  if (*pid == 0) {
    if (cpus) sched_setaffinity(0, sizeof *cpus, cpus); /* before exec (cpubind.c says why) */
    if (nice > 0) setpriority(PRIO_PROCESS, 0, nice);
    child(out, err, keep_fd, argv, env, self);
  }
  if (*pid < 0) {
    ret = cddp__fail_errno(CDDP_SYSTEM, "fork for %s", what);
    goto fail;
  }
  setpgid(*pid, *pid); /* also here, so kill(-pid) works at once */
  close(out[1]);
  close(err[1]);
  fd[0] = out[0];
  fd[1] = err[0];
  fcntl(fd[0], F_SETFL, O_NONBLOCK);
  fcntl(fd[1], F_SETFL, O_NONBLOCK);
  return CDDP_OK;
fail:
  for (int k = 0; k < 2; k++) {
    if (out[k] >= 0) close(out[k]);
    if (err[k] >= 0) close(err[k]);
  }
  return ret;
}

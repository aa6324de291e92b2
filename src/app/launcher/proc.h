/* proc.h - forks one worker process the way every worker starts, fresh or warm. */
#ifndef CDDP_LAUNCHER_PROC_H
#define CDDP_LAUNCHER_PROC_H
#include <sched.h>
#include <sys/types.h>
#include "cddp/cddp.h"

/* Forks and execs argv with env: its own process group, PR_SET_PDEATHSIG(SIGKILL), the
 * agent's signal handlers and mask reset, stdout/stderr on new pipes whose non-blocking
 * read ends come back in fd[0] / fd[1]. cpus: its CPU share (NULL: the agent's). keep_fd >= 0
 * is passed as fd 3; every other fd of the agent is closed. nice > 0: it runs at that nice
 * value. what: "rank 3", for messages. */
cddp_result_t cddp__proc_spawn(char *const *argv, char **env, const cpu_set_t *cpus, int keep_fd, int nice,
                               const char *what, pid_t *pid, int fd[2]);

#endif /* CDDP_LAUNCHER_PROC_H */

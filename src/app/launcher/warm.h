/* warm.h - warm spare workers: for a Python program, one interpreter per local slot started
 * ahead of need, its heavy imports (torch) done, that becomes the slot's next worker when the
 * workers restart. A restart then costs the program's own start, not the interpreter's and
 * torch's import (docs/launcher.md, "Warm restarts"). */
#ifndef CDDP_LAUNCHER_WARM_H
#define CDDP_LAUNCHER_WARM_H
#include <sched.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct cddp__warm cddp__warm_t;

/* A pool for argv, spares started delay_ms after each round starts. argv must be a Python
 * interpreter running a script or -m with only flags a spare can reproduce (-u -B -s -E -I -q).
 * A spare preloads preload when given ("" = nothing: no spares), else torch,torch.distributed,torch._dynamo
 * when the script imports torch. NULL: no spares for this program (why says so). */
cddp__warm_t *cddp__warm_new(char *const *argv, const char *preload, int delay_ms, char *why, size_t why_size);
/* Kills and reaps the spares. NULL is fine. */
void cddp__warm_free(cddp__warm_t *wp);
/* A round started n workers with env[i] for slot i (cpu_bind: each on its share, as
 * workers.c binds them): the slots without a spare get one at the deadline. */
void cddp__warm_plan(cddp__warm_t *wp, int n, char **const *env, int cpu_bind);
/* The monotonic time (ns) of the next start of spares, UINT64_MAX when none is due. */
uint64_t cddp__warm_due(const cddp__warm_t *wp);
/* Starts the planned spares when due (call when cddp__warm_due has passed). */
void cddp__warm_tick(cddp__warm_t *wp);
/* Slot's spare, when it has a live one, becomes the worker running argv (the program, as a
 * fresh worker would run it) with env, on cpus: 1 with its pid and the read ends of its
 * stdout/stderr; 0 when there is none (start a fresh one). */
int cddp__warm_take(cddp__warm_t *wp, int slot, char *const *argv, char **env, const cpu_set_t *cpus, pid_t *pid,
                    int fd[2]);

#endif /* CDDP_LAUNCHER_WARM_H */

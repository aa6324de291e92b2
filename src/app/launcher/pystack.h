/* pystack.h - a Python worker's stack, every thread, from py-spy; and where its own code is. */
#ifndef CDDP_LAUNCHER_PYSTACK_H
#define CDDP_LAUNCHER_PYSTACK_H

#include <stddef.h>
#include <sys/types.h>

/* Where a Python process is, read from its py-spy dump. */
typedef struct cddp__pywhere {
  char user[160]; /* the innermost frame of the user's own code: "sleepy_data_loader (train.py:7)"; "": none */
  char coll[48];  /* the innermost torch.distributed function on the main thread ("all_reduce"); "": none */
  int setup;      /* the main thread is inside the process group's set-up (init_process_group, new_group,
                     a rendezvous): waiting for ranks that have not joined yet, not in a collective */
  int importing;  /* the main thread is inside an import (a rank still loading torch) */
} cddp__pywhere_t;

/* Writes every thread's Python stack of pid to path with py-spy (CDDP_PY_SPY, else `py-spy` on
 * PATH; --nonblocking: a stopped process is read too, and nothing is paused), bounded by a 10 s
 * timeout. Blocks. Returns 0 when py-spy wrote a stack, -1 when it is absent, refused (ptrace) or
 * pid is no Python process. */
int cddp__pystack_take(pid_t pid, const char *path);

/* Reads a dump that cddp__pystack_take wrote (hostile text: at most 256 KiB, long lines cut) and
 * fills where from its main thread. Returns 0, or -1 when the file holds no Python stack or its
 * main thread has no frame (torn: read while it changed; take it again). */
int cddp__pystack_where(const char *path, cddp__pywhere_t *where);

#endif /* CDDP_LAUNCHER_PYSTACK_H */

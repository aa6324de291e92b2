/* run_lock.h - one run per run folder: rank 0 holds an exclusive lock on RUN_DIR/run.lock for
 * its whole life, so a second run given the same --name is refused instead of mixing its
 * metrics and checkpoints into the first one's. */
#ifndef CDDP_TRAIN_RUN_LOCK_H
#define CDDP_TRAIN_RUN_LOCK_H

#include <stddef.h>

/* Takes the lock on dir/run.lock (created if absent; dir must exist) and records "host pid" in
 * it. Waits up to wait_ms for a holder to go (a restarted worker whose predecessor is still
 * exiting), 0 = not at all. Returns the open descriptor (kept open, close-on-exec, until the
 * process exits: the kernel drops the lock then, even on SIGKILL). -1 when another process holds
 * it: holder then says who ("host vm, pid 123"). -2 on a system error: holder says what failed. */
int cddp__run_lock_take(const char *dir, int wait_ms, char *holder, size_t cap);

#endif

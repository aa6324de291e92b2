/* hang.h - a worker that makes no progress while its peers wait, found from its flight page. */
#ifndef CDDP_LAUNCHER_HANG_H
#define CDDP_LAUNCHER_HANG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cddp/cddp.h"
#include "comm/flight.h"

/* One worker's flight page (comm/flight.h) as its agent reads it. */
typedef struct cddp__progress {
  const cddp__flight_page_t *page; /* NULL: none made; a page whose magic is unset: the program
                                      has not run a collective of libcddp (nothing to judge) */
  uint64_t seq, done, beat;        /* as last read */
  uint64_t since_ns;               /* when one of them last changed (monotonic) */
} cddp__progress_t;

/* Where worker `rank` of an agent whose private folder is dir keeps its flight page. */
void cddp__flight_file_path(const char *dir, int rank, char *buf, size_t size);

/* Makes path (a zeroed page the worker maps through CDDP_FLIGHT_FILE) and maps it read-only. */
cddp_result_t cddp__progress_open(cddp__progress_t *p, const char *path, uint64_t now_ns);
void cddp__progress_close(cddp__progress_t *p);

/* Reads every page, then names a hung worker: one whose page has not moved for timeout_ms and
 * that is stopped (SIGSTOP, a debugger: /proc state T), or outside any collective while a local
 * peer waits, stalled, inside one, or while a rank on another node does (remote_since: since
 * when, monotonic, some rank of another node has been inside the same collective, from the
 * nodes' status records; 0: none). pid[i] 0: exited (skipped). Returns its index and why ("no
 * progress for 5.0 s in allreduce #12 (...), stopped"), or -1. */
int cddp__hang_find(cddp__progress_t *p, const pid_t *pid, int n, uint64_t now_ns, int timeout_ms,
                    uint64_t remote_since, char *why, size_t size);

#endif /* CDDP_LAUNCHER_HANG_H */

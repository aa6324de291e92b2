/* durable.h - replacing a file so that a crash leaves the old or the new one, whole (Redis's
 * rdbSave + fsyncFileDir): a temporary in the same folder, fsync, rename, fsync the folder. */
#ifndef CDDP_COMMON_DURABLE_H
#define CDDP_COMMON_DURABLE_H

#include <stddef.h>
#include <sys/types.h>

#include "cddp/cddp.h"

/* One replacement in progress. Caller-owned; filled by an open, released by commit or abort. */
typedef struct cddp__durable {
  int fd;          /* the temporary, -1 once released */
  char *path;      /* the target */
  char *tmp;       /* the temporary beside it */
  char *buf;       /* small writes gather here */
  size_t used;
} cddp__durable_t;

/* Starts replacing path: creates the temporary "PATH.tmp.PID.N" (unique in the process and on
 * the host) with mode (the umask applies). Every error names path. Blocks (file system). */
cddp_result_t cddp__durable_open(cddp__durable_t *d, const char *path, mode_t mode);
/* The same with the temporary "PATH.tmp", created exclusively: it is also a lock, one writer at
 * a time. When another writer holds it, fails with errno EEXIST; a temporary older than
 * stale_s seconds (stale_s > 0) belongs to a writer that died and is taken over. */
cddp_result_t cddp__durable_open_locked(cddp__durable_t *d, const char *path, mode_t mode, int stale_s);
/* Appends bytes (buffered). On error the handle stays open: commit or abort it. */
cddp_result_t cddp__durable_write(cddp__durable_t *d, const void *p, size_t n);
cddp_result_t cddp__durable_printf(cddp__durable_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Flushes, fsyncs and closes the temporary, renames it over path and fsyncs path's folder.
 * Always releases d; on any error the temporary is gone and the error names path (the old
 * file, if any, is untouched unless only the folder's fsync failed). */
cddp_result_t cddp__durable_commit(cddp__durable_t *d);
/* Gives up: closes and removes the temporary, releases d. Harmless on a released handle. */
void cddp__durable_abort(cddp__durable_t *d);

/* open + write + commit of one buffer. */
cddp_result_t cddp__durable_save(const char *path, mode_t mode, const void *p, size_t n);

/* fsyncs a folder, so that the entries created, renamed or removed in it survive a crash. */
cddp_result_t cddp__fsync_dir(const char *dir);

#endif /* CDDP_COMMON_DURABLE_H */

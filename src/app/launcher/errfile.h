/* errfile.h - torch's per-worker error file (TORCHELASTIC_ERROR_FILE): where, and what it says. */
#ifndef CDDP_LAUNCHER_ERRFILE_H
#define CDDP_LAUNCHER_ERRFILE_H

#include <stddef.h>
#include <stdint.h>

/* Where worker `rank` of an agent whose error-file folder is dir writes its error file. */
void cddp__errfile_path(const char *dir, int rank, char *buf, size_t size);

/* Reads the error file that torch.distributed.elastic's @record (or any program) wrote at
 * path: {"message": {"message": "ValueError: boom", "extraInfo": {...}}} or {"message":
 * "..."}. out gets the message's first line (JSON escapes decoded, at most size - 1 bytes);
 * *mtime_ns (may be NULL) when the file was written, which orders failures. Returns 1 when
 * a message was found, 0 when the file is absent, empty or holds none. Never blocks on
 * anything but the local file. */
int cddp__errfile_read(const char *path, char *out, size_t size, uint64_t *mtime_ns);
/* The same over the file's bytes (buf need not be NUL-terminated); size >= 1. */
int cddp__errfile_parse(const char *buf, size_t len, char *out, size_t size);

#endif /* CDDP_LAUNCHER_ERRFILE_H */

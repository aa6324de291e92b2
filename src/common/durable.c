/* durable.c - every file cddp replaces goes through here: temporary in the same folder,
 * written, fsynced, renamed over the target, the folder fsynced; on error the temporary goes. */
#include "common/durable.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/io.h"

#define BUF_CAP ((size_t)64 << 10)

static unsigned long tmp_seq; /* makes the temporaries of one process's threads distinct */

static void release(cddp__durable_t *d, int remove_tmp) {
  if (d->fd >= 0) close(d->fd);
  if (remove_tmp && d->tmp) unlink(d->tmp);
  free(d->path), free(d->tmp), free(d->buf);
  d->fd = -1, d->path = d->tmp = d->buf = NULL, d->used = 0;
}

static int open_excl(const char *tmp, mode_t mode) {
  int fd;
  do fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  while (fd < 0 && errno == EINTR);
  return fd;
}

/* locked < 0: a unique temporary; else "PATH.tmp" as a lock, taken over after stale_s. */
static cddp_result_t start(cddp__durable_t *d, const char *path, mode_t mode, int locked, int stale_s) {
  memset(d, 0, sizeof *d);
  d->fd = -1;
  size_t cap = strlen(path) + 48;
  d->path = strdup(path), d->tmp = malloc(cap), d->buf = malloc(BUF_CAP);
  if (!d->path || !d->tmp || !d->buf) {
    release(d, 0);
    return cddp__fail(CDDP_SYSTEM, "cannot write %s: out of memory", path);
  }
  if (locked) {
    snprintf(d->tmp, cap, "%s.tmp", path);
    d->fd = open_excl(d->tmp, mode);
    struct stat st;
    if (d->fd < 0 && errno == EEXIST && stale_s > 0 && lstat(d->tmp, &st) == 0 &&
        time(NULL) - st.st_mtime > stale_s && unlink(d->tmp) == 0)
      d->fd = open_excl(d->tmp, mode);
  } else {
    snprintf(d->tmp, cap, "%s.tmp.%ld.%lu", path, (long)getpid(), __atomic_fetch_add(&tmp_seq, 1, __ATOMIC_RELAXED));
    d->fd = open_excl(d->tmp, mode);
  }
  if (d->fd < 0) {
    cddp_result_t r = cddp__fail_errno(CDDP_SYSTEM, "cannot write %s: create %s", path, d->tmp);
    int e = errno;
    release(d, 0); /* not ours to remove */
    errno = e;
    return r;
  }
  return CDDP_OK;
}

cddp_result_t cddp__durable_open(cddp__durable_t *d, const char *path, mode_t mode) {
  return start(d, path, mode, 0, 0);
}

cddp_result_t cddp__durable_open_locked(cddp__durable_t *d, const char *path, mode_t mode, int stale_s) {
  return start(d, path, mode, 1, stale_s);
}

static cddp_result_t flush(cddp__durable_t *d) {
  if (d->used && cddp__write_all(d->fd, d->buf, d->used) != 0)
    return cddp__fail_errno(CDDP_SYSTEM, "cannot write %s: write %s", d->path, d->tmp);
  d->used = 0;
  return CDDP_OK;
}

cddp_result_t cddp__durable_write(cddp__durable_t *d, const void *p, size_t n) {
  if (d->fd < 0) return cddp__fail(CDDP_INTERNAL, "durable write to a released handle");
  if (d->used + n <= BUF_CAP) {
    memcpy(d->buf + d->used, p, n);
    d->used += n;
    return CDDP_OK;
  }
  CDDP_CHECK(flush(d));
  if (n < BUF_CAP) {
    memcpy(d->buf, p, n);
    d->used = n;
    return CDDP_OK;
  }
  if (cddp__write_all(d->fd, p, n) != 0)
    return cddp__fail_errno(CDDP_SYSTEM, "cannot write %s: write %s", d->path, d->tmp);
  return CDDP_OK;
}

cddp_result_t cddp__durable_printf(cddp__durable_t *d, const char *fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return cddp__fail(CDDP_INTERNAL, "cannot write %s: bad format", d->path);
  if ((size_t)n < sizeof small) return cddp__durable_write(d, small, (size_t)n);
  char *big = malloc((size_t)n + 1);
  if (!big) return cddp__fail(CDDP_SYSTEM, "cannot write %s: out of memory", d->path);
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  cddp_result_t r = cddp__durable_write(d, big, (size_t)n);
  free(big);
  return r;
}

/* The folder of path ("." for a bare name). */
static void dir_of(const char *path, char *out, size_t cap) {
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(out, cap, ".");
  else if (slash == path) snprintf(out, cap, "/");
  else snprintf(out, cap, "%.*s", (int)(slash - path), path);
}

cddp_result_t cddp__durable_commit(cddp__durable_t *d) {
  cddp_result_t r = CDDP_OK;
  if (d->fd < 0) return cddp__fail(CDDP_INTERNAL, "durable commit of a released handle");
  CDDP_CHECK_GOTO(flush(d), r, fail);
  int rc;
  do rc = fsync(d->fd);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) { r = cddp__fail_errno(CDDP_SYSTEM, "cannot write %s: fsync %s", d->path, d->tmp); goto fail; }
  rc = close(d->fd);
  d->fd = -1;
  if (rc != 0 && errno != EINTR) {
    r = cddp__fail_errno(CDDP_SYSTEM, "cannot write %s: close %s", d->path, d->tmp);
    goto fail;
  }
  if (rename(d->tmp, d->path) != 0) {
    r = cddp__fail_errno(CDDP_SYSTEM, "cannot write %s: rename %s over it", d->path, d->tmp);
    goto fail;
  }
  char dir[PATH_MAX];
  dir_of(d->path, dir, sizeof dir);
  r = cddp__fsync_dir(dir);
  if (r != CDDP_OK) r = cddp__fail(r, "cannot write %s: %s", d->path, cddp_last_error());
  release(d, 0);
  return r;
fail:
  release(d, 1);
  return r;
}

void cddp__durable_abort(cddp__durable_t *d) {
  if (d->path) release(d, 1);
}

cddp_result_t cddp__durable_save(const char *path, mode_t mode, const void *p, size_t n) {
  cddp__durable_t d;
  CDDP_CHECK(cddp__durable_open(&d, path, mode));
  cddp_result_t r = cddp__durable_write(&d, p, n);
  if (r != CDDP_OK) {
    cddp__durable_abort(&d);
    return r;
  }
  return cddp__durable_commit(&d);
}

cddp_result_t cddp__fsync_dir(const char *dir) {
  int fd;
  do fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) return cddp__fail_errno(CDDP_SYSTEM, "open %s (to fsync the directory)", dir);
  int rc;
  do rc = fsync(fd);
  while (rc != 0 && errno == EINTR);
  cddp_result_t r = rc == 0 ? CDDP_OK : cddp__fail_errno(CDDP_SYSTEM, "fsync %s", dir);
  close(fd);
  return r;
}

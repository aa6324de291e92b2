/* io.c - write_all / read_all on files and pipes over one loop that retries EINTR (sockets,
 * with their deadlines, are common/sock.c's). */
#include "common/io.h"

#include "common/log.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PIECE ((size_t)1 << 30) /* one call moves at most this much (Linux caps a write near 2 GiB) */

enum { OP_WRITE, OP_READ };

/* Moves up to len bytes; stops early only at end of file (reads) and on errors. */
static ssize_t xfer(int fd, void *buf, size_t len, int op) {
  char *p = buf;
  size_t done = 0;
  while (done < len) {
    size_t n = len - done < PIECE ? len - done : PIECE;
    ssize_t k;
    k = op == OP_WRITE ? write(fd, p + done, n) : read(fd, p + done, n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return -1;
    if (k == 0) {
      if (op == OP_READ) break; /* end of file */
      errno = EIO;
      return -1;
    }
    done += (size_t)k;
  }
  return (ssize_t)done;
}

int cddp__write_all(int fd, const void *buf, size_t len) {
  return xfer(fd, (void *)buf, len, OP_WRITE) < 0 ? -1 : 0;
}

ssize_t cddp__read_all(int fd, void *buf, size_t len) { return xfer(fd, buf, len, OP_READ); }

ssize_t cddp__read_small(const char *path, char *buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || size == 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  ssize_t n = cddp__read_all(fd, buf, size - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  return n;
}

char cddp__proc_state(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  if (cddp__read_small(path, buf, sizeof buf) < 0) return 0;
  const char *close_paren = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
  return close_paren && close_paren[1] == ' ' ? close_paren[2] : 0;
}

static int stopped_letter(char c) { return c == 'T' || c == 't'; }

int cddp__proc_stopped(pid_t pid) {
  if (stopped_letter(cddp__proc_state(pid))) return 1;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d) return 0;
  int stopped = 0;
  struct dirent *e;
  for (int n = 0; !stopped && n < 4096 && (e = readdir(d)); n++) { /* bounded: a worker has tens */
    char *end;
    long tid = strtol(e->d_name, &end, 10);
    if (*end || tid <= 0 || tid == pid) continue;
    char stat[96], buf[512];
    snprintf(stat, sizeof stat, "/proc/%d/task/%ld/stat", (int)pid, tid);
    const char *close_paren = cddp__read_small(stat, buf, sizeof buf) > 0 ? strrchr(buf, ')') : NULL;
    stopped = close_paren && close_paren[1] == ' ' && stopped_letter(close_paren[2]);
  }
  closedir(d);
  return stopped;
}

int cddp__open_regular(const char *path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    close(fd);
    errno = EINVAL, fd = -1;
  }
  return fd;
}

void cddp__printable(char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < ' ' || (unsigned char)*s >= 127) *s = '?';
}

const char *cddp__tmp_base(void) {
  static int warned;
  const char *t = getenv("TMPDIR");
  if (!t || !*t) return "/tmp";
  struct stat st;
  const char *why = NULL;
  if (stat(t, &st) != 0) why = strerror(errno);
  else if (!S_ISDIR(st.st_mode)) why = "not a folder";
  else if (access(t, W_OK | X_OK) != 0) why = strerror(errno);
  if (!why) return t;
  if (!__atomic_exchange_n(&warned, 1, __ATOMIC_ACQ_REL))
    CDDP_WARN("TMPDIR=%.200s cannot hold temporary folders (%s): using /tmp", t, why);
  return "/tmp";
}

/* run_lock.c - the run folder's lock: flock on RUN_DIR/run.lock, holder recorded as "host pid". */
#include "trainer/run_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

/* The holder's line, read back with care: another process wrote it (or is writing it now). */
static void read_holder(int fd, char *holder, size_t cap) {
  char buf[160];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  char host[128];
  long pid = 0;
  buf[n > 0 ? n : 0] = 0;
  if (n > 0 && sscanf(buf, "%127[A-Za-z0-9._-] %ld", host, &pid) == 2 && pid > 0)
    snprintf(holder, cap, "host %s, pid %ld", host, pid);
  else
    snprintf(holder, cap, "a process that has not yet written its name");
}

int cddp__run_lock_take(const char *dir, int wait_ms, char *holder, size_t cap) {
  char path[700];
  snprintf(path, sizeof path, "%s/run.lock", dir);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    snprintf(holder, cap, "cannot open %s: %s", path, strerror(errno));
    return -2;
  }
  for (int waited = 0;; waited += 100) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) break;
    if (errno != EWOULDBLOCK && errno != EINTR) {
      snprintf(holder, cap, "cannot lock %s: %s", path, strerror(errno));
      close(fd);
      return -2;
    }
    if (waited >= wait_ms) {
      read_holder(fd, holder, cap);
      close(fd);
      return -1;
    }
    nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
  }
  char host[128] = "?", line[192];
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
  host[sizeof host - 1] = 0;
  int len = snprintf(line, sizeof line, "%s %ld\n", host, (long)getpid());
  /* a lost name only makes a refused run's line vaguer: the lock itself holds */
  if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)len, 0) != len) (void)0;
  return fd;
}

/* slurm_token.c - a Slurm job's token from a private file on the home folder the job's nodes
 * share. Slurm hands the tasks of `srun cddp run` nothing secret (the job id is public), so the
 * secret lives where only this user can read it; the first node to look makes it. Every name
 * below is opened relative to a checked folder and never through a link. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <time.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/check.h"
#include "common/envp.h"
#include "common/log.h"
#include "job/store_reach.h"
#include "launcher/slurm_token.h"

#define TOKEN_DIR ".cddp/slurm-tokens"
/* a job's file left by a job with nobody to remove it (one task per rank) goes after this long */
#define STALE_S (30 * 24 * 3600)

/* v when it is a job id (digits only, short), else NULL: it becomes part of a file name */
static const char *job_id(const char *v) {
  return v && *v && strlen(v) <= 20 && strspn(v, "0123456789") == strlen(v) ? v : NULL;
}

/* the user's own folder, private: made 0700 when absent; one that others can read is refused */
static cddp_result_t private_dir(const char *path, int *fd) {
  if (mkdir(path, 0700) != 0 && errno != EEXIST) return cddp__fail_errno(CDDP_SYSTEM, "cannot make %s", path);
  *fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (*fd < 0) return cddp__fail_errno(CDDP_SYSTEM, "cannot open the folder %s", path);
  struct stat st;
  if (fstat(*fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 077)) {
    close(*fd);
    *fd = -1;
    return cddp__fail(CDDP_INVALID_ARG, "%s is not a private folder of this user (mode %03o, owner %d): "
                      "chmod 700 it", path, (unsigned)(st.st_mode & 0777), (int)st.st_uid);
  }
  return CDDP_OK;
}

/* 1: token read from dir/name; 0: no such file; a file that is not a private token: the error */
static cddp_result_t read_token(int dir, const char *path, const char *name, char *token, size_t size, int *found) {
  *found = 0;
  int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0 && errno == ENOENT) return CDDP_OK;
  if (fd < 0) return cddp__fail_errno(CDDP_INVALID_ARG, "token file %s", path);
  struct stat st;
  char buf[80];
  ssize_t n = -1;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 077))
    n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n < 0) return cddp__fail(CDDP_INVALID_ARG, "token file %s is not a private file of this user: remove it", path);
  while (n > 0 && buf[n - 1] == '\n') n--;
  buf[n] = '\0';
  if (n < 16 || (size_t)n >= size || strspn(buf, "0123456789abcdef") != (size_t)n)
    return cddp__fail(CDDP_INVALID_ARG, "token file %s holds no token (%zd bytes): remove it", path, n);
  memcpy(token, buf, (size_t)n + 1);
  *found = 1;
  return CDDP_OK;
}

/* removes the folder's files older than STALE_S (jobs long over whose file nobody removed) */
static void prune(int dir) {
  int fd = dup(dir);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    if (fd >= 0) close(fd);
    return;
  }
  time_t now = time(NULL);
  struct stat st;
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
        fstatat(dir, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) && now - st.st_mtime > STALE_S)
      unlinkat(dir, e->d_name, 0);
  closedir(d);
}

/* writes a fresh token to a file of our own, then links it in under name: whoever links first
 * wins, and the others read the winner's whole file (link(2) never shows half a file) */
static cddp_result_t publish(int dir, const char *path, const char *name) {
  char fresh[40], tmp[224], line[48];
  prune(dir);
  if (cddp__job_token_random(fresh, sizeof fresh) != 0) return cddp__fail_errno(CDDP_SYSTEM, "no random token");
  snprintf(tmp, sizeof tmp, ".%s.%ld.%.8s", name, (long)getpid(), fresh + 24);
  int fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return cddp__fail_errno(CDDP_SYSTEM, "cannot make a token file next to %s", path);
  int len = snprintf(line, sizeof line, "%s\n", fresh);
  int ok = write(fd, line, (size_t)len) == len && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  /* a link over NFS may say it failed when it did not: the caller reads the name back either way */
  if (ok) (void)linkat(dir, tmp, dir, name, 0);
  int err = errno;
  unlinkat(dir, tmp, 0);
  errno = err;
  return ok ? CDDP_OK : cddp__fail_errno(CDDP_SYSTEM, "cannot write a token file next to %s", path);
}

static cddp_result_t find_or_make(char **envp, char *token, size_t size, char *path, size_t path_size) {
  const char *home = cddp__envp_get(envp, "HOME");
  const char *job = job_id(cddp__envp_get(envp, "SLURM_JOB_ID"));
  if (!job) job = job_id(cddp__envp_get(envp, "SLURM_JOBID"));
  if (!job) return cddp__fail(CDDP_INVALID_ARG, "the Slurm job's token: SLURM_JOB_ID is not a job id");
  if (!home || home[0] != '/')
    return cddp__fail(CDDP_INVALID_ARG, "the Slurm job's token: HOME is not set to a folder");
  char name[160], top[4096], dir_path[4096];
  /* the job id alone: SLURM_CLUSTER_NAME is not in every task's environment (an `srun --jobid`
   * from outside the allocation lacks it), and every agent of the job must name the same file */
  snprintf(name, sizeof name, "job-%s", job);
  if ((size_t)snprintf(top, sizeof top, "%s/.cddp", home) >= sizeof top ||
      (size_t)snprintf(dir_path, sizeof dir_path, "%s/%s", home, TOKEN_DIR) >= sizeof dir_path ||
      (size_t)snprintf(path, path_size, "%s/%s", dir_path, name) >= path_size)
    return cddp__fail(CDDP_INVALID_ARG, "the Slurm job's token: HOME is too long");
  if (mkdir(top, 0700) != 0 && errno != EEXIST)
    return cddp__fail_errno(CDDP_SYSTEM, "the Slurm job's token: cannot make %s", top);
  int dir = -1, found = 0;
  cddp_result_t r = private_dir(dir_path, &dir);
  for (int tries = 0; r == CDDP_OK && !found && tries < 2; tries++) {
    r = read_token(dir, path, name, token, size, &found);
    if (r == CDDP_OK && !found && tries == 0) r = publish(dir, path, name);
  }
  if (dir >= 0) close(dir);
  if (r == CDDP_OK && !found) r = cddp__fail(CDDP_SYSTEM, "the Slurm job's token: %s could not be made", path);
  return r;
}

cddp_result_t cddp__slurm_token(char **envp, char *token, size_t size, char *path, size_t path_size) {
  token[0] = path[0] = '\0';
  cddp_result_t r = find_or_make(envp, token, size, path, path_size);
  if (r == CDDP_OK) return r;
  path[0] = token[0] = '\0';
  char why[600]; /* every refusal says the way around it */
  snprintf(why, sizeof why, "%s", cddp_last_error());
  return cddp__fail(r, "%s (or give the job a token: CDDP_TOKEN or CDDP_TOKEN_FILE on every node)", why);
}

void cddp__slurm_token_remove(const char *path) {
  if (path && path[0] && unlink(path) != 0 && errno != ENOENT)
    CDDP_WARN("cannot remove the job's token file %s: %s", path, strerror(errno));
}

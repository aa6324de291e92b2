/* test_durable.c - the durable-file helper: the target replaced whole, the temporary gone after
 * success and after every failure, errors that name the path. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/check.h"
#include "common/durable.h"
#include "common/io.h"
#include "test.h"

static char root[64];

/* A fresh directory in the test's own folder (test.h: removed, read-only parts too, at its end). */
static const char *fresh_dir(void) {
  cddp_test_path(root, sizeof root, "d.XXXXXX");
  if (!mkdtemp(root)) TEST_FAIL("mkdtemp %s: %s", root, strerror(errno));
  return root;
}

/* How many entries of dir (besides . and ..) there are. */
static int entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) TEST_FAIL("opendir %s: %s", dir, strerror(errno));
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static char *slurp(const char *path, size_t *len) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) TEST_FAIL("open %s: %s", path, strerror(errno));
  static char buf[1 << 20];
  ssize_t n = cddp__read_all(fd, buf, sizeof buf);
  close(fd);
  CHECK(n >= 0);
  *len = (size_t)n;
  return buf;
}

TEST(durable_save_replaces_the_target_and_leaves_no_temporary) {
  const char *dir = fresh_dir();
  char path[128];
  snprintf(path, sizeof path, "%s/file", dir);
  CHECK_OK(cddp__durable_save(path, 0644, "old contents\n", 13));
  CHECK_OK(cddp__durable_save(path, 0644, "new\n", 4));
  size_t n;
  char *got = slurp(path, &n);
  CHECK_EQ(n, 4);
  CHECK(memcmp(got, "new\n", 4) == 0);
  CHECK_EQ(entries(dir), 1); /* the temporaries are gone */
  struct stat st;
  CHECK(stat(path, &st) == 0);
  CHECK_EQ(st.st_mode & 0777, 0644 & ~(unsigned)umask(022));
}

TEST(durable_streams_small_and_large_writes_in_order) {
  const char *dir = fresh_dir();
  char path[128];
  snprintf(path, sizeof path, "%s/big", dir);
  size_t big = 300000;
  char *b = malloc(big);
  for (size_t i = 0; i < big; i++) b[i] = (char)(i * 7);
  cddp__durable_t d;
  CHECK_OK(cddp__durable_open(&d, path, 0600));
  CHECK_OK(cddp__durable_printf(&d, "head %d\n", 42));
  CHECK_OK(cddp__durable_write(&d, b, big));
  CHECK_OK(cddp__durable_write(&d, "tail", 4));
  CHECK_EQ(entries(dir), 1); /* only the temporary: the target appears at commit */
  CHECK(access(path, F_OK) != 0);
  CHECK_OK(cddp__durable_commit(&d));
  size_t n;
  char *got = slurp(path, &n);
  CHECK_EQ(n, 8 + big + 4);
  CHECK(memcmp(got, "head 42\n", 8) == 0 && memcmp(got + 8, b, big) == 0 && memcmp(got + 8 + big, "tail", 4) == 0);
  CHECK_EQ(entries(dir), 1);
  free(b);
}

TEST(durable_abort_keeps_the_old_file_and_removes_the_temporary) {
  const char *dir = fresh_dir();
  char path[128];
  snprintf(path, sizeof path, "%s/file", dir);
  CHECK_OK(cddp__durable_save(path, 0644, "old", 3));
  cddp__durable_t d;
  CHECK_OK(cddp__durable_open(&d, path, 0644));
  CHECK_OK(cddp__durable_write(&d, "half", 4));
  CHECK_EQ(entries(dir), 2);
  cddp__durable_abort(&d);
  cddp__durable_abort(&d); /* harmless twice */
  CHECK_EQ(entries(dir), 1);
  size_t n;
  char *got = slurp(path, &n);
  CHECK(n == 3 && memcmp(got, "old", 3) == 0);
}

TEST(durable_failure_at_rename_removes_the_temporary_and_names_the_path) {
  const char *dir = fresh_dir();
  char path[128], inside[160];
  snprintf(path, sizeof path, "%s/target", dir);
  snprintf(inside, sizeof inside, "%s/keep", path);
  CHECK(mkdir(path, 0755) == 0); /* a non-empty directory: rename over it fails */
  CHECK(mkdir(inside, 0755) == 0);
  CHECK_RESULT(cddp__durable_save(path, 0644, "x", 1), CDDP_SYSTEM);
  CHECK(strstr(cddp_last_error(), path) != NULL);
  CHECK(strstr(cddp_last_error(), "rename") != NULL);
  CHECK_EQ(entries(dir), 1); /* the directory alone: no temporary left */
}

TEST(durable_failure_in_a_missing_folder_names_the_path) {
  const char *dir = fresh_dir();
  char path[128];
  snprintf(path, sizeof path, "%s/no/such/file", dir);
  CHECK_RESULT(cddp__durable_save(path, 0644, "x", 1), CDDP_SYSTEM);
  CHECK(strstr(cddp_last_error(), path) != NULL);
  CHECK(strstr(cddp_last_error(), "No such file") != NULL);
  CHECK_EQ(entries(dir), 0);
}

/* An unwritable folder: root writes anywhere, so a child drops to nobody first. */
TEST(durable_failure_in_an_unwritable_folder_leaves_nothing) {
  const char *dir = fresh_dir();
  char sub[128], path[160];
  snprintf(sub, sizeof sub, "%s/ro", dir);
  snprintf(path, sizeof path, "%s/file", sub);
  CHECK(mkdir(sub, 0755) == 0);
  CHECK(chmod(dir, 0755) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(3);
    if (cddp__durable_save(path, 0644, "x", 1) != CDDP_SYSTEM) _exit(1);
    if (!strstr(cddp_last_error(), path) || !strstr(cddp_last_error(), "Permission denied")) {
      fprintf(stderr, "error: %s\n", cddp_last_error());
      _exit(2);
    }
    _exit(0);
  }
  int st;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECK(WIFEXITED(st));
  CHECK_EQ(WEXITSTATUS(st), 0);
  CHECK_EQ(entries(sub), 0);
}

TEST(durable_locked_is_one_writer_at_a_time_and_takes_over_a_stale_one) {
  const char *dir = fresh_dir();
  char path[128], tmp[160];
  snprintf(path, sizeof path, "%s/cache", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  cddp__durable_t a, b;
  CHECK_OK(cddp__durable_open_locked(&a, path, 0600, 60));
  CHECK_RESULT(cddp__durable_open_locked(&b, path, 0600, 60), CDDP_SYSTEM);
  CHECK_EQ(errno, EEXIST);
  CHECK_OK(cddp__durable_write(&a, "A", 1));
  CHECK_OK(cddp__durable_commit(&a));
  CHECK_EQ(entries(dir), 1);
  /* a writer that died long ago left its temporary */
  int fd = open(tmp, O_WRONLY | O_CREAT, 0600);
  CHECK(fd >= 0);
  close(fd);
  struct timeval old[2] = {{.tv_sec = 1000}, {.tv_sec = 1000}};
  CHECK(utimes(tmp, old) == 0);
  CHECK_OK(cddp__durable_open_locked(&b, path, 0600, 60));
  CHECK_OK(cddp__durable_write(&b, "B", 1));
  CHECK_OK(cddp__durable_commit(&b));
  size_t n;
  char *got = slurp(path, &n);
  CHECK(n == 1 && got[0] == 'B');
  CHECK_EQ(entries(dir), 1);
}

TEST(fsync_dir_names_a_missing_folder) {
  CHECK_RESULT(cddp__fsync_dir("/nonexistent-cddp-dir"), CDDP_SYSTEM);
  CHECK(strstr(cddp_last_error(), "/nonexistent-cddp-dir") != NULL);
}

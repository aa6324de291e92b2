/* test_slurm_token.c - a Slurm job's token file (launcher/slurm_token.h): made once, private,
 * read back alike by every node; a folder or file others could read or swap is refused. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "launcher/slurm_token.h"
#include "test.h"

static char home[64], home_var[80];

/* an empty home for a job 4242 of cluster c1 */
static char **job_env(void) {
  cddp_test_path(home, sizeof home, "home.XXXXXX"); /* in the test's own folder (test.h) */
  if (!mkdtemp(home)) TEST_FAIL("mkdtemp %s: %s", home, strerror(errno));
  snprintf(home_var, sizeof home_var, "HOME=%s", home);
  static char *envp[] = {home_var, "SLURM_JOB_ID=4242", "SLURM_CLUSTER_NAME=c1", NULL};
  return envp;
}

static int mode_of(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 ? (int)(st.st_mode & 0777) : -1;
}

TEST(slurm_token_is_made_once_private_and_read_back_alike) {
  char **envp = job_env();
  char tok[64], tok2[64], path[4096], path2[4096], want[256];
  CHECK_OK(cddp__slurm_token(envp, tok, sizeof tok, path, sizeof path));
  snprintf(want, sizeof want, "%s/.cddp/slurm-tokens/job-4242", home);
  CHECK(strcmp(path, want) == 0);
  CHECK_EQ(strlen(tok), 32);
  CHECK_EQ(strspn(tok, "0123456789abcdef"), 32);
  CHECK_EQ(mode_of(path), 0600);
  snprintf(want, sizeof want, "%s/.cddp/slurm-tokens", home);
  CHECK_EQ(mode_of(want), 0700);
  CHECK_OK(cddp__slurm_token(envp, tok2, sizeof tok2, path2, sizeof path2)); /* another node */
  CHECK(strcmp(tok, tok2) == 0);
  CHECK(strcmp(path, path2) == 0);
  cddp__slurm_token_remove(path);
  CHECK_EQ(mode_of(path), -1);
  CHECK_OK(cddp__slurm_token(envp, tok2, sizeof tok2, path2, sizeof path2)); /* the next job's */
  CHECK(strcmp(tok, tok2) != 0);
}

TEST(slurm_token_refuses_a_folder_others_can_read) {
  char **envp = job_env();
  char tok[64], path[4096], dir[256];
  snprintf(dir, sizeof dir, "%s/.cddp", home);
  CHECK(mkdir(dir, 0700) == 0);
  snprintf(dir, sizeof dir, "%s/.cddp/slurm-tokens", home);
  CHECK(mkdir(dir, 0700) == 0 && chmod(dir, 0755) == 0);
  CHECK_RESULT(cddp__slurm_token(envp, tok, sizeof tok, path, sizeof path), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "not a private folder") != NULL);
  CHECK(tok[0] == '\0' && path[0] == '\0');
  CHECK(rmdir(dir) == 0 && symlink("/tmp", dir) == 0); /* a link in its place: not followed */
  CHECK(cddp__slurm_token(envp, tok, sizeof tok, path, sizeof path) != CDDP_OK);
  CHECK(tok[0] == '\0');
}

TEST(slurm_token_refuses_a_file_that_is_a_link_shared_or_not_a_token) {
  char **envp = job_env();
  char tok[64], path[4096], file[4096], tmp[4096];
  CHECK_OK(cddp__slurm_token(envp, tok, sizeof tok, path, sizeof path));
  snprintf(file, sizeof file, "%s", path);
  CHECK(chmod(file, 0644) == 0); /* readable by others: the secret may be out */
  CHECK_RESULT(cddp__slurm_token(envp, tok, sizeof tok, tmp, sizeof tmp), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "not a private file") != NULL);
  CHECK(unlink(file) == 0 && symlink("/etc/hostname", file) == 0);
  CHECK(cddp__slurm_token(envp, tok, sizeof tok, tmp, sizeof tmp) != CDDP_OK);
  CHECK(unlink(file) == 0);
  int fd = open(file, O_WRONLY | O_CREAT | O_EXCL, 0600);
  CHECK(fd >= 0 && write(fd, "not hex\n", 8) == 8 && close(fd) == 0);
  CHECK_RESULT(cddp__slurm_token(envp, tok, sizeof tok, tmp, sizeof tmp), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "holds no token") != NULL);
  CHECK(tok[0] == '\0');
}

TEST(slurm_token_names_only_what_is_a_plain_word) {
  char **envp = job_env();
  char tok[64], path[4096], want[256];
  char *bad_job[] = {envp[0], "SLURM_JOB_ID=../../etc", NULL};
  CHECK_RESULT(cddp__slurm_token(bad_job, tok, sizeof tok, path, sizeof path), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "SLURM_JOB_ID") != NULL);
  char *no_home[] = {"SLURM_JOB_ID=7", NULL};
  CHECK_RESULT(cddp__slurm_token(no_home, tok, sizeof tok, path, sizeof path), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "HOME") != NULL);
  CHECK(strstr(cddp_last_error(), "CDDP_TOKEN_FILE on every node") != NULL); /* the way around it */
  /* the cluster's name is not part of it: an `srun --jobid` from outside the allocation lacks it */
  char *other_task[] = {envp[0], "SLURM_JOBID=7", "SLURM_CLUSTER_NAME=../x", NULL};
  CHECK_OK(cddp__slurm_token(other_task, tok, sizeof tok, path, sizeof path));
  snprintf(want, sizeof want, "%s/.cddp/slurm-tokens/job-7", home);
  CHECK(strcmp(path, want) == 0);
}

TEST(slurm_token_files_a_month_old_go_when_a_new_one_is_made) {
  char **envp = job_env();
  char tok[64], path[4096], old[4200], recent[4200];
  CHECK_OK(cddp__slurm_token(envp, tok, sizeof tok, path, sizeof path));
  snprintf(old, sizeof old, "%s.old", path); /* another job's, 31 days old */
  snprintf(recent, sizeof recent, "%s.recent", path);
  CHECK(unlink(path) == 0);
  const char *files[] = {old, recent};
  for (int i = 0; i < 2; i++) {
    int fd = open(files[i], O_WRONLY | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0 && write(fd, "0123456789abcdef0123456789abcdef\n", 33) == 33 && close(fd) == 0);
  }
  struct timeval tv[2];
  gettimeofday(&tv[0], NULL);
  tv[0].tv_sec -= 31L * 24 * 3600, tv[1] = tv[0];
  CHECK(utimes(old, tv) == 0);
  CHECK_OK(cddp__slurm_token(envp, tok, sizeof tok, path, sizeof path)); /* makes job 4242's anew */
  CHECK_EQ(mode_of(old), -1);
  CHECK_EQ(mode_of(recent), 0600);
  CHECK_EQ(mode_of(path), 0600);
}

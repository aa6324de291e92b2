/* data_text.c - the KJV text from Debian's bible program (posix_spawnp + a pipe), its
 * train/validation split by blocks of verses, and sequences of T + 1 bytes by index. */
#include "trainer/data_text.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/check.h"

extern char **environ;

#define MAX_TEXT ((size_t)1 << 30)

cddp_result_t cddp__text_read_kjv(uint8_t **text, size_t *n) {
  *text = NULL, *n = 0;
  int fd[2];
  if (pipe2(fd, O_CLOEXEC) != 0) return cddp__fail_errno(CDDP_SYSTEM, "kjv: pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd[1], STDOUT_FILENO);
  char *argv[] = {CDDP_KJV_PROGRAM, "-f", CDDP_KJV_RANGE, NULL};
  pid_t pid;
  int rc = posix_spawnp(&pid, CDDP_KJV_PROGRAM, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fd[1]);
  if (rc != 0) {
    close(fd[0]);
    errno = rc;
    if (rc == ENOENT)
      return cddp__fail(CDDP_NOT_FOUND, "kjv: program '%s' not found: install Debian's bible-kjv "
                        "and bible-kjv-text (scripts/install-deps.sh build)", CDDP_KJV_PROGRAM);
    return cddp__fail_errno(CDDP_SYSTEM, "kjv: run '%s'", CDDP_KJV_PROGRAM);
  }
  size_t cap = 8u << 20, len = 0;
  uint8_t *buf = malloc(cap);
  cddp_result_t res = buf ? CDDP_OK : cddp__fail(CDDP_SYSTEM, "kjv: out of memory");
  while (res == CDDP_OK) {
    if (len == cap) {
      uint8_t *nb = cap < MAX_TEXT ? realloc(buf, cap * 2) : NULL;
      if (!nb) {
        res = cddp__fail(CDDP_SYSTEM, "kjv: '%s' output larger than %zu bytes", CDDP_KJV_PROGRAM, cap);
        break;
      }
      buf = nb, cap *= 2;
    }
    ssize_t r = read(fd[0], buf + len, cap - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) res = cddp__fail_errno(CDDP_SYSTEM, "kjv: read from '%s'", CDDP_KJV_PROGRAM);
    if (r <= 0) break;
    len += (size_t)r;
  }
  close(fd[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (res == CDDP_OK && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
    res = cddp__fail(CDDP_NOT_FOUND,
                     "kjv: '%s -f %s' failed (exit status %d): is bible-kjv-text installed "
                     "(its /usr/lib/bible.data)?",
                     CDDP_KJV_PROGRAM, CDDP_KJV_RANGE, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  if (res == CDDP_OK && len == 0)
    res = cddp__fail(CDDP_NOT_FOUND, "kjv: '%s' printed nothing: is bible-kjv-text installed?",
                     CDDP_KJV_PROGRAM);
  if (res != CDDP_OK) {
    free(buf);
    return res;
  }
  *text = buf, *n = len;
  return CDDP_OK;
}

static cddp_result_t make_split(cddp_text_t *t, size_t bytes, int T, const char *which) {
  memset(t, 0, sizeof *t);
  t->T = T;
  if (bytes < (size_t)T + 1)
    return cddp__fail(CDDP_INVALID_ARG, "text: %s split has %zu bytes, fewer than T + 1 = %d",
                      which, bytes, T + 1);
  t->bytes = malloc(bytes);
  if (!t->bytes) return cddp__fail(CDDP_SYSTEM, "text: out of memory for %zu bytes", bytes);
  t->n_seq = (bytes - 1) / (size_t)T;
  return CDDP_OK;
}

cddp_result_t cddp__text_split(const uint8_t *text, size_t n, int T, cddp_text_t *train,
                              cddp_text_t *val) {
  memset(train, 0, sizeof *train), memset(val, 0, sizeof *val);
  if (T < 1 || T > (1 << 20))
    return cddp__fail(CDDP_INVALID_ARG, "text: sequence length T = %d (must be 1..%d)", T, 1 << 20);
  /* pass 0 counts each split's bytes, pass 1 copies */
  size_t size[2] = {0, 0};
  for (int pass = 0; pass < 2; pass++) {
    size_t pos[2] = {0, 0}, line = 0, start = 0;
    for (size_t i = 0; i < n; i++) {
      if (text[i] != '\n' && i + 1 < n) continue;
      size_t len = i + 1 - start;
      int v = (line / CDDP_TEXT_BLOCK_LINES) % CDDP_TEXT_VAL_EVERY == CDDP_TEXT_VAL_EVERY - 1;
      if (pass == 1) memcpy((v ? val : train)->bytes + pos[v], text + start, len);
      pos[v] += len;
      line++, start = i + 1;
    }
    if (pass == 0) {
      size[0] = pos[0], size[1] = pos[1];
      cddp_result_t r = make_split(train, size[0], T, "train");
      if (r == CDDP_OK) r = make_split(val, size[1], T, "validation");
      if (r != CDDP_OK) {
        cddp__text_free(train), cddp__text_free(val);
        return r;
      }
    }
  }
  train->n_bytes = size[0], val->n_bytes = size[1];
  return CDDP_OK;
}

cddp_result_t cddp__text_load_kjv(int T, cddp_text_t *train, cddp_text_t *val) {
  uint8_t *text;
  size_t n;
  memset(train, 0, sizeof *train), memset(val, 0, sizeof *val);
  CDDP_CHECK(cddp__text_read_kjv(&text, &n));
  cddp_result_t r = cddp__text_split(text, n, T, train, val);
  free(text);
  return r;
}

void cddp__text_free(cddp_text_t *t) {
  free(t->bytes);
  memset(t, 0, sizeof *t);
}

void cddp__text_gather(const cddp_text_t *t, const uint32_t *idx, int n, uint8_t *tokens,
                      uint8_t *targets) {
  size_t T = (size_t)t->T;
  for (int k = 0; k < n; k++) {
    const uint8_t *s = t->bytes + (size_t)idx[k] * T;
    memcpy(tokens + k * T, s, T);
    memcpy(targets + k * T, s + 1, T);
  }
}

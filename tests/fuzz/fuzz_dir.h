/* fuzz_dir.h - for fuzzers whose parser reads a file: a private folder (mkdtemp, 0700) made once,
 * the input written to a file in it, and the folder removed when the fuzzer exits. */
#ifndef CDDP_FUZZ_DIR_H
#define CDDP_FUZZ_DIR_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_DIR_NAMES 8

static char fuzz_dir[512];
static const char *fuzz_dir_names[FUZZ_DIR_NAMES];

static void fuzz_dir_remove(void) {
  char path[600];
  for (int i = 0; i < FUZZ_DIR_NAMES && fuzz_dir_names[i]; i++) {
    snprintf(path, sizeof path, "%s/%s", fuzz_dir, fuzz_dir_names[i]);
    unlink(path);
  }
  rmdir(fuzz_dir);
}

/* The folder, made on first use; names: every file name the fuzzer writes (removed at exit). */
static const char *fuzz_dir_get(void) {
  if (fuzz_dir[0]) return fuzz_dir;
  /* memory (/dev/shm) when there is one: a file written and fsynced per input, thousands a second */
  const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
  snprintf(fuzz_dir, sizeof fuzz_dir, "%s/cddp-fuzz.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(fuzz_dir)) abort();
  atexit(fuzz_dir_remove);
  return fuzz_dir;
}

/* Writes data to <folder>/name (name one of at most FUZZ_DIR_NAMES, a string literal). */
static void fuzz_dir_put(const char *name, const void *data, size_t size) {
  char path[600];
  int i = 0;
  while (i < FUZZ_DIR_NAMES && fuzz_dir_names[i] && strcmp(fuzz_dir_names[i], name)) i++;
  if (i == FUZZ_DIR_NAMES) abort();
  fuzz_dir_names[i] = name;
  snprintf(path, sizeof path, "%s/%s", fuzz_dir_get(), name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size) || close(fd) != 0) abort();
}

/* Makes <folder>/name a symbolic link to target (name as for fuzz_dir_put). */
static void fuzz_dir_link(const char *name, const char *target) {
  char path[600];
  int i = 0;
  while (i < FUZZ_DIR_NAMES && fuzz_dir_names[i]) i++;
  if (i == FUZZ_DIR_NAMES) abort();
  fuzz_dir_names[i] = name;
  snprintf(path, sizeof path, "%s/%s", fuzz_dir_get(), name);
  if (symlink(target, path) != 0) abort();
}

/* 1 when s (NUL-terminated, within cap bytes) holds only printable ASCII: what reaches a terminal. */
static int fuzz_printable(const char *s, size_t cap) {
  size_t n = strnlen(s, cap);
  if (n == cap) return 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < ' ' || (unsigned char)s[i] >= 127) return 0;
  return 1;
}

#endif

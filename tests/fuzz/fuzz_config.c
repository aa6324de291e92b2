/* fuzz_config.c - libFuzzer target: the config loader over arbitrary YAML (first line, when
 * it starts with "--set ", is an override); any config that loads must write, reload and
 * hash back to itself, and any failure must leave a one-line error. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "trainer/config.h"

static int fd = -1;

static int load_text(const char *text, size_t n, const char *const *ovr, int n_ovr,
                     cddp_train_config_t *c) {
  char path[64];
  if (ftruncate(fd, 0) != 0 || pwrite(fd, text, n, 0) != (ssize_t)n) __builtin_trap();
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  return cddp__config_load(c, path, ovr, n_ovr) == CDDP_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (fd < 0 && (fd = memfd_create("fuzz_config", 0)) < 0) __builtin_trap();
  const char *p = (const char *)data;
  size_t n = size;
  char ovr[256];
  const char *ovrs[1] = {ovr};
  int n_ovr = 0;
  if (n > 6 && memcmp(p, "--set ", 6) == 0) {
    const char *nl = memchr(p, '\n', n);
    size_t len = nl ? (size_t)(nl - p) - 6 : n - 6;
    if (len >= sizeof ovr) len = sizeof ovr - 1;
    memcpy(ovr, p + 6, len);
    ovr[len] = '\0';
    n_ovr = 1;
    if (nl) n -= (size_t)(nl + 1 - p), p = nl + 1;
    else n = 0;
  }
  cddp_train_config_t a, b;
  if (!load_text(p, n, ovrs, n_ovr, &a)) {
    const char *e = cddp_last_error();
    if (!e[0] || strchr(e, '\n')) __builtin_trap();
    return 0;
  }
  static char text[1 << 15];
  FILE *f = fmemopen(text, sizeof text, "w");
  if (!f || cddp__config_write(&a, f) != CDDP_OK) __builtin_trap();
  long len = ftell(f);
  fclose(f);
  if (!load_text(text, (size_t)len, NULL, 0, &b)) __builtin_trap();
  if (cddp__config_hash(&a) != cddp__config_hash(&b)) __builtin_trap();
  return 0;
}

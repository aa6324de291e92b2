/* fuzz_errfile.c - libFuzzer target: the message parser of torch's error file over arbitrary
 * bytes; the message, when one is found, is a NUL-terminated string within the buffer. */
#include <stdint.h>
#include <string.h>

#include "launcher/errfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char out[64];
  memset(out, 'x', sizeof out);
  int found = cddp__errfile_parse((const char *)data, size, out, sizeof out);
  size_t n = strnlen(out, sizeof out);
  if (n == sizeof out || (found && n == 0) || (!found && n != 0)) __builtin_trap();
  return 0;
}

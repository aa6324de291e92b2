/* fuzz_torch_fr.c - libFuzzer target: the reader of torch's flight-recorder dumps (a pickle
 * subset) over arbitrary bytes; a dump it accepts has bounded, NUL-terminated fields. */
#include <stdint.h>
#include <string.h>

#include "cli/torch_fr.h"

static cddp__fr_dump_t d;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[128];
  err[0] = '\0';
  if (cddp__torch_fr_parse(data, size, &d, err, sizeof err) != 0) {
    if (!err[0] || strnlen(err, sizeof err) == sizeof err) __builtin_trap(); /* a refusal always says why */
    return 0;
  }
  if (d.n < 0 || d.n > CDDP__FR_MAX_ENTRIES || d.total < d.n) __builtin_trap();
  for (int i = 0; i < d.n; i++)
    if (strnlen(d.e[i].op, sizeof d.e[i].op) == sizeof d.e[i].op || strnlen(d.e[i].where, sizeof d.e[i].where) == sizeof d.e[i].where)
      __builtin_trap();
  return 0;
}

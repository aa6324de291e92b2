/* fuzz_safetensors.c - libFuzzer target: the safetensors reader over arbitrary bytes; whatever
 * it accepts must describe tensors inside the buffer, tiling the data section exactly. */
#include <stdint.h>
#include <string.h>

#include "ddp/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cddp__st_file_t f;
  if (cddp__st_parse("fuzz.safetensors", data, size, &f) != CDDP_OK) return 0;
  uint64_t covered = 0;
  for (int i = 0; i < f.n; i++) {
    const cddp__st_tensor_t *t = &f.t[i];
    if (t->end < t->begin || t->end > f.data_len || t->end - t->begin != t->count * 4) __builtin_trap();
    if (cddp__st_find(&f, t->name) == NULL) __builtin_trap();
    covered += t->end - t->begin;
    volatile uint8_t sink = 0;
    if (t->end > t->begin) sink ^= f.data[t->end - 1]; /* in bounds, or ASan says so */
    (void)sink;
  }
  if (covered != f.data_len) __builtin_trap();
  for (int i = 0; i < f.n_meta; i++)
    if (cddp__st_meta(&f, f.keys[i]) == NULL) __builtin_trap();
  cddp__st_free(&f);
  return 0;
}

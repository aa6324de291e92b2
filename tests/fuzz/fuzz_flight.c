/* fuzz_flight.c - libFuzzer target: `cddp flight DIR` over two ranks' flight records (the
 * watchdog's dumps, comm/flight.c's lines) of arbitrary bytes: it must end, in bounded time,
 * with 0, 1 or 2. (torch's flight-recorder dumps have their own fuzzer.) */
#include <stdint.h>
#include <string.h>

#include "cli/commands.h"
#include "fuzz_dir.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  if (!freopen("/dev/null", "w", stdout)) abort(); /* the report; libFuzzer writes to stderr */
  return 0;
}

/* data[0]: each file's header line "{"rank": R," is written by the fuzzer (the records that follow
 * are what is fuzzed), unless its low bits say the bytes carry their own. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint8_t how = data[0];
  data++, size--;
  const uint8_t *cut = memchr(data, 0, size); /* rank0's bytes, NUL, rank1's */
  size_t n0 = cut ? (size_t)(cut - data) : size;
  const uint8_t *p[2] = {data, cut ? cut + 1 : data + size};
  size_t n[2] = {n0, cut ? size - n0 - 1 : 0};
  static const char *names[2] = {"rank0.json", "rank1.json"};
  for (int i = 0; i < 2; i++) {
    char *buf = malloc(n[i] + 32);
    int h = (how >> i & 7) == 7 ? 0 : snprintf(buf, 32, "{\"rank\": %d,\n", (how >> 4) % 3 - 1 + i);
    memcpy(buf + h, p[i], n[i]);
    fuzz_dir_put(names[i], buf, (size_t)h + n[i]);
    free(buf);
  }
  char *argv[] = {"flight", (char *)fuzz_dir_get(), NULL};
  int rc = cddp__cmd_flight(2, argv);
  if (rc < 0 || rc > 2) __builtin_trap();
  return 0;
}

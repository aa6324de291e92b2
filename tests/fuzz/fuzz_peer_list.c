/* fuzz_peer_list.c - libFuzzer target: the communicator's peer list as a rank reads it from the
 * store (any bytes: another job's key, a torn or hostile value): it is refused or gives every
 * rank a host and a host id that fit, and a list written from what it gave reads back the same. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/peers.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int world = 1 + data[0] % 16, check = -1;
  data++, size--;
  cddp__peer_t out[16], again[16];
  const char *why = NULL;
  if (cddp__peer_list_parse(data, size, world, out, &check, &why) != 0) {
    if (!why || !why[0]) __builtin_trap();
    return 0;
  }
  if (check != 0 && check != 1) __builtin_trap();
  for (int r = 0; r < world; r++)
    if (!memchr(out[r].host, '\0', sizeof out[r].host) || !memchr(out[r].host_id, '\0', sizeof out[r].host_id) ||
        out[r].pid < 0)
      __builtin_trap();
  size_t len = 0;
  char *list = cddp__peer_list_format(out, world, check, &len);
  int check2 = -1;
  if (!list || cddp__peer_list_parse(list, len, world, again, &check2, &why) != 0 || check2 != check) __builtin_trap();
  for (int r = 0; r < world; r++)
    if (strcmp(again[r].host, out[r].host) || strcmp(again[r].host_id, out[r].host_id) || again[r].pid != out[r].pid)
      __builtin_trap();
  free(list);
  return 0;
}

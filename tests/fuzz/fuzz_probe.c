/* fuzz_probe.c - libFuzzer target: the torch watchdog's readers of another process's text
 * (launcher/hang_probe.c, launcher/pystack.c) over arbitrary bytes: a py-spy dump, whose frame
 * names the worker chose, and a /proc/PID/stat line, whose name field is the worker's own. What
 * they keep is bounded, NUL-terminated and printable: it reaches the terminal in the hang line. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_dir.h"
#include "launcher/hang_probe.h"
#include "launcher/pystack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cddp__pywhere_t w;
  fuzz_dir_put("dump.txt", data, size);
  char path[600];
  snprintf(path, sizeof path, "%s/dump.txt", fuzz_dir_get());
  int r = cddp__pystack_where(path, &w);
  if (r != 0 && r != -1) __builtin_trap();
  if (!fuzz_printable(w.user, sizeof w.user) || !fuzz_printable(w.coll, sizeof w.coll)) __builtin_trap();
  if ((w.setup != 0 && w.setup != 1) || (w.importing != 0 && w.importing != 1)) __builtin_trap();

  char *text = malloc(size + 1); /* the probe reads /proc into a NUL-terminated buffer */
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  uint64_t ticks = 0;
  char state = 0;
  if (cddp__proc_stat_parse(text, &ticks, &state) == 0 && state == 0) __builtin_trap();
  free(text);
  return 0;
}

/* fuzz_etimer.c - libFuzzer target: the elastic timer's request parser (one line from the pipe
 * workers write) over arbitrary bytes; a request it takes has a bounded scope and a valid pid. */
#include <stdint.h>
#include <string.h>

#include "launcher/elastic_timer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cddp__etimer_req_t r;
  char err[128];
  err[0] = '\0';
  if (cddp__etimer_parse((const char *)data, size, &r, err, sizeof err) != 0) {
    if (!err[0]) __builtin_trap();
    return 0;
  }
  if (r.pid < 1 || r.signal > 64 || strnlen(r.scope, sizeof r.scope) == sizeof r.scope) __builtin_trap();
  for (const char *c = r.scope; *c; c++)
    if (*c < 0x20 || *c > 0x7e) __builtin_trap();
  return 0;
}

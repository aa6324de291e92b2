/* torchrun_flags.c - torch 2.x torchrun's flags that `cddp run` refuses, each with why: a user
 * who copies a torchrun line gets one line naming the flag and what to use, never "unknown flag"
 * and never a flag silently taken with another meaning. tests/sh/test_torchrun_flags.sh checks
 * that every flag of the installed torchrun is either cddp's own or listed here. */
#include <string.h>

#include "launcher/torchrun_flags.h"

static const struct {
  const char *name, *why;
} refused[] = {
    {"log-line-prefix-template", "cddp prefixes each console line '[rank N] ' and writes log files unprefixed"},
    {"duplicate-stdout-filters", "to keep matching lines, use --log-dir (every rank's output in DIR/rank<N>.log) and grep"},
    {"duplicate-stderr-filters", "to keep matching lines, use --log-dir (every rank's output in DIR/rank<N>.log) and grep"},
    {"event-log-handler", "torch's event handlers are Python plugins; cddp's job events are in its store (cddp status)"},
    {"logs-specs", "torch's log specs are Python plugins; use --log-dir, --redirects and --tee"},
    {"numa-binding", "use --cpu-bind auto (each worker on its own share of the node's CPUs, the default)"},
    {"signals-to-handle", "cddp forwards SIGTERM, SIGINT and SIGHUP to the workers and keeps SIGUSR1 for flight records"},
    {"virtual-local-rank", "each worker's LOCAL_RANK is its own; set CUDA_VISIBLE_DEVICES in the program instead"},
    {"print-completion", "cddp has no shell completion script"},
};

const char *cddp__torchrun_refused(const char *name, size_t len) {
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
    const char *r = refused[i].name;
    if (strlen(r) != len) continue;
    size_t k = 0;
    while (k < len && (name[k] == r[k] || (name[k] == '_' && r[k] == '-'))) k++;
    if (k == len) return refused[i].why;
  }
  return NULL;
}

const char *cddp__torchrun_refused_name(int i) {
  return i >= 0 && (size_t)i < sizeof refused / sizeof *refused ? refused[i].name : NULL;
}

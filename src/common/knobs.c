/* knobs.c - reads the environment knobs declared in knobs.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/knobs.h"
#include "common/log.h"

static const struct {
  const char *var, *def, *doc;
} knobs[CDDP_KNOB_COUNT] = {
#define CDDP_KNOB_ROW(id, var, def, doc) {var, def, doc},
    CDDP_KNOB_MAP(CDDP_KNOB_ROW)
#undef CDDP_KNOB_ROW
};

const char *cddp__knob_var(cddp_knob_t k) { return knobs[k].var; }
const char *cddp__knob_default(cddp_knob_t k) { return knobs[k].def; }
const char *cddp__knob_doc(cddp_knob_t k) { return knobs[k].doc; }

/* Other libraries' names for a knob, read when the knob itself is unset: a job tuned for
 * NCCL or Gloo keeps its interface and its logs under cddp. */
static const struct {
  cddp_knob_t knob;
  const char *var;
} fallbacks[] = {
    {CDDP_KNOB_DEBUG, "NCCL_DEBUG"},
    {CDDP_KNOB_DEBUG_SUBSYS, "NCCL_DEBUG_SUBSYS"},
    {CDDP_KNOB_SOCKET_IFNAME, "NCCL_SOCKET_IFNAME"},
    {CDDP_KNOB_SOCKET_IFNAME, "GLOO_SOCKET_IFNAME"},
};

const char *cddp__knob_source(cddp_knob_t k) {
  if (getenv(knobs[k].var)) return knobs[k].var;
  for (size_t i = 0; i < sizeof fallbacks / sizeof fallbacks[0]; i++)
    if (fallbacks[i].knob == k && getenv(fallbacks[i].var)) return fallbacks[i].var;
  return NULL;
}

const char *cddp__knob_str(cddp_knob_t k) {
  const char *src = cddp__knob_source(k);
  return src ? getenv(src) : knobs[k].def;
}

int64_t cddp__knob_int(cddp_knob_t k) {
  const char *v = getenv(knobs[k].var);
  char *end;
  if (v && *v) {
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno == 0 && *end == '\0') return x;
    /* no CDDP_WARN here: the log facility reads knobs itself */
    fprintf(stderr, "cddp: %s=%s is not an integer; using %s\n", knobs[k].var, v, knobs[k].def);
  }
  return strtoll(knobs[k].def, NULL, 10);
}

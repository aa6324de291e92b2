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

const char *cddp__knob_str(cddp_knob_t k) {
  const char *v = getenv(knobs[k].var);
  return v ? v : knobs[k].def;
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

/* nodelist.c - expands Slurm host lists and task-count lists, with errors naming the position. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/nodelist.h"

#define NAME_MAX_LEN 255

/* One bracket group of a name: the numbers it stands for and their padding width. */
typedef struct group {
  long *nums;
  int n, width;
} group_t;

typedef struct parse {
  const char *list;
  char **hosts;
  int n, cap;
} parse_t;

static cddp_result_t bad(const parse_t *p, const char *at, const char *what) {
  return cddp__fail(CDDP_INVALID_ARG, "malformed node list '%s': %s at position %d", p->list, what,
                    (int)(at - p->list) + 1);
}

static cddp_result_t push(parse_t *p, const char *at, const char *name) {
  if (p->n >= CDDP_NODELIST_MAX) return bad(p, at, "more than 65536 hosts");
  if (p->n == p->cap) {
    int cap = p->cap ? p->cap * 2 : 16;
    char **h = realloc(p->hosts, (size_t)cap * sizeof *h);
    if (!h) return cddp__fail(CDDP_SYSTEM, "out of memory expanding node list");
    p->hosts = h;
    p->cap = cap;
  }
  if (!(p->hosts[p->n] = strdup(name))) return cddp__fail(CDDP_SYSTEM, "out of memory");
  p->n++;
  return CDDP_OK;
}

/* Parses digits at *s into *v; records the width when zero-padded. */
static int read_num(const char **s, long *v, int *padded_width) {
  const char *b = *s;
  long x = 0;
  while (isdigit((unsigned char)**s)) {
    if (x > 100000000) return 0;
    x = x * 10 + (**s - '0');
    (*s)++;
  }
  if (*s == b) return 0;
  int len = (int)(*s - b);
  if (len > 1 && b[0] == '0' && len > *padded_width) *padded_width = len;
  *v = x;
  return 1;
}

/* Parses "[a-b,c,...]" starting at s (on the '['); returns the char after ']'. */
static cddp_result_t parse_group(parse_t *p, const char *s, group_t *g, const char **end) {
  const char *open = s++;
  g->nums = NULL;
  g->n = 0;
  g->width = 0;
  int cap = 0;
  for (;;) {
    long lo, hi;
    const char *at = s;
    if (!read_num(&s, &lo, &g->width))
      return bad(p, at, *at == ']' || *at == ',' ? "empty range" : *at ? "expected a number" : "missing ']'");
    hi = lo;
    if (*s == '-') {
      s++;
      at = s;
      if (!read_num(&s, &hi, &g->width)) return bad(p, at, "expected a number after '-'");
      if (hi < lo) return bad(p, at, "range goes backwards");
    }
    if (hi - lo >= CDDP_NODELIST_MAX || g->n + (hi - lo + 1) > CDDP_NODELIST_MAX)
      return bad(p, at, "more than 65536 hosts");
    for (long v = lo; v <= hi; v++) {
      if (g->n == cap) {
        cap = cap ? cap * 2 : 8;
        long *nn = realloc(g->nums, (size_t)cap * sizeof *nn);
        if (!nn) return cddp__fail(CDDP_SYSTEM, "out of memory");
        g->nums = nn;
      }
      g->nums[g->n++] = v;
    }
    if (*s == ',') { s++; continue; }
    if (*s == ']') { *end = s + 1; return CDDP_OK; }
    if (!*s) return bad(p, open, "missing ']' for the '[' opened");
    return bad(p, s, "unexpected character in brackets");
  }
}

/* Expands one name (no top-level commas) of length len at s into hosts. */
static cddp_result_t expand_name(parse_t *p, const char *s, size_t len) {
  group_t groups[8];
  char lits[9][NAME_MAX_LEN + 1];
  int ng = 0;
  cddp_result_t ret = CDDP_OK;
  const char *e = s + len, *lit = s;
  if (len == 0) return bad(p, s, "empty host name");
  for (const char *c = s; c < e;) {
    if (*c == ']') { ret = bad(p, c, "']' without '['"); goto done; }
    if (isspace((unsigned char)*c) || !isprint((unsigned char)*c)) {
      ret = bad(p, c, "invalid character");
      goto done;
    }
    if (*c != '[') { c++; continue; }
    if (ng == 8) { ret = bad(p, c, "more than 8 bracket groups in one name"); goto done; }
    if ((size_t)(c - lit) > NAME_MAX_LEN) { ret = bad(p, c, "host name too long"); goto done; }
    memcpy(lits[ng], lit, (size_t)(c - lit));
    lits[ng][c - lit] = '\0';
    const char *after = e;
    CDDP_CHECK_GOTO(parse_group(p, c, &groups[ng], &after), ret, done_partial);
    ng++;
    if (after > e) { ret = bad(p, e, "missing ']'"); goto done; }
    c = lit = after;
    continue;
  done_partial:
    free(groups[ng].nums);
    goto done;
  }
  if ((size_t)(e - lit) > NAME_MAX_LEN) { ret = bad(p, lit, "host name too long"); goto done; }
  memcpy(lits[ng], lit, (size_t)(e - lit));
  lits[ng][e - lit] = '\0';
  /* odometer over the groups, last group fastest (Slurm's order) */
  int idx[8] = {0};
  for (;;) {
    char name[NAME_MAX_LEN * 2 + 1];
    size_t off = 0;
    for (int g = 0; g <= ng; g++) {
      off += (size_t)snprintf(name + off, sizeof name - off, "%s", lits[g]);
      if (g < ng) off += (size_t)snprintf(name + off, sizeof name - off, "%0*ld", groups[g].width, groups[g].nums[idx[g]]);
      if (off > NAME_MAX_LEN) { ret = bad(p, s, "host name too long"); goto done; }
    }
    CDDP_CHECK_GOTO(push(p, s, name), ret, done);
    int g = ng - 1;
    while (g >= 0 && ++idx[g] == groups[g].n) idx[g--] = 0;
    if (g < 0) break;
  }
done:
  for (int g = 0; g < ng; g++) free(groups[g].nums);
  return ret;
}

cddp_result_t cddp__nodelist_expand(const char *list, char ***hosts, int *n) {
  parse_t p = {.list = list ? list : ""};
  cddp_result_t ret = CDDP_OK;
  const char *s = p.list;
  *hosts = NULL;
  *n = 0;
  if (!*s) return cddp__fail(CDDP_INVALID_ARG, "malformed node list '': empty");
  for (;;) {
    /* a name ends at a comma outside brackets */
    const char *c = s;
    int depth = 0;
    while (*c && (depth || *c != ',')) {
      if (*c == '[') {
        if (depth) { ret = bad(&p, c, "nested '['"); goto fail; }
        depth = 1;
      } else if (*c == ']') depth = 0;
      c++;
    }
    CDDP_CHECK_GOTO(expand_name(&p, s, (size_t)(c - s)), ret, fail);
    if (!*c) break;
    s = c + 1;
    if (!*s) { ret = bad(&p, s, "trailing ','"); goto fail; }
  }
  *hosts = p.hosts;
  *n = p.n;
  return CDDP_OK;
fail:
  cddp__nodelist_free(p.hosts, p.n);
  return ret;
}

void cddp__nodelist_free(char **hosts, int n) {
  for (int i = 0; i < n; i++) free(hosts[i]);
  free(hosts);
}

cddp_result_t cddp__nodelist_first(const char *list, char *buf, size_t size) {
  char **hosts;
  int n;
  CDDP_CHECK(cddp__nodelist_expand(list, &hosts, &n));
  snprintf(buf, size, "%s", hosts[0]);
  cddp__nodelist_free(hosts, n);
  return CDDP_OK;
}

cddp_result_t cddp__nodelist_candidates(const char *list, const char *first, char ***hosts, int *n) {
  char **h;
  int k;
  CDDP_CHECK(cddp__nodelist_expand(list, &h, &k));
  int at = 0;
  while (at < k && strcmp(h[at], first)) at++;
  if (at == k) { /* not in the list: one more in front */
    char **more = realloc(h, (size_t)(k + 1) * sizeof *h);
    char *dup = more ? strdup(first) : NULL;
    if (!dup) {
      cddp__nodelist_free(more ? more : h, k);
      return cddp__fail(CDDP_SYSTEM, "out of memory");
    }
    h = more, h[k++] = dup;
  }
  char *front = h[at];
  memmove(&h[1], &h[0], (size_t)at * sizeof *h);
  h[0] = front;
  *hosts = h, *n = k;
  return CDDP_OK;
}

cddp_result_t cddp__tasks_per_node(const char *spec, int index, int *ntasks) {
  const char *s = spec ? spec : "";
  int node = 0;
  while (*s) {
    char *end;
    long count = strtol(s, &end, 10), rep = 1;
    if (end == s || count < 0) goto bad;
    s = end;
    if (*s == '(') {
      if (s[1] != 'x') goto bad;
      rep = strtol(s + 2, &end, 10);
      if (end == s + 2 || rep < 1 || *end != ')') goto bad;
      s = end + 1;
    }
    if (index < node + rep) {
      *ntasks = (int)count;
      return CDDP_OK;
    }
    node += (int)rep;
    if (*s == ',') s++;
    else if (*s) goto bad;
  }
  return cddp__fail(CDDP_INVALID_ARG, "tasks-per-node list '%s' has no node %d", spec ? spec : "", index);
bad:
  return cddp__fail(CDDP_INVALID_ARG, "malformed tasks-per-node list '%s' at position %d", spec,
                    (int)(s - spec) + 1);
}

int cddp__slurm_port(long job_id, long step_id) {
  unsigned long h = (unsigned long)job_id * 64ul + (unsigned long)(step_id & 63);
  return 20000 + (int)(h % 12768ul);
}

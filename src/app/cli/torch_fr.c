/* torch_fr.c - reads torch's flight-recorder dumps: a pickle subset VM (the opcodes torch's
 * pickler emits for dicts, lists, tuples, strings, ints, floats, bools and None) into a flat
 * node table, then the entries' fields cddp flight compares. Every length is checked against
 * the buffer, every table is capped, and anything else (globals, reduce, persistent ids: what
 * makes pickle run code) is refused with one line. */
#include "cli/torch_fr.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { N_NONE, N_BOOL, N_INT, N_FLOAT, N_STR, N_LIST, N_DICT, N_TUPLE };

typedef struct node {
  int kind;
  long long i;            /* N_INT, N_BOOL */
  size_t off, len;        /* N_STR: bytes of the input */
  int head, tail;         /* containers: their first and last link; dict links alternate key, value */
} node_t;

typedef struct vm {
  const unsigned char *b;
  size_t len, pos;
  node_t *node;
  int n_node, cap_node;
  int *link_node, *link_next;
  int n_link, cap_link;
  int *stack, sp, cap_stack;
  int *marks, n_marks;
  int *memo, cap_memo, n_memo;
  char *err;
  size_t errlen;
} vm_t;

#define MAX_STACK (1 << 16)
#define MAX_MEMO (1 << 22)

static int fail(vm_t *v, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (v->errlen) vsnprintf(v->err, v->errlen, fmt, ap);
  va_end(ap);
  return -1;
}

static int take(vm_t *v, size_t n, const unsigned char **p) {
  if (n > v->len - v->pos) return fail(v, "truncated at byte %zu (wants %zu more)", v->pos, n);
  *p = v->b + v->pos;
  v->pos += n;
  return 0;
}

static unsigned long long le(const unsigned char *p, int n) {
  unsigned long long x = 0;
  for (int k = n - 1; k >= 0; k--) x = x << 8 | p[k];
  return x;
}

static int new_node(vm_t *v, int kind) {
  if (v->n_node == v->cap_node) return fail(v, "too many values for its size at byte %zu", v->pos);
  node_t *x = &v->node[v->n_node];
  memset(x, 0, sizeof *x);
  x->kind = kind;
  x->head = x->tail = -1;
  return v->n_node++;
}

static int push(vm_t *v, int id) {
  if (id < 0) return -1; /* new_node's failure, already said */
  if (v->sp == v->cap_stack) return fail(v, "stack deeper than %d at byte %zu", v->cap_stack, v->pos);
  v->stack[v->sp++] = id;
  return 0;
}

static int link_to(vm_t *v, int container, int item) {
  if (v->n_link == v->cap_link) return fail(v, "too many items for its size at byte %zu", v->pos);
  node_t *c = &v->node[container];
  int l = v->n_link++;
  v->link_node[l] = item;
  v->link_next[l] = -1;
  if (c->tail < 0) c->head = l;
  else v->link_next[c->tail] = l;
  c->tail = l;
  return 0;
}

/* The items above the last MARK (removed with it): their first slot, or -1. */
static int pop_mark(vm_t *v) {
  if (v->n_marks == 0) return fail(v, "no MARK before byte %zu", v->pos);
  return v->marks[--v->n_marks];
}

static int memo_put(vm_t *v, unsigned long long at) {
  if (v->sp == 0 || v->stack[v->sp - 1] < 0) return fail(v, "memo of nothing at byte %zu", v->pos);
  if (at >= MAX_MEMO) return fail(v, "memo index %llu too large at byte %zu", at, v->pos);
  if ((int)at >= v->cap_memo) {
    int cap = v->cap_memo ? v->cap_memo : 256;
    while (cap <= (int)at) cap *= 2;
    int *m = realloc(v->memo, (size_t)cap * sizeof *m);
    if (!m) return fail(v, "out of memory");
    for (int k = v->cap_memo; k < cap; k++) m[k] = -1;
    v->memo = m, v->cap_memo = cap;
  }
  v->memo[at] = v->stack[v->sp - 1];
  if ((int)at >= v->n_memo) v->n_memo = (int)at + 1;
  return 0;
}

static int memo_get(vm_t *v, unsigned long long at) {
  if (at >= (unsigned long long)v->n_memo || v->memo[at] < 0) return fail(v, "memo %llu unset at byte %zu", at, v->pos);
  return push(v, v->memo[at]);
}

static int str(vm_t *v, unsigned long long n) {
  const unsigned char *p;
  if (n > v->len) return fail(v, "string of %llu bytes at byte %zu is past the end", n, v->pos);
  size_t at = v->pos;
  if (take(v, (size_t)n, &p) < 0) return -1;
  int id = new_node(v, N_STR);
  if (id < 0) return -1;
  v->node[id].off = at, v->node[id].len = (size_t)n;
  return push(v, id);
}

static int num(vm_t *v, int kind, long long i) {
  int id = new_node(v, kind);
  if (id < 0) return -1;
  v->node[id].i = i;
  return push(v, id);
}

/* A tuple of the top n items (n < 0: of those above the last MARK). */
static int tuple(vm_t *v, int n) {
  int from = n < 0 ? pop_mark(v) : v->sp - n;
  if (n < 0 && from < 0) return -1;
  if (from < 0 || from > v->sp) return fail(v, "tuple wants %d items at byte %zu", n, v->pos);
  for (int k = from; k < v->sp; k++)
    if (v->stack[k] < 0) return fail(v, "tuple over a MARK at byte %zu", v->pos);
  int id = new_node(v, N_TUPLE);
  if (id < 0) return -1;
  for (int k = from; k < v->sp; k++)
    if (link_to(v, id, v->stack[k]) < 0) return -1;
  v->sp = from;
  return push(v, id);
}

/* APPEND(S), SETITEM(S): the items above the mark (or the top 1 / 2) into the container below. */
static int fill(vm_t *v, int marked, int dict) {
  int from = marked ? pop_mark(v) : v->sp - (dict ? 2 : 1);
  if (marked && from < 0) return -1;
  if (from < 1 || from > v->sp || (dict && (v->sp - from) % 2)) return fail(v, "%s at byte %zu lacks items", dict ? "SETITEM" : "APPEND", v->pos);
  int c = v->stack[from - 1];
  if (c < 0 || v->node[c].kind != (dict ? N_DICT : N_LIST))
    return fail(v, "%s at byte %zu onto a %s", dict ? "SETITEM" : "APPEND", v->pos, dict ? "non-dict" : "non-list");
  for (int k = from; k < v->sp; k++)
    if (v->stack[k] < 0 || link_to(v, c, v->stack[k]) < 0) return v->stack[k] < 0 ? fail(v, "a MARK inside items at byte %zu", v->pos) : -1;
  v->sp = from;
  return 0;
}

static int step(vm_t *v, int *done) {
  const unsigned char *p = NULL;
  size_t at = v->pos;
  if (take(v, 1, &p) < 0) return fail(v, "ends at byte %zu without STOP", at);
  switch (*p) {
  case 0x80: return take(v, 1, &p) < 0 ? -1 : (*p >= 2 && *p <= 5 ? 0 : fail(v, "pickle protocol %d (2 to 5 are read)", *p));
  case 0x95: return take(v, 8, &p); /* FRAME: a length hint only */
  case '.': *done = 1; return 0;
  case '}': return push(v, new_node(v, N_DICT));
  case ']': return push(v, new_node(v, N_LIST));
  case ')': return push(v, new_node(v, N_TUPLE));
  case '(':
    if (v->n_marks == v->cap_stack) return fail(v, "too many MARKs at byte %zu", at);
    v->marks[v->n_marks++] = v->sp;
    return 0;
  case 'a': return fill(v, 0, 0);
  case 'e': return fill(v, 1, 0);
  case 's': return fill(v, 0, 1);
  case 'u': return fill(v, 1, 1);
  case 'X': case 'B': return take(v, 4, &p) < 0 ? -1 : str(v, le(p, 4));
  case 0x8c: case 'C': return take(v, 1, &p) < 0 ? -1 : str(v, *p);
  case 0x8d: case 0x8e: return take(v, 8, &p) < 0 ? -1 : str(v, le(p, 8));
  case 'J': return take(v, 4, &p) < 0 ? -1 : num(v, N_INT, (int32_t)(uint32_t)le(p, 4));
  case 'K': return take(v, 1, &p) < 0 ? -1 : num(v, N_INT, *p);
  case 'M': return take(v, 2, &p) < 0 ? -1 : num(v, N_INT, (long long)le(p, 2));
  case 0x8a: { /* LONG1: n little-endian two's-complement bytes; more than 8 is refused */
    if (take(v, 1, &p) < 0) return -1;
    int n = *p;
    if (n > 8) return fail(v, "an integer of %d bytes at byte %zu", n, at);
    if (take(v, (size_t)n, &p) < 0) return -1;
    unsigned long long x = n ? le(p, n) : 0;
    if (n && n < 8 && (p[n - 1] & 0x80)) x |= ~0ull << (8 * n);
    return num(v, N_INT, (long long)x);
  }
  case 'G': { /* BINFLOAT: big-endian double; kept as an integer part only (no field needs more) */
    if (take(v, 8, &p) < 0) return -1;
    unsigned long long x = 0;
    for (int k = 0; k < 8; k++) x = x << 8 | p[k];
    double d;
    memcpy(&d, &x, sizeof d);
    return num(v, N_FLOAT, d == d && d > -9e18 && d < 9e18 ? (long long)d : 0);
  }
  case 'N': return push(v, new_node(v, N_NONE));
  case 0x88: return num(v, N_BOOL, 1);
  case 0x89: return num(v, N_BOOL, 0);
  case 'q': return take(v, 1, &p) < 0 ? -1 : memo_put(v, *p);
  case 'r': return take(v, 4, &p) < 0 ? -1 : memo_put(v, le(p, 4));
  case 0x94: return memo_put(v, (unsigned long long)v->n_memo);
  case 'h': return take(v, 1, &p) < 0 ? -1 : memo_get(v, *p);
  case 'j': return take(v, 4, &p) < 0 ? -1 : memo_get(v, le(p, 4));
  case 't': return tuple(v, -1);
  case 0x85: return tuple(v, 1);
  case 0x86: return tuple(v, 2);
  case 0x87: return tuple(v, 3);
  default:
    return fail(v, "pickle opcode 0x%02x at byte %zu is not one a flight-recorder dump uses; refused", *p, at);
  }
}

/* ---- the dump's fields ---- */

static int lookup(const vm_t *v, int dict, const char *key) {
  if (dict < 0 || v->node[dict].kind != N_DICT) return -1;
  size_t kl = strlen(key);
  int found = -1, pairs = 0;
  for (int l = v->node[dict].head; l >= 0 && v->link_next[l] >= 0 && pairs++ < 4096; l = v->link_next[v->link_next[l]]) {
    const node_t *k = &v->node[v->link_node[l]];
    if (k->kind == N_STR && k->len == kl && !memcmp(v->b + k->off, key, kl)) found = v->link_node[v->link_next[l]];
  }
  return found;
}

static int item(const vm_t *v, int seq, int at) {
  if (seq < 0 || (v->node[seq].kind != N_LIST && v->node[seq].kind != N_TUPLE)) return -1;
  int l = v->node[seq].head;
  for (; l >= 0 && at > 0; at--) l = v->link_next[l];
  return l >= 0 ? v->link_node[l] : -1;
}

/* A string field into out, printable ASCII only (a hostile name cannot move the terminal). */
static void text(const vm_t *v, int id, char *out, size_t size) {
  size_t n = 0;
  if (id >= 0 && v->node[id].kind == N_STR)
    for (size_t k = 0; k < v->node[id].len && n + 1 < size; k++) {
      unsigned char c = v->b[v->node[id].off + k];
      out[n++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
  out[n] = '\0';
}

static long long integer(const vm_t *v, int id, long long none) {
  return id >= 0 && (v->node[id].kind == N_INT || v->node[id].kind == N_BOOL) ? v->node[id].i : none;
}

static void entry(const vm_t *v, int d, cddp__fr_entry_t *e) {
  char name[64];
  memset(e, 0, sizeof *e);
  e->p2p = integer(v, lookup(v, d, "is_p2p"), 0) != 0;
  e->seq = integer(v, lookup(v, d, e->p2p ? "p2p_seq_id" : "collective_seq_id"), -1);
  e->retired = integer(v, lookup(v, d, "retired"), 0) != 0;
  e->created_ns = integer(v, lookup(v, d, "time_created_ns"), 0);
  text(v, lookup(v, d, "profiling_name"), name, sizeof name);
  const char *colon = strchr(name, ':');
  snprintf(e->backend, sizeof e->backend, "%.*s", colon ? (int)(colon - name) : 0, name);
  snprintf(e->op, sizeof e->op, "%.47s", colon ? colon + 1 : name);
  text(v, lookup(v, d, "state"), e->state, sizeof e->state);
  text(v, item(v, lookup(v, d, "input_dtypes"), 0), e->dtype, sizeof e->dtype);
  int pg = lookup(v, d, "process_group");
  text(v, item(v, pg, 1), e->group, sizeof e->group);
  int shape = item(v, lookup(v, d, "input_sizes"), 0);
  e->count = shape >= 0 ? 1 : -1;
  for (int k = 0, dim; shape >= 0 && (dim = item(v, shape, k)) >= 0 && k < 16; k++) {
    long long x = integer(v, dim, -1);
    if (x < 0 || (x && e->count > INT64_MAX / x)) { e->count = -1; break; }
    e->count *= x;
  }
  /* frames are innermost first: the first one outside torch is the user's */
  int frames = lookup(v, d, "frames");
  for (int k = 0, f; k < 256 && (f = item(v, frames, k)) >= 0; k++) {
    char file[256], fn[64];
    text(v, lookup(v, f, "filename"), file, sizeof file);
    if (!file[0] || strstr(file, "/torch/")) continue;
    text(v, lookup(v, f, "name"), fn, sizeof fn);
    const char *base = strrchr(file, '/');
    snprintf(e->where, sizeof e->where, "%.60s (%.70s:%lld)", fn, base ? base + 1 : file, integer(v, lookup(v, f, "line"), 0));
    break;
  }
}

int cddp__torch_fr_parse(const unsigned char *buf, size_t len, cddp__fr_dump_t *out, char *err, size_t errlen) {
  vm_t v = {.b = buf, .len = len, .err = err, .errlen = errlen};
  int ret = -1, done = 0;
  memset(out, 0, sizeof *out);
  if (len > CDDP__FR_MAX_BYTES) return fail(&v, "%zu bytes: larger than a flight-recorder dump may be", len);
  if (len < 2 || buf[0] != 0x80) return fail(&v, "not a pickle (a flight-recorder dump starts with PROTO)");
  /* each opcode makes at most one value and one link */
  v.cap_node = v.cap_link = (int)len + 1;
  v.cap_stack = len < MAX_STACK ? (int)len + 1 : MAX_STACK;
  v.node = malloc((size_t)v.cap_node * sizeof *v.node);
  v.link_node = malloc((size_t)v.cap_link * sizeof(int));
  v.link_next = malloc((size_t)v.cap_link * sizeof(int));
  v.stack = malloc((size_t)v.cap_stack * sizeof(int));
  v.marks = malloc((size_t)v.cap_stack * sizeof(int));
  if (!v.node || !v.link_node || !v.link_next || !v.stack || !v.marks) {
    fail(&v, "out of memory for %zu bytes", len);
    goto exit;
  }
  while (!done)
    if (step(&v, &done) < 0) goto exit;
  if (v.sp != 1 || v.stack[0] < 0 || v.node[v.stack[0]].kind != N_DICT) {
    fail(&v, "the pickle is not one dict (a flight-recorder dump is)");
    goto exit;
  }
  int root = v.stack[0], entries = lookup(&v, root, "entries");
  if (entries < 0 || v.node[entries].kind != N_LIST) {
    fail(&v, "the dict has no \"entries\" list (not a flight-recorder dump)");
    goto exit;
  }
  text(&v, lookup(&v, root, "version"), out->version, sizeof out->version);
  for (int l = v.node[entries].head; l >= 0; l = v.link_next[l]) out->total++;
  long long skip = out->total > CDDP__FR_MAX_ENTRIES ? out->total - CDDP__FR_MAX_ENTRIES : 0, k = 0;
  for (int l = v.node[entries].head; l >= 0; l = v.link_next[l], k++)
    if (k >= skip && v.node[v.link_node[l]].kind == N_DICT) entry(&v, v.link_node[l], &out->e[out->n++]);
  ret = 0;
exit:
  free(v.node), free(v.link_node), free(v.link_next), free(v.stack), free(v.marks), free(v.memo);
  return ret;
}

int cddp__torch_fr_read(const char *path, cddp__fr_dump_t *out, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (off_t)CDDP__FR_MAX_BYTES) {
    snprintf(err, errlen, "%s", fd < 0 ? "cannot open it" : "not a regular file of at most 64 MiB");
    if (fd >= 0) close(fd);
    return -1;
  }
  size_t len = (size_t)st.st_size, got = 0;
  unsigned char *buf = malloc(len ? len : 1);
  while (buf && got < len) {
    ssize_t r = read(fd, buf + got, len - got);
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  int ret = buf && got == len ? cddp__torch_fr_parse(buf, len, out, err, errlen) : (snprintf(err, errlen, "short read"), -1);
  free(buf);
  return ret;
}

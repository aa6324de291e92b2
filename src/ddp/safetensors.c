/* safetensors.c - safetensors files: the writer (escaped JSON header padded to 8 bytes, packed
 * F32 data, written durably) and a strict, bounded reader of the header shape the spec allows. */
#include "ddp/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "cddp/comm.h"
#include "common/check.h"
#include "common/durable.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c writes host floats as little-endian data: add byte swapping for this host"
#endif

/* ---- UTF-8 (the header must be valid UTF-8; names are written as they are) */

static int utf8_valid(const uint8_t *s, size_t len) {
  size_t i = 0;
  while (i < len) {
    uint8_t c = s[i];
    int n;
    uint32_t cp;
    if (c < 0x80) { i++; continue; }
    if (c >= 0xC2 && c <= 0xDF) n = 1, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) n = 2, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) n = 3, cp = c & 0x07;
    else return 0;
    if (i + (size_t)n >= len) return 0;
    for (int k = 1; k <= n; k++) {
      if ((s[i + k] & 0xC0) != 0x80) return 0;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return 0;
    i += (size_t)n + 1;
  }
  return 1;
}

/* ---- writer */

typedef struct sb {
  char *p;
  size_t len, cap;
  int oom;
} sb_t;

static void sb_put(sb_t *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) { b->oom = 1; return; }
    b->p = p, b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}
static void sb_str(sb_t *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_fmt(sb_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_fmt(sb_t *b, const char *fmt, ...) {
  char tmp[64];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) sb_put(b, tmp, (size_t)CDDP_MIN((size_t)n, sizeof tmp - 1));
}
/* A JSON string: quotes, backslash and control characters escaped; UTF-8 passes through. */
static void sb_json(sb_t *b, const char *s) {
  sb_put(b, "\"", 1);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"') sb_put(b, "\\\"", 2);
    else if (*c == '\\') sb_put(b, "\\\\", 2);
    else if (*c == '\n') sb_put(b, "\\n", 2);
    else if (*c == '\t') sb_put(b, "\\t", 2);
    else if (*c == '\r') sb_put(b, "\\r", 2);
    else if (*c < 0x20) sb_fmt(b, "\\u%04x", *c);
    else sb_put(b, (const char *)c, 1);
  }
  sb_put(b, "\"", 1);
}

static cddp_result_t check_name(const char *path, const char *kind, const char *s, size_t max) {
  size_t n = s ? strlen(s) : 0;
  if (!s || (n == 0 && strcmp(kind, "metadata value") != 0))
    return cddp__fail(CDDP_INVALID_ARG, "%s: empty %s", path, kind);
  if (n > max) return cddp__fail(CDDP_INVALID_ARG, "%s: %s '%.40s...' is longer than %zu bytes", path, kind, s, max);
  if (!utf8_valid((const uint8_t *)s, n))
    return cddp__fail(CDDP_INVALID_ARG, "%s: %s '%.60s' is not valid UTF-8", path, kind, s);
  return CDDP_OK;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Duplicate names would make an invalid header: reject them (sorted copy, O(n log n)). */
static cddp_result_t check_unique(const char *path, const char *kind, const char **names, int n) {
  if (n < 2) return CDDP_OK;
  const char **s = malloc((size_t)n * sizeof *s);
  if (!s) return cddp__fail(CDDP_SYSTEM, "%s: out of memory", path);
  memcpy(s, names, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_str);
  for (int i = 1; i < n; i++)
    if (!strcmp(s[i - 1], s[i])) {
      cddp_result_t r = cddp__fail(CDDP_INVALID_ARG, "%s: %s '%s' appears twice", path, kind, s[i]);
      free(s);
      return r;
    }
  free(s);
  return CDDP_OK;
}

/* Builds the header JSON (padded with spaces to a multiple of 8) into b. */
static cddp_result_t build_header(const char *path, const cddp_tensor_view_t *t, int n,
                                  const cddp_meta_kv_t *meta, int n_meta, sb_t *b) {
  cddp_result_t ret = CDDP_OK;
  const char **names = malloc(((size_t)(n > n_meta ? n : n_meta) + 1) * sizeof *names);
  if (!names) return cddp__fail(CDDP_SYSTEM, "%s: out of memory", path);
  for (int i = 0; i < n_meta; i++) {
    CDDP_CHECK_GOTO(check_name(path, "metadata key", meta[i].key, CDDP__ST_MAX_NAME), ret, out);
    CDDP_CHECK_GOTO(check_name(path, "metadata value", meta[i].value, CDDP__ST_MAX_VALUE), ret, out);
    names[i] = meta[i].key;
  }
  CDDP_CHECK_GOTO(check_unique(path, "metadata key", names, n_meta), ret, out);
  for (int i = 0; i < n; i++) {
    CDDP_CHECK_GOTO(check_name(path, "tensor name", t[i].name, CDDP__ST_MAX_NAME), ret, out);
    if (!strcmp(t[i].name, "__metadata__")) {
      ret = cddp__fail(CDDP_INVALID_ARG, "%s: '__metadata__' is reserved, not a tensor name", path);
      goto out;
    }
    if (t[i].ndim < 0 || t[i].ndim > 4) {
      ret = cddp__fail(CDDP_INVALID_ARG, "%s: tensor '%s' has ndim %d (0-4)", path, t[i].name, t[i].ndim);
      goto out;
    }
    for (int d = 0; d < t[i].ndim; d++)
      if (t[i].shape[d] < 0) {
        ret = cddp__fail(CDDP_INVALID_ARG, "%s: tensor '%s' has a negative dimension", path, t[i].name);
        goto out;
      }
    names[i] = t[i].name;
  }
  CDDP_CHECK_GOTO(check_unique(path, "tensor name", names, n), ret, out);

  sb_str(b, "{");
  if (n_meta > 0) {
    sb_str(b, "\"__metadata__\":{");
    for (int i = 0; i < n_meta; i++) {
      if (i) sb_str(b, ",");
      sb_json(b, meta[i].key);
      sb_str(b, ":");
      sb_json(b, meta[i].value);
    }
    sb_str(b, "}");
  }
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    uint64_t count = 1;
    for (int d = 0; d < t[i].ndim; d++) count *= (uint64_t)t[i].shape[d];
    if (n_meta > 0 || i) sb_str(b, ",");
    sb_json(b, t[i].name);
    sb_str(b, ":{\"dtype\":\"F32\",\"shape\":[");
    for (int d = 0; d < t[i].ndim; d++) sb_fmt(b, "%s%" PRId64, d ? "," : "", t[i].shape[d]);
    sb_fmt(b, "],\"data_offsets\":[%" PRIu64 ",", off);
    off += count * 4;
    sb_fmt(b, "%" PRIu64 "]}", off);
  }
  sb_str(b, "}");
  while (b->len % 8) sb_str(b, " ");
  if (b->oom) ret = cddp__fail(CDDP_SYSTEM, "%s: out of memory for the header", path);
out:
  free(names);
  return ret;
}

/* Appends to the file and folds the bytes into its CRC-32. */
static cddp_result_t put(cddp__durable_t *d, const void *p, size_t n, uint32_t *crc) {
  cddp_progress_alive(); /* a large checkpoint is work: its peers' watchdog must not take it for a hang */
  for (size_t at = 0; at < n; at += (size_t)1 << 30)
    *crc = (uint32_t)crc32(*crc, (const Bytef *)p + at, (uInt)CDDP_MIN(n - at, (size_t)1 << 30));
  return cddp__durable_write(d, p, n);
}

cddp_result_t cddp__st_write(const char *path, const cddp_tensor_view_t *t, int n,
                             const cddp_meta_kv_t *meta, int n_meta, uint64_t *size,
                             uint32_t *crc_out) {
  cddp_result_t ret = CDDP_OK;
  sb_t b = {0};
  cddp__durable_t d = {.fd = -1};
  uint32_t crc = (uint32_t)crc32(0L, Z_NULL, 0);
  if (!path || n < 0 || n_meta < 0 || (n > 0 && !t) || (n_meta > 0 && !meta))
    return cddp__fail(CDDP_INVALID_ARG, "safetensors write %s: bad arguments", path ? path : "(null)");
  CDDP_CHECK_GOTO(build_header(path, t, n, meta, n_meta, &b), ret, fail);
  CDDP_CHECK_GOTO(cddp__durable_open(&d, path, 0644), ret, fail);
  uint8_t le[8];
  uint64_t hn = b.len, total = 8 + hn;
  for (int i = 0; i < 8; i++) le[i] = (uint8_t)(hn >> (8 * i));
  CDDP_CHECK_GOTO(put(&d, le, 8, &crc), ret, fail);
  CDDP_CHECK_GOTO(put(&d, b.p, b.len, &crc), ret, fail);
  for (int i = 0; i < n; i++) {
    uint64_t count = 1;
    for (int dim = 0; dim < t[i].ndim; dim++) count *= (uint64_t)t[i].shape[dim];
    if (count && !t[i].data) {
      ret = cddp__fail(CDDP_INVALID_ARG, "%s: tensor '%s' has no data", path, t[i].name);
      goto fail;
    }
    if (count) CDDP_CHECK_GOTO(put(&d, t[i].data, count * 4, &crc), ret, fail);
    total += count * 4;
  }
  cddp_progress_alive();
  CDDP_CHECK_GOTO(cddp__durable_commit(&d), ret, fail);
  cddp_progress_alive();
  free(b.p);
  if (size) *size = total;
  if (crc_out) *crc_out = crc;
  return CDDP_OK;
fail:
  cddp__durable_abort(&d);
  free(b.p);
  return ret;
}

cddp_result_t cddp_safetensors_write(const char *path, const cddp_tensor_view_t *t, int n,
                                     const cddp_meta_kv_t *meta, int n_meta) {
  return cddp__st_write(path, t, n, meta, n_meta, NULL, NULL);
}

/* ---- reader: a strict JSON parser for exactly the header shape of the spec */

typedef struct parser {
  const char *what; /* the file, for errors */
  const uint8_t *s;
  size_t len, pos;
} parser_t;

static cddp_result_t bad(parser_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cddp_result_t bad(parser_t *p, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return cddp__fail(CDDP_INVALID_ARG, "%s: bad header: %s (at byte %zu of the JSON)", p->what, msg, p->pos);
}

static void skip_ws(parser_t *p) {
  while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
                             p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
    p->pos++;
}

static cddp_result_t expect(parser_t *p, char c) {
  skip_ws(p);
  if (p->pos >= p->len) return bad(p, "expected '%c', found the end", c);
  if (p->s[p->pos] != (uint8_t)c) return bad(p, "expected '%c', found '%c'", c, p->s[p->pos]);
  p->pos++;
  return CDDP_OK;
}

/* Is the next non-blank byte c? Consumes it if so. */
static int accept(parser_t *p, char c) {
  skip_ws(p);
  if (p->pos < p->len && p->s[p->pos] == (uint8_t)c) { p->pos++; return 1; }
  return 0;
}

static int hex4(const uint8_t *h, uint32_t *v) {
  *v = 0;
  for (int i = 0; i < 4; i++) {
    int c = h[i], d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return 0;
    *v = *v << 4 | (uint32_t)d;
  }
  return 1;
}

/* A JSON string, decoded to a malloc'd UTF-8 C string of at most max bytes (NUL rejected). */
static cddp_result_t parse_string(parser_t *p, size_t max, char **out) {
  *out = NULL;
  CDDP_CHECK(expect(p, '"'));
  size_t cap = 16, n = 0;
  char *o = malloc(cap);
  if (!o) return bad(p, "out of memory");
  for (;;) {
    if (p->pos >= p->len) { free(o); return bad(p, "unterminated string"); }
    uint8_t c = p->s[p->pos++];
    uint8_t enc[4];
    size_t k = 0;
    if (c == '"') break;
    if (c < 0x20) { free(o); return bad(p, "control character in a string"); }
    if (c != '\\') {
      enc[k++] = c;
    } else {
      if (p->pos >= p->len) { free(o); return bad(p, "unterminated escape"); }
      uint8_t e = p->s[p->pos++];
      uint32_t cp;
      switch (e) {
        case '"': case '\\': case '/': enc[k++] = e; break;
        case 'b': enc[k++] = '\b'; break;
        case 'f': enc[k++] = '\f'; break;
        case 'n': enc[k++] = '\n'; break;
        case 'r': enc[k++] = '\r'; break;
        case 't': enc[k++] = '\t'; break;
        case 'u':
          if (p->pos + 4 > p->len || !hex4(p->s + p->pos, &cp)) { free(o); return bad(p, "bad \\u escape"); }
          p->pos += 4;
          if (cp >= 0xDC00 && cp <= 0xDFFF) { free(o); return bad(p, "lone low surrogate"); }
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo;
            if (p->pos + 6 > p->len || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u' ||
                !hex4(p->s + p->pos + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
              free(o);
              return bad(p, "lone high surrogate");
            }
            p->pos += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          if (cp == 0) { free(o); return bad(p, "NUL character in a string"); }
          if (cp < 0x80) enc[k++] = (uint8_t)cp;
          else if (cp < 0x800) enc[k++] = (uint8_t)(0xC0 | cp >> 6), enc[k++] = (uint8_t)(0x80 | (cp & 0x3F));
          else if (cp < 0x10000)
            enc[k++] = (uint8_t)(0xE0 | cp >> 12), enc[k++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)),
            enc[k++] = (uint8_t)(0x80 | (cp & 0x3F));
          else
            enc[k++] = (uint8_t)(0xF0 | cp >> 18), enc[k++] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F)),
            enc[k++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)), enc[k++] = (uint8_t)(0x80 | (cp & 0x3F));
          break;
        default: free(o); return bad(p, "bad escape '\\%c'", e);
      }
    }
    if (n + k > max) { free(o); return bad(p, "string longer than %zu bytes", max); }
    if (n + k + 1 > cap) {
      while (n + k + 1 > cap) cap *= 2;
      char *q = realloc(o, cap);
      if (!q) { free(o); return bad(p, "out of memory"); }
      o = q;
    }
    memcpy(o + n, enc, k);
    n += k;
  }
  o[n] = '\0';
  *out = o;
  return CDDP_OK;
}

/* A non-negative JSON integer (no sign, fraction, exponent or leading zero) below 2^63. */
static cddp_result_t parse_uint(parser_t *p, uint64_t *v) {
  skip_ws(p);
  size_t start = p->pos;
  *v = 0;
  while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
    unsigned d = p->s[p->pos] - '0';
    if (*v > ((uint64_t)INT64_MAX - d) / 10) return bad(p, "integer too large");
    *v = *v * 10 + d;
    p->pos++;
  }
  if (p->pos == start) return bad(p, "expected a non-negative integer");
  if (p->s[start] == '0' && p->pos - start > 1) return bad(p, "integer with a leading zero");
  if (p->pos < p->len && (p->s[p->pos] == '.' || p->s[p->pos] == 'e' || p->s[p->pos] == 'E'))
    return bad(p, "expected an integer, found a fraction or exponent");
  return CDDP_OK;
}

static cddp_result_t parse_metadata(parser_t *p, cddp__st_file_t *f) {
  CDDP_CHECK(expect(p, '{'));
  if (accept(p, '}')) return CDDP_OK;
  do {
    if (f->n_meta >= CDDP__ST_MAX_META) return bad(p, "more than %d metadata entries", CDDP__ST_MAX_META);
    char *k, *v;
    CDDP_CHECK(parse_string(p, CDDP__ST_MAX_NAME, &k));
    for (int i = 0; i < f->n_meta; i++)
      if (!strcmp(f->keys[i], k)) {
        cddp_result_t r = bad(p, "metadata key '%s' appears twice", k);
        free(k);
        return r;
      }
    cddp_result_t r = expect(p, ':');
    if (r == CDDP_OK) r = parse_string(p, CDDP__ST_MAX_VALUE, &v);
    if (r != CDDP_OK) { free(k); return r; }
    if (f->n_meta % 16 == 0) {
      char **nk = realloc(f->keys, (size_t)(f->n_meta + 16) * sizeof *nk);
      if (nk) f->keys = nk;
      char **nv = realloc(f->vals, (size_t)(f->n_meta + 16) * sizeof *nv);
      if (nv) f->vals = nv;
      if (!nk || !nv) { free(k), free(v); return bad(p, "out of memory"); }
    }
    f->keys[f->n_meta] = k, f->vals[f->n_meta] = v, f->n_meta++;
  } while (accept(p, ','));
  return expect(p, '}');
}

/* {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}, each key exactly once. */
static cddp_result_t parse_info(parser_t *p, cddp__st_tensor_t *t) {
  int seen_dtype = 0, seen_shape = 0, seen_off = 0;
  CDDP_CHECK(expect(p, '{'));
  if (accept(p, '}')) return bad(p, "tensor '%s' has an empty description", t->name);
  do {
    char *k;
    CDDP_CHECK(parse_string(p, 64, &k));
    cddp_result_t r = expect(p, ':');
    if (r != CDDP_OK) { free(k); return r; }
    if (!strcmp(k, "dtype") && !seen_dtype++) {
      char *dt;
      r = parse_string(p, 16, &dt);
      if (r == CDDP_OK && strcmp(dt, "F32") != 0)
        r = bad(p, "tensor '%s' has dtype %s (cddp stores and reads F32 only)", t->name, dt);
      free(dt);
    } else if (!strcmp(k, "shape") && !seen_shape++) {
      r = expect(p, '[');
      if (r == CDDP_OK && !accept(p, ']')) {
        do {
          uint64_t d;
          if (t->ndim >= CDDP__ST_MAX_DIMS) { r = bad(p, "tensor '%s' has more than %d dimensions", t->name, CDDP__ST_MAX_DIMS); break; }
          if ((r = parse_uint(p, &d)) != CDDP_OK) break;
          t->shape[t->ndim++] = (int64_t)d;
        } while (accept(p, ','));
        if (r == CDDP_OK) r = expect(p, ']');
      }
    } else if (!strcmp(k, "data_offsets") && !seen_off++) {
      r = expect(p, '[');
      if (r == CDDP_OK) r = parse_uint(p, &t->begin);
      if (r == CDDP_OK) r = expect(p, ',');
      if (r == CDDP_OK) r = parse_uint(p, &t->end);
      if (r == CDDP_OK) r = expect(p, ']');
    } else {
      r = bad(p, "tensor '%s': unexpected or repeated key '%s'", t->name, k);
    }
    free(k);
    if (r != CDDP_OK) return r;
  } while (accept(p, ','));
  CDDP_CHECK(expect(p, '}'));
  if (!seen_dtype || !seen_shape || !seen_off)
    return bad(p, "tensor '%s' lacks %s", t->name, !seen_dtype ? "dtype" : !seen_shape ? "shape" : "data_offsets");
  return CDDP_OK;
}

static int cmp_tensor_ptr(const void *a, const void *b) {
  const cddp__st_tensor_t *x = *(const cddp__st_tensor_t *const *)a, *y = *(const cddp__st_tensor_t *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

/* Sizes match shapes, names are unique, and sorted by offset the tensors tile the data
 * section exactly: the first begins at 0, each begins where the previous ended, the last
 * ends at the end of the file. */
static cddp_result_t validate(parser_t *p, cddp__st_file_t *f) {
  cddp_result_t ret = CDDP_OK;
  if (f->n == 0) {
    if (f->data_len) return cddp__fail(CDDP_INVALID_ARG, "%s: bad header: no tensors but %" PRIu64 " data bytes", p->what, f->data_len);
    return CDDP_OK;
  }
  const cddp__st_tensor_t **s = malloc((size_t)f->n * sizeof *s);
  const char **names = malloc((size_t)f->n * sizeof *names);
  if (!s || !names) {
    free(s), free(names);
    return cddp__fail(CDDP_SYSTEM, "%s: out of memory", p->what);
  }
  for (int i = 0; i < f->n; i++) names[i] = f->t[i].name;
  qsort(names, (size_t)f->n, sizeof *names, cmp_str);
  for (int i = 1; i < f->n; i++)
    if (!strcmp(names[i - 1], names[i])) {
      ret = cddp__fail(CDDP_INVALID_ARG, "%s: bad header: tensor '%s' appears twice", p->what, names[i]);
      goto out;
    }
  for (int i = 0; i < f->n; i++) {
    cddp__st_tensor_t *t = &f->t[i];
    uint64_t count = 1;
    for (int d = 0; d < t->ndim; d++) {
      uint64_t dim = (uint64_t)t->shape[d];
      if (dim && count > UINT64_MAX / 4 / dim) {
        ret = cddp__fail(CDDP_INVALID_ARG, "%s: bad header: tensor '%s': shape overflows", p->what, t->name);
        goto out;
      }
      count *= dim;
    }
    t->count = count;
    s[i] = t;
  }
  qsort(s, (size_t)f->n, sizeof *s, cmp_tensor_ptr);
  uint64_t at = 0;
  for (int i = 0; i < f->n; i++) {
    const cddp__st_tensor_t *t = s[i];
    if (t->end < t->begin) {
      ret = cddp__fail(CDDP_INVALID_ARG, "%s: bad header: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
                       p->what, t->name, t->begin, t->end);
      goto out;
    }
    if (t->begin != at) {
      ret = cddp__fail(CDDP_INVALID_ARG, "%s: bad header: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] %s (expected to begin at %" PRIu64 ")",
                       p->what, t->name, t->begin, t->end, t->begin < at ? "overlap the tensor before" : "leave a hole", at);
      goto out;
    }
    if (t->end - t->begin != t->count * 4) {
      ret = cddp__fail(CDDP_INVALID_ARG, "%s: bad header: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64 " bytes, its shape needs %" PRIu64,
                       p->what, t->name, t->begin, t->end, t->end - t->begin, t->count * 4);
      goto out;
    }
    at = t->end;
  }
  if (at != f->data_len)
    ret = cddp__fail(CDDP_INVALID_ARG, "%s: bad header: the tensors cover %" PRIu64 " bytes but the file holds %" PRIu64 " data bytes%s",
                     p->what, at, f->data_len, at > f->data_len ? " (truncated?)" : "");
out:
  free(s), free(names);
  return ret;
}

cddp_result_t cddp__st_parse(const char *what, const uint8_t *buf, size_t len, cddp__st_file_t *out) {
  memset(out, 0, sizeof *out);
  parser_t p = {.what = what, .s = NULL, .len = 0, .pos = 0};
  cddp_result_t ret = CDDP_OK;
  if (len < 8) return cddp__fail(CDDP_INVALID_ARG, "%s: bad header: file of %zu bytes is shorter than the 8-byte header size", what, len);
  uint64_t n = 0;
  for (int i = 0; i < 8; i++) n |= (uint64_t)buf[i] << (8 * i);
  if (n > CDDP__ST_MAX_HEADER)
    return cddp__fail(CDDP_INVALID_ARG, "%s: bad header: header size %" PRIu64 " is over the %u-byte limit", what, n, CDDP__ST_MAX_HEADER);
  if (n > len - 8)
    return cddp__fail(CDDP_INVALID_ARG, "%s: bad header: header size %" PRIu64 " runs past the end of the %zu-byte file", what, n, len);
  p.s = buf + 8, p.len = (size_t)n;
  if (!utf8_valid(p.s, p.len)) return cddp__fail(CDDP_INVALID_ARG, "%s: bad header: not valid UTF-8", what);
  if (p.len == 0 || p.s[0] != '{') return cddp__fail(CDDP_INVALID_ARG, "%s: bad header: does not start with '{'", what);
  out->header_len = n;
  out->data = buf + 8 + n;
  out->data_len = len - 8 - n;
  int cap = 0, seen_meta = 0;
  CDDP_CHECK_GOTO(expect(&p, '{'), ret, fail);
  if (!accept(&p, '}')) {
    do {
      char *name;
      CDDP_CHECK_GOTO(parse_string(&p, CDDP__ST_MAX_NAME, &name), ret, fail);
      if ((ret = expect(&p, ':')) != CDDP_OK) { free(name); goto fail; }
      if (!strcmp(name, "__metadata__")) {
        free(name);
        if (seen_meta++) { ret = bad(&p, "__metadata__ appears twice"); goto fail; }
        CDDP_CHECK_GOTO(parse_metadata(&p, out), ret, fail);
        continue;
      }
      if (out->n >= CDDP__ST_MAX_TENSORS) { free(name); ret = bad(&p, "more than %d tensors", CDDP__ST_MAX_TENSORS); goto fail; }
      if (out->n == cap) {
        int ncap = cap ? cap * 2 : 16;
        cddp__st_tensor_t *nt = realloc(out->t, (size_t)ncap * sizeof *nt);
        if (!nt) { free(name); ret = bad(&p, "out of memory"); goto fail; }
        out->t = nt, cap = ncap;
      }
      cddp__st_tensor_t *t = &out->t[out->n++];
      memset(t, 0, sizeof *t);
      t->name = name;
      CDDP_CHECK_GOTO(parse_info(&p, t), ret, fail);
    } while (accept(&p, ','));
    CDDP_CHECK_GOTO(expect(&p, '}'), ret, fail);
  }
  skip_ws(&p);
  if (p.pos != p.len) { ret = bad(&p, "trailing bytes after the JSON object"); goto fail; }
  CDDP_CHECK_GOTO(validate(&p, out), ret, fail);
  return CDDP_OK;
fail:
  cddp__st_free(out);
  return ret;
}

void cddp__st_free(cddp__st_file_t *f) {
  for (int i = 0; i < f->n; i++) free(f->t[i].name);
  for (int i = 0; i < f->n_meta; i++) free(f->keys[i]), free(f->vals[i]);
  free(f->t), free(f->keys), free(f->vals);
  memset(f, 0, sizeof *f);
}

const cddp__st_tensor_t *cddp__st_find(const cddp__st_file_t *f, const char *name) {
  for (int i = 0; i < f->n; i++)
    if (!strcmp(f->t[i].name, name)) return &f->t[i];
  return NULL;
}

const char *cddp__st_meta(const cddp__st_file_t *f, const char *key) {
  for (int i = 0; i < f->n_meta; i++)
    if (!strcmp(f->keys[i], key)) return f->vals[i];
  return NULL;
}

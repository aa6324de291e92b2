/* wire.c - frame parser, message decoding with every limit checked, encoder, HMAC and nonces. */
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "store/wire.h"

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int cddp__wire_parse(const uint8_t *buf, size_t n, uint32_t max_len, cddp__wire_frame_t *f,
                     size_t *used, const char **err) {
  *used = 0;
  if (n < CDDP__WIRE_HDR) return CDDP__WIRE_NEED_MORE;
  uint32_t len = rd32(buf);
  if (len == 0) {
    *err = "frame of length 0";
    return CDDP__WIRE_ERROR;
  }
  if (len > max_len) {
    *err = "frame longer than the limit";
    return CDDP__WIRE_ERROR;
  }
  *used = CDDP__WIRE_HDR + (size_t)len;
  if (n < *used) return CDDP__WIRE_NEED_MORE;
  f->op = buf[CDDP__WIRE_HDR];
  f->payload = buf + CDDP__WIRE_HDR + 1;
  f->plen = len - 1;
  return CDDP__WIRE_FRAME;
}

/* A bounds-checked reader over a payload. */
typedef struct rd {
  const uint8_t *p;
  size_t left;
  const char *err;
} rd_t;

static int need(rd_t *r, size_t n, const char *what) {
  if (r->err) return 0;
  if (r->left < n) {
    r->err = what;
    return 0;
  }
  return 1;
}
static uint8_t get8(rd_t *r) {
  if (!need(r, 1, "truncated message")) return 0;
  r->left--;
  return *r->p++;
}
static uint16_t get16(rd_t *r) {
  if (!need(r, 2, "truncated message")) return 0;
  uint16_t v = (uint16_t)(r->p[0] | r->p[1] << 8);
  r->p += 2, r->left -= 2;
  return v;
}
static uint32_t get32(rd_t *r) {
  if (!need(r, 4, "truncated message")) return 0;
  uint32_t v = rd32(r->p);
  r->p += 4, r->left -= 4;
  return v;
}
static uint64_t get64(rd_t *r) {
  uint64_t lo = get32(r);
  return lo | (uint64_t)get32(r) << 32;
}
static const uint8_t *getraw(rd_t *r, size_t n) {
  if (!need(r, n, "truncated message")) return NULL;
  const uint8_t *p = r->p;
  r->p += n, r->left -= n;
  return p;
}
static cddp__wire_str_t getbytes(rd_t *r, uint32_t max, const char *toolong) {
  cddp__wire_str_t s = {"", 0};
  uint32_t n = get32(r);
  if (r->err) return s;
  if (n > max) {
    r->err = toolong;
    return s;
  }
  const uint8_t *p = getraw(r, n);
  if (p) s.p = (const char *)p, s.n = n;
  return s;
}
static cddp__wire_str_t getkey(rd_t *r) {
  cddp__wire_str_t k = getbytes(r, CDDP_STORE_MAX_KEY, "key longer than the limit");
  if (!r->err && k.n == 0) r->err = "empty key";
  if (!r->err && memchr(k.p, 0, k.n)) r->err = "key contains a NUL byte";
  return k;
}
static int finish(rd_t *r, const char **err) {
  if (!r->err && r->left) r->err = "trailing bytes after the message";
  if (r->err) {
    *err = r->err;
    return -1;
  }
  return 0;
}

int cddp__wire_decode_request(const cddp__wire_frame_t *f, cddp__wire_msg_t *m, const char **err) {
  rd_t r = {f->payload, f->plen, NULL};
  memset(m, 0, sizeof *m);
  m->op = f->op;
  switch (f->op) {
    case CDDP__OP_HELLO:
      m->magic = get32(&r);
      m->version = get16(&r);
      break;
    case CDDP__OP_AUTH:
      m->nonce = getraw(&r, CDDP__WIRE_NONCE);
      m->mac = getraw(&r, CDDP__WIRE_MAC);
      break;
    case CDDP__OP_SET:
      m->key = getkey(&r);
      m->val = getbytes(&r, CDDP_STORE_MAX_VALUE, "value larger than the limit");
      break;
    case CDDP__OP_GET:
      m->timeout_ms = get32(&r);
      m->key = getkey(&r);
      break;
    case CDDP__OP_ADD:
      m->num = (int64_t)get64(&r);
      m->key = getkey(&r);
      break;
    case CDDP__OP_CAS:
      m->key = getkey(&r);
      m->flag = get8(&r);
      if (!r.err && m->flag > 1) r.err = "bad has_expected flag";
      m->expected = getbytes(&r, CDDP_STORE_MAX_VALUE, "value larger than the limit");
      m->val = getbytes(&r, CDDP_STORE_MAX_VALUE, "value larger than the limit");
      break;
    case CDDP__OP_WAIT:
      m->timeout_ms = get32(&r);
      m->nkeys = get32(&r);
      if (!r.err && (m->nkeys == 0 || m->nkeys > CDDP__STORE_MAX_WAIT_KEYS))
        r.err = "bad number of keys in WAIT";
      m->keys = r.p;
      for (uint32_t i = 0; i < m->nkeys && !r.err; i++) getkey(&r);
      break;
    case CDDP__OP_DEL:
      m->key = getkey(&r);
      break;
    case CDDP__OP_WILL:
      m->key = getkey(&r);
      m->val = getbytes(&r, CDDP_STORE_MAX_VALUE, "value larger than the limit");
      break;
    case CDDP__OP_NUMKEYS:
    case CDDP__OP_BYE:
      break;
    default:
      *err = "unknown request opcode";
      return -1;
  }
  return finish(&r, err);
}

int cddp__wire_decode_response(const cddp__wire_frame_t *f, cddp__wire_msg_t *m, const char **err) {
  rd_t r = {f->payload, f->plen, NULL};
  memset(m, 0, sizeof *m);
  m->op = f->op;
  switch (f->op) {
    case CDDP__OP_CHALLENGE:
      m->magic = get32(&r);
      m->version = get16(&r);
      m->flag = get8(&r);
      m->nonce = getraw(&r, CDDP__WIRE_NONCE);
      break;
    case CDDP__OP_AUTH_OK:
      m->mac = getraw(&r, CDDP__WIRE_MAC);
      break;
    case CDDP__OP_AUTH_FAIL:
    case CDDP__OP_OK:
      break;
    case CDDP__OP_VALUE:
      m->flag = get8(&r);
      m->val = getbytes(&r, CDDP_STORE_MAX_VALUE, "value larger than the limit");
      break;
    case CDDP__OP_INT:
      m->num = (int64_t)get64(&r);
      break;
    case CDDP__OP_TIMEOUT:
      m->index = get32(&r);
      break;
    case CDDP__OP_ERROR:
      m->flag = get8(&r);
      m->val = getbytes(&r, CDDP__WIRE_MAX_ERROR_TEXT, "error text longer than the limit");
      break;
    default:
      *err = "unknown response opcode";
      return -1;
  }
  return finish(&r, err);
}

cddp__wire_str_t cddp__wire_next_key(const uint8_t **cursor) {
  cddp__wire_str_t k;
  k.n = rd32(*cursor);
  k.p = (const char *)*cursor + 4;
  *cursor += 4 + (size_t)k.n;
  return k;
}

/* ---- encoder ---- */

void cddp__wire_buf_free(cddp__wire_buf_t *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

int cddp__wire_reserve(cddp__wire_buf_t *b, size_t extra) {
  if (b->oom) return -1;
  if (b->len + extra <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra) cap *= 2;
  uint8_t *p = realloc(b->p, cap);
  if (!p) {
    b->oom = 1;
    return -1;
  }
  b->p = p;
  b->cap = cap;
  return 0;
}

void cddp__wire_raw(cddp__wire_buf_t *b, const void *p, size_t n) {
  if (cddp__wire_reserve(b, n)) return;
  if (n) memcpy(b->p + b->len, p, n);
  b->len += n;
}
void cddp__wire_u8(cddp__wire_buf_t *b, uint8_t v) { cddp__wire_raw(b, &v, 1); }
void cddp__wire_u16(cddp__wire_buf_t *b, uint16_t v) {
  uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
  cddp__wire_raw(b, x, 2);
}
void cddp__wire_u32(cddp__wire_buf_t *b, uint32_t v) {
  uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  cddp__wire_raw(b, x, 4);
}
void cddp__wire_u64(cddp__wire_buf_t *b, uint64_t v) {
  cddp__wire_u32(b, (uint32_t)v);
  cddp__wire_u32(b, (uint32_t)(v >> 32));
}
void cddp__wire_str(cddp__wire_buf_t *b, const void *p, size_t n) {
  cddp__wire_u32(b, (uint32_t)n);
  cddp__wire_raw(b, p, n);
}

size_t cddp__wire_begin(cddp__wire_buf_t *b, uint8_t op) {
  size_t start = b->len;
  cddp__wire_u32(b, 0);
  cddp__wire_u8(b, op);
  return start;
}

void cddp__wire_end(cddp__wire_buf_t *b, size_t start) {
  if (b->oom) return;
  uint32_t len = (uint32_t)(b->len - start - CDDP__WIRE_HDR);
  uint8_t x[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16), (uint8_t)(len >> 24)};
  memcpy(b->p + start, x, 4);
}

int cddp__wire_mac(const char *token, const uint8_t *a, const uint8_t *b, uint8_t *out) {
  uint8_t msg[2 * CDDP__WIRE_NONCE];
  unsigned int outlen = CDDP__WIRE_MAC;
  static const char empty_key[1] = {0};
  memcpy(msg, a, CDDP__WIRE_NONCE);
  memcpy(msg + CDDP__WIRE_NONCE, b, CDDP__WIRE_NONCE);
  size_t tl = token ? strlen(token) : 0;
  if (!HMAC(EVP_sha256(), tl ? token : empty_key, (int)tl, msg, sizeof msg, out, &outlen) ||
      outlen != CDDP__WIRE_MAC)
    return -1;
  return 0;
}

int cddp__wire_nonce(uint8_t *out) {
  size_t got = 0;
  while (got < CDDP__WIRE_NONCE) {
    ssize_t r = getrandom(out + got, CDDP__WIRE_NONCE - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

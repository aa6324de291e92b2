/* wire.h - the store's wire format: frames, opcodes, limits, a pure parser and an encoder. */
#ifndef CDDP_STORE_WIRE_H
#define CDDP_STORE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/store.h"
#include "store/store_internal.h"

/* A frame is [u32 len][u8 op][payload], little-endian; len counts op + payload (>= 1).
 * Strings ("key", "bytes") are [u32 n][n bytes]. Keys are 1..CDDP_STORE_MAX_KEY bytes
 * with no NUL inside; values at most CDDP_STORE_MAX_VALUE bytes. */
#define CDDP__WIRE_MAGIC 0x50444443u /* "CDDP" in little-endian byte order */
#define CDDP__WIRE_VERSION 1
#define CDDP__WIRE_NONCE 32
#define CDDP__WIRE_MAC 32
#define CDDP__WIRE_HDR 4
/* The largest len: a CAS request (1 + key + two values + their three lengths + flag),
 * which is larger than a WAIT of CDDP__STORE_MAX_WAIT_KEYS maximal keys. */
#define CDDP__WIRE_MAX_LEN (1u + 13u + CDDP_STORE_MAX_KEY + 2u * CDDP_STORE_MAX_VALUE)
/* Before a connection is authenticated only handshake frames are legal. */
#define CDDP__WIRE_MAX_LEN_HANDSHAKE 128u
#define CDDP__WIRE_MAX_ERROR_TEXT 256u

enum cddp__wire_op {
  /* client -> server */
  CDDP__OP_HELLO = 0x01,   /* u32 magic, u16 version */
  CDDP__OP_AUTH = 0x02,    /* client nonce[32], mac[32] = HMAC(token, server_nonce||client_nonce) */
  CDDP__OP_SET = 0x10,     /* key, bytes value                         -> OK */
  CDDP__OP_GET = 0x11,     /* u32 timeout_ms, key                      -> VALUE | TIMEOUT */
  CDDP__OP_ADD = 0x12,     /* i64 delta, key                           -> INT | ERROR */
  CDDP__OP_CAS = 0x13,     /* key, u8 has_expected, bytes exp, bytes desired -> VALUE */
  CDDP__OP_WAIT = 0x14,    /* u32 timeout_ms, u32 nkeys, key * nkeys   -> OK | TIMEOUT */
  CDDP__OP_DEL = 0x15,     /* key                                      -> INT (existed) */
  CDDP__OP_NUMKEYS = 0x16, /* (empty)                                  -> INT */
  CDDP__OP_WILL = 0x17,    /* key, bytes value: set key=value if this connection ends without
                              BYE (a crash, a reset); a later WILL replaces it -> OK */
  CDDP__OP_BYE = 0x18,     /* (empty): a proper goodbye, the will is dropped -> OK */
  /* server -> client */
  CDDP__OP_CHALLENGE = 0x81, /* u32 magic, u16 version, u8 auth_required, server nonce[32] */
  CDDP__OP_AUTH_OK = 0x82,   /* mac[32] = HMAC(token, client_nonce||server_nonce) */
  CDDP__OP_AUTH_FAIL = 0x83, /* (empty); the server closes the connection */
  CDDP__OP_OK = 0x90,        /* (empty) */
  CDDP__OP_VALUE = 0x91,     /* u8 present, bytes value */
  CDDP__OP_INT = 0x92,       /* i64 */
  CDDP__OP_TIMEOUT = 0x93,   /* u32 index of the first missing key */
  CDDP__OP_ERROR = 0x94,     /* u8 cddp_result_t, bytes message (<= 256) */
};

typedef struct cddp__wire_frame {
  uint8_t op;
  const uint8_t *payload;
  uint32_t plen;
} cddp__wire_frame_t;

enum { CDDP__WIRE_ERROR = -1, CDDP__WIRE_NEED_MORE = 0, CDDP__WIRE_FRAME = 1 };

/* Pure: looks at n bytes of buf. FRAME: *f points into buf and *used is the frame's
 * size; NEED_MORE: an incomplete frame (*used = bytes the whole frame needs when the
 * header is known, else 0); ERROR: *err says why (len 0 or above max_len). */
int cddp__wire_parse(const uint8_t *buf, size_t n, uint32_t max_len, cddp__wire_frame_t *f,
                     size_t *used, const char **err);

typedef struct cddp__wire_str {
  const char *p;
  uint32_t n;
} cddp__wire_str_t;

/* A decoded message; pointers point into the frame. */
typedef struct cddp__wire_msg {
  uint8_t op;
  uint32_t magic, timeout_ms, nkeys, index;
  uint16_t version;
  uint8_t flag; /* CHALLENGE: auth required; CAS: has_expected; VALUE: present; ERROR: code */
  int64_t num;  /* ADD delta, INT value */
  cddp__wire_str_t key, val, expected; /* val: SET value, CAS desired, VALUE, ERROR text */
  const uint8_t *nonce, *mac;
  const uint8_t *keys; /* WAIT: nkeys keys, read them with cddp__wire_next_key */
} cddp__wire_msg_t;

/* Decodes and validates a request (client -> server) or a response. 0, or -1 with *err. */
int cddp__wire_decode_request(const cddp__wire_frame_t *f, cddp__wire_msg_t *m, const char **err);
int cddp__wire_decode_response(const cddp__wire_frame_t *f, cddp__wire_msg_t *m, const char **err);
/* Walks the (already validated) keys of a WAIT: *cursor starts at m->keys. */
cddp__wire_str_t cddp__wire_next_key(const uint8_t **cursor);

/* A growable output buffer; an allocation failure sets oom and drops later writes. */
typedef struct cddp__wire_buf {
  uint8_t *p;
  size_t len, cap, off; /* off: bytes already sent (owner's use) */
  int oom;
} cddp__wire_buf_t;

void cddp__wire_buf_free(cddp__wire_buf_t *b);
int cddp__wire_reserve(cddp__wire_buf_t *b, size_t extra);
/* Starts a frame (returns its start offset); cddp__wire_end patches its length. */
size_t cddp__wire_begin(cddp__wire_buf_t *b, uint8_t op);
void cddp__wire_end(cddp__wire_buf_t *b, size_t start);
void cddp__wire_u8(cddp__wire_buf_t *b, uint8_t v);
void cddp__wire_u16(cddp__wire_buf_t *b, uint16_t v);
void cddp__wire_u32(cddp__wire_buf_t *b, uint32_t v);
void cddp__wire_u64(cddp__wire_buf_t *b, uint64_t v);
void cddp__wire_raw(cddp__wire_buf_t *b, const void *p, size_t n);
void cddp__wire_str(cddp__wire_buf_t *b, const void *p, size_t n); /* u32 n + bytes */

/* HMAC-SHA256(token, a[32] || b[32]) into out[32]. 0, or -1 when libcrypto fails. */
int cddp__wire_mac(const char *token, const uint8_t *a, const uint8_t *b, uint8_t *out);
/* 32 random bytes (getrandom). 0 or -1. */
int cddp__wire_nonce(uint8_t *out);

#endif /* CDDP_STORE_WIRE_H */

/* test_store_wire.c - the frame parser and message decoding, driven over byte buffers. */
#include <stdio.h>
#include <string.h>

#include "store/server_core.h"
#include "store/wire.h"
#include "test.h"

static int parse(const cddp__wire_buf_t *b, size_t n, uint32_t max, cddp__wire_frame_t *f,
                 size_t *used, const char **err) {
  return cddp__wire_parse(b->p, n, max, f, used, err);
}

TEST(parse_truncated_frames_need_more) {
  cddp__wire_buf_t b = {0};
  size_t st = cddp__wire_begin(&b, CDDP__OP_SET);
  cddp__wire_str(&b, "key", 3);
  cddp__wire_str(&b, "value", 5);
  cddp__wire_end(&b, st);
  cddp__wire_frame_t f;
  size_t used;
  const char *err = NULL;
  for (size_t n = 0; n < b.len; n++) {
    CHECK_EQ(parse(&b, n, CDDP__WIRE_MAX_LEN, &f, &used, &err), CDDP__WIRE_NEED_MORE);
    if (n >= 4) CHECK_EQ(used, b.len); /* the header tells how much is needed */
  }
  CHECK_EQ(parse(&b, b.len, CDDP__WIRE_MAX_LEN, &f, &used, &err), CDDP__WIRE_FRAME);
  CHECK_EQ(used, b.len);
  CHECK_EQ(f.op, CDDP__OP_SET);
  CHECK_EQ(f.plen, 4 + 3 + 4 + 5);
  cddp__wire_msg_t m;
  CHECK_EQ(cddp__wire_decode_request(&f, &m, &err), 0);
  CHECK(m.key.n == 3 && !memcmp(m.key.p, "key", 3));
  CHECK(m.val.n == 5 && !memcmp(m.val.p, "value", 5));
  /* two frames back to back: the parser takes the first only */
  cddp__wire_raw(&b, b.p, b.len);
  CHECK_EQ(parse(&b, b.len, CDDP__WIRE_MAX_LEN, &f, &used, &err), CDDP__WIRE_FRAME);
  CHECK_EQ(used, b.len / 2);
  /* a truncated payload (frame length too short for its fields) fails decoding */
  cddp__wire_buf_t t = {0};
  st = cddp__wire_begin(&t, CDDP__OP_SET);
  cddp__wire_u32(&t, 10); /* key of 10 bytes announced, 2 present */
  cddp__wire_raw(&t, "ab", 2);
  cddp__wire_end(&t, st);
  CHECK_EQ(parse(&t, t.len, CDDP__WIRE_MAX_LEN, &f, &used, &err), CDDP__WIRE_FRAME);
  CHECK_EQ(cddp__wire_decode_request(&f, &m, &err), -1);
  CHECK(strstr(err, "truncated") != NULL);
  cddp__wire_buf_free(&t);
  cddp__wire_buf_free(&b);
}

TEST(parse_rejects_oversize_and_empty_lengths) {
  uint8_t hdr[5] = {0xff, 0xff, 0xff, 0x7f, CDDP__OP_SET};
  cddp__wire_frame_t f;
  size_t used;
  const char *err = NULL;
  CHECK_EQ(cddp__wire_parse(hdr, 4, CDDP__WIRE_MAX_LEN, &f, &used, &err), CDDP__WIRE_ERROR);
  CHECK(strstr(err, "limit") != NULL);
  uint32_t len = CDDP__WIRE_MAX_LEN + 1;
  memcpy(hdr, &len, 4); /* little-endian host */
  CHECK_EQ(cddp__wire_parse(hdr, 5, CDDP__WIRE_MAX_LEN, &f, &used, &err), CDDP__WIRE_ERROR);
  len = CDDP__WIRE_MAX_LEN; /* exactly the limit is fine (needs more bytes) */
  memcpy(hdr, &len, 4);
  CHECK_EQ(cddp__wire_parse(hdr, 5, CDDP__WIRE_MAX_LEN, &f, &used, &err), CDDP__WIRE_NEED_MORE);
  len = 200; /* handshake frames are held to a small bound */
  memcpy(hdr, &len, 4);
  CHECK_EQ(cddp__wire_parse(hdr, 5, CDDP__WIRE_MAX_LEN_HANDSHAKE, &f, &used, &err), CDDP__WIRE_ERROR);
  memset(hdr, 0, 4);
  CHECK_EQ(cddp__wire_parse(hdr, 5, CDDP__WIRE_MAX_LEN, &f, &used, &err), CDDP__WIRE_ERROR);
}

static int decode_one(cddp__wire_buf_t *b, const char **err) {
  cddp__wire_frame_t f;
  cddp__wire_msg_t m;
  size_t used;
  if (cddp__wire_parse(b->p, b->len, CDDP__WIRE_MAX_LEN, &f, &used, err) != CDDP__WIRE_FRAME) return -2;
  return cddp__wire_decode_request(&f, &m, err);
}

TEST(decode_rejects_bad_fields) {
  const char *err;
  cddp__wire_buf_t b = {0};
  size_t st = cddp__wire_begin(&b, 0x7e); /* unknown opcode */
  cddp__wire_end(&b, st);
  CHECK_EQ(decode_one(&b, &err), -1);
  CHECK(strstr(err, "unknown") != NULL);
  b.len = 0; /* key longer than the limit */
  st = cddp__wire_begin(&b, CDDP__OP_DEL);
  static char big[CDDP_STORE_MAX_KEY + 1];
  memset(big, 'k', sizeof big);
  cddp__wire_str(&b, big, sizeof big);
  cddp__wire_end(&b, st);
  CHECK_EQ(decode_one(&b, &err), -1);
  CHECK(strstr(err, "key longer") != NULL);
  b.len = 0; /* key with a NUL */
  st = cddp__wire_begin(&b, CDDP__OP_DEL);
  cddp__wire_str(&b, "a\0b", 3);
  cddp__wire_end(&b, st);
  CHECK_EQ(decode_one(&b, &err), -1);
  b.len = 0; /* value larger than the limit (length field only) */
  st = cddp__wire_begin(&b, CDDP__OP_SET);
  cddp__wire_str(&b, "k", 1);
  cddp__wire_u32(&b, CDDP_STORE_MAX_VALUE + 1);
  cddp__wire_end(&b, st);
  CHECK_EQ(decode_one(&b, &err), -1);
  CHECK(strstr(err, "value larger") != NULL);
  b.len = 0; /* WILL: a key and a value; BYE: nothing after it */
  st = cddp__wire_begin(&b, CDDP__OP_WILL);
  cddp__wire_str(&b, "dead/1", 6);
  cddp__wire_str(&b, "x", 1);
  cddp__wire_end(&b, st);
  CHECK_EQ(decode_one(&b, &err), 0);
  b.len = 0;
  st = cddp__wire_begin(&b, CDDP__OP_WILL);
  cddp__wire_str(&b, "", 0);
  cddp__wire_str(&b, "x", 1);
  cddp__wire_end(&b, st);
  CHECK_EQ(decode_one(&b, &err), -1);
  b.len = 0;
  st = cddp__wire_begin(&b, CDDP__OP_BYE);
  cddp__wire_u8(&b, 0);
  cddp__wire_end(&b, st);
  CHECK_EQ(decode_one(&b, &err), -1);
  b.len = 0; /* trailing bytes */
  st = cddp__wire_begin(&b, CDDP__OP_NUMKEYS);
  cddp__wire_u8(&b, 1);
  cddp__wire_end(&b, st);
  CHECK_EQ(decode_one(&b, &err), -1);
  CHECK(strstr(err, "trailing") != NULL);
  b.len = 0; /* WAIT with zero keys, and with too many */
  st = cddp__wire_begin(&b, CDDP__OP_WAIT);
  cddp__wire_u32(&b, 10);
  cddp__wire_u32(&b, 0);
  cddp__wire_end(&b, st);
  CHECK_EQ(decode_one(&b, &err), -1);
  b.len = 0;
  st = cddp__wire_begin(&b, CDDP__OP_WAIT);
  cddp__wire_u32(&b, 10);
  cddp__wire_u32(&b, 0xffffffffu);
  cddp__wire_end(&b, st);
  CHECK_EQ(decode_one(&b, &err), -1);
  b.len = 0; /* a good WAIT decodes and its keys walk */
  st = cddp__wire_begin(&b, CDDP__OP_WAIT);
  cddp__wire_u32(&b, 10);
  cddp__wire_u32(&b, 2);
  cddp__wire_str(&b, "a", 1);
  cddp__wire_str(&b, "bc", 2);
  cddp__wire_end(&b, st);
  cddp__wire_frame_t f;
  cddp__wire_msg_t m;
  size_t used;
  CHECK_EQ(cddp__wire_parse(b.p, b.len, CDDP__WIRE_MAX_LEN, &f, &used, &err), CDDP__WIRE_FRAME);
  CHECK_EQ(cddp__wire_decode_request(&f, &m, &err), 0);
  const uint8_t *cur = m.keys;
  cddp__wire_str_t k1 = cddp__wire_next_key(&cur), k2 = cddp__wire_next_key(&cur);
  CHECK(k1.n == 1 && k1.p[0] == 'a' && k2.n == 2 && !memcmp(k2.p, "bc", 2));
  cddp__wire_buf_free(&b);
}

/* The server engine, over buffers: bad magic closes, a wrong version is answered then
 * closed, garbage closes, a good session works, and parked waits wake. */
static cddp__srv_conn_t *feed(cddp__srv_core_t *core, cddp__srv_conn_t *c, const cddp__wire_buf_t *b,
                              int *rc) {
  cddp__wire_raw(&c->in, b->p, b->len);
  *rc = cddp__core_process(core, c);
  return c;
}

static void hello(cddp__wire_buf_t *b, uint32_t magic, uint16_t version) {
  size_t st = cddp__wire_begin(b, CDDP__OP_HELLO);
  cddp__wire_u32(b, magic);
  cddp__wire_u16(b, version);
  cddp__wire_end(b, st);
}

TEST(engine_handshake_and_garbage) {
  cddp__srv_core_t core;
  CHECK_OK(cddp__core_init(&core, NULL));
  cddp__srv_conn_t c;
  int rc;
  cddp__wire_buf_t b = {0};
  /* bad magic */
  cddp__conn_init(&c, "test:1");
  hello(&b, 0x12345678, CDDP__WIRE_VERSION);
  feed(&core, &c, &b, &rc);
  CHECK_EQ(rc, -1);
  cddp__conn_release(&core, &c);
  /* wrong version: answered with our CHALLENGE, then closing */
  cddp__conn_init(&c, "test:2");
  b.len = 0;
  hello(&b, CDDP__WIRE_MAGIC, 99);
  feed(&core, &c, &b, &rc);
  CHECK_EQ(rc, 0);
  CHECK_EQ(c.closing, 1);
  CHECK(c.out.len > 5 && c.out.p[4] == CDDP__OP_CHALLENGE);
  cddp__conn_release(&core, &c);
  /* HTTP garbage: the length field is huge for a handshake */
  cddp__conn_init(&c, "test:3");
  b.len = 0;
  cddp__wire_raw(&b, "GET / HTTP/1.1\r\n\r\n", 18);
  feed(&core, &c, &b, &rc);
  CHECK_EQ(rc, -1);
  cddp__conn_release(&core, &c);
  /* a request before the hello */
  cddp__conn_init(&c, "test:4");
  b.len = 0;
  size_t st = cddp__wire_begin(&b, CDDP__OP_NUMKEYS);
  cddp__wire_end(&b, st);
  feed(&core, &c, &b, &rc);
  CHECK_EQ(rc, -1);
  cddp__conn_release(&core, &c);
  /* a good session: hello, then a SET and a parked WAIT woken by a second conn */
  cddp__srv_conn_t c2;
  cddp__conn_init(&c, "test:5");
  cddp__conn_init(&c2, "test:6");
  b.len = 0;
  hello(&b, CDDP__WIRE_MAGIC, CDDP__WIRE_VERSION);
  st = cddp__wire_begin(&b, CDDP__OP_WAIT);
  cddp__wire_u32(&b, 60000);
  cddp__wire_u32(&b, 1);
  cddp__wire_str(&b, "go", 2);
  cddp__wire_end(&b, st);
  feed(&core, &c, &b, &rc);
  CHECK_EQ(rc, 0);
  CHECK_EQ(c.parked, 1);
  CHECK(cddp__core_next_deadline(&core) != UINT64_MAX);
  b.len = 0;
  hello(&b, CDDP__WIRE_MAGIC, CDDP__WIRE_VERSION);
  st = cddp__wire_begin(&b, CDDP__OP_SET);
  cddp__wire_str(&b, "go", 2);
  cddp__wire_str(&b, "1", 1);
  cddp__wire_end(&b, st);
  size_t before = c.out.len;
  feed(&core, &c2, &b, &rc);
  CHECK_EQ(rc, 0);
  CHECK_EQ(c.parked, 0);
  CHECK(cddp__core_pop_ready(&core) == &c);
  CHECK(cddp__core_pop_ready(&core) == NULL);
  CHECK(c.out.len == before + 5 && c.out.p[before + 4] == CDDP__OP_OK);
  CHECK_EQ(cddp__core_next_deadline(&core), UINT64_MAX);
  cddp__conn_release(&core, &c);
  cddp__conn_release(&core, &c2);
  cddp__wire_buf_free(&b);
  cddp__core_free(&core);
}

/* A created key re-checks only the parked waits that miss it (the waiter index): a wait on "a"
 * then "b" is looked at again for "a" and "b", never for another key. */
static void send_wait(cddp__srv_core_t *core, cddp__srv_conn_t *c, const char *const *keys, uint32_t n) {
  cddp__wire_buf_t b = {0};
  int rc;
  hello(&b, CDDP__WIRE_MAGIC, CDDP__WIRE_VERSION);
  size_t st = cddp__wire_begin(&b, CDDP__OP_WAIT);
  cddp__wire_u32(&b, 60000);
  cddp__wire_u32(&b, n);
  for (uint32_t i = 0; i < n; i++) cddp__wire_str(&b, keys[i], strlen(keys[i]));
  cddp__wire_end(&b, st);
  feed(core, c, &b, &rc);
  cddp__wire_buf_free(&b);
}

static void send_set(cddp__srv_core_t *core, cddp__srv_conn_t *c, const char *key, int hello_first) {
  cddp__wire_buf_t b = {0};
  int rc;
  if (hello_first) hello(&b, CDDP__WIRE_MAGIC, CDDP__WIRE_VERSION);
  size_t st = cddp__wire_begin(&b, CDDP__OP_SET);
  cddp__wire_str(&b, key, strlen(key));
  cddp__wire_str(&b, "1", 1);
  cddp__wire_end(&b, st);
  feed(core, c, &b, &rc);
  cddp__wire_buf_free(&b);
}

TEST(engine_wakes_only_the_waits_for_a_created_key) {
  cddp__srv_core_t core;
  CHECK_OK(cddp__core_init(&core, NULL));
  cddp__srv_conn_t w1, w2, setter;
  cddp__conn_init(&w1, "test:w1");
  cddp__conn_init(&w2, "test:w2");
  cddp__conn_init(&setter, "test:s");
  const char *ab[] = {"a", "b"}, *x[] = {"x"};
  send_wait(&core, &w1, ab, 2);
  send_wait(&core, &w2, x, 1);
  CHECK(w1.parked && w2.parked);
  for (int i = 0; i < 50; i++) { /* keys nobody waits for: no re-check at all */
    char k[24]; /* "other" and any int */
    snprintf(k, sizeof k, "other%d", i);
    send_set(&core, &setter, k, i == 0);
  }
  CHECK_EQ(core.n_rechecks, 0);
  send_set(&core, &setter, "x", 0);
  CHECK(!w2.parked && w1.parked);
  CHECK_EQ(core.n_rechecks, 1);
  send_set(&core, &setter, "a", 0); /* w1 now misses "b" */
  CHECK(w1.parked);
  send_set(&core, &setter, "x2", 0);
  CHECK_EQ(core.n_rechecks, 2);
  send_set(&core, &setter, "b", 0);
  CHECK(!w1.parked);
  CHECK_EQ(core.n_rechecks, 3);
  cddp__conn_release(&core, &w1);
  cddp__conn_release(&core, &w2);
  cddp__conn_release(&core, &setter);
  cddp__core_free(&core);
}

TEST(engine_requires_auth_when_token_set) {
  cddp__srv_core_t core;
  CHECK_OK(cddp__core_init(&core, "tok"));
  cddp__srv_conn_t c;
  cddp__conn_init(&c, "test:7");
  cddp__wire_buf_t b = {0};
  int rc;
  hello(&b, CDDP__WIRE_MAGIC, CDDP__WIRE_VERSION);
  feed(&core, &c, &b, &rc);
  CHECK_EQ(rc, 0);
  CHECK_EQ(c.state, CDDP__CONN_AUTH);
  b.len = 0; /* skipping AUTH closes */
  size_t st = cddp__wire_begin(&b, CDDP__OP_NUMKEYS);
  cddp__wire_end(&b, st);
  feed(&core, &c, &b, &rc);
  CHECK_EQ(rc, -1);
  cddp__conn_release(&core, &c);
  /* a wrong MAC is refused with AUTH_FAIL */
  cddp__conn_init(&c, "test:8");
  b.len = 0;
  hello(&b, CDDP__WIRE_MAGIC, CDDP__WIRE_VERSION);
  uint8_t zeros[64] = {0};
  st = cddp__wire_begin(&b, CDDP__OP_AUTH);
  cddp__wire_raw(&b, zeros, 64);
  cddp__wire_end(&b, st);
  feed(&core, &c, &b, &rc);
  CHECK_EQ(rc, 0);
  CHECK_EQ(c.closing, 1);
  CHECK_EQ(c.state, CDDP__CONN_AUTH);
  CHECK(c.out.p[c.out.len - 1] == CDDP__OP_AUTH_FAIL);
  cddp__conn_release(&core, &c);
  cddp__wire_buf_free(&b);
  cddp__core_free(&core);
}

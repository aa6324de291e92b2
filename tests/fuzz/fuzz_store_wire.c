/* fuzz_store_wire.c - libFuzzer target: the frame parser, message decoding and the server's
 * protocol engine (handshake, requests, parked waits) over arbitrary bytes. */
#include <stdint.h>
#include <string.h>

#include "store/server_core.h"
#include "store/wire.h"

static void parse_all(const uint8_t *p, size_t n) {
  for (;;) {
    cddp__wire_frame_t f;
    cddp__wire_msg_t m;
    size_t used;
    const char *err;
    if (cddp__wire_parse(p, n, CDDP__WIRE_MAX_LEN, &f, &used, &err) != CDDP__WIRE_FRAME) return;
    if (cddp__wire_decode_request(&f, &m, &err) == 0 && m.op == CDDP__OP_WILL &&
        (m.key.n == 0 || m.key.n > CDDP_STORE_MAX_KEY || m.val.n > CDDP_STORE_MAX_VALUE))
      __builtin_trap();
    if (cddp__wire_decode_request(&f, &m, &err) == 0 && m.op == CDDP__OP_WAIT) {
      const uint8_t *cur = m.keys;
      for (uint32_t i = 0; i < m.nkeys; i++) {
        cddp__wire_str_t k = cddp__wire_next_key(&cur);
        if (k.n == 0 || k.n > CDDP_STORE_MAX_KEY) __builtin_trap();
      }
    }
    (void)cddp__wire_decode_response(&f, &m, &err);
    p += used, n -= used;
  }
}

/* Two connections share one engine; input chunks go to one or the other. */
static void engine(const uint8_t *p, size_t n, int hello, const char *token) {
  cddp__srv_core_t core;
  if (cddp__core_init(&core, token) != CDDP_OK) return;
  cddp__srv_conn_t c[2];
  int dead[2] = {0, 0};
  cddp__conn_init(&c[0], "fuzz:0");
  cddp__conn_init(&c[1], "fuzz:1");
  if (hello)
    for (int i = 0; i < 2; i++) {
      size_t st = cddp__wire_begin(&c[i].in, CDDP__OP_HELLO);
      cddp__wire_u32(&c[i].in, CDDP__WIRE_MAGIC);
      cddp__wire_u16(&c[i].in, CDDP__WIRE_VERSION);
      cddp__wire_end(&c[i].in, st);
    }
  while (n > 0) {
    int who = p[0] & 1;
    size_t len = (p[0] >> 1) + 1;
    p++, n--;
    if (len > n) len = n;
    if (!dead[who]) {
      cddp__wire_raw(&c[who].in, p, len);
      if (cddp__core_process(&core, &c[who]) != 0 || c[who].closing) {
        dead[who] = 1;
        cddp__conn_gone(&core, &c[who]); /* its will, if any, sets a key and wakes the other */
      }
      c[who].out.len = c[who].out.off = 0; /* "sent" */
    }
    p += len, n -= len;
    cddp__srv_conn_t *r;
    while ((r = cddp__core_pop_ready(&core))) {
      int i = r == &c[1];
      if (!dead[i] && cddp__core_process(&core, r) != 0) dead[i] = 1, cddp__conn_gone(&core, r);
    }
  }
  cddp__core_expire(&core, UINT64_MAX);
  cddp__srv_conn_t *r;
  while ((r = cddp__core_pop_ready(&core))) (void)r;
  cddp__conn_release(&core, &c[0]);
  cddp__conn_release(&core, &c[1]);
  cddp__core_free(&core);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  switch (data[0] % 4) {
    case 0: parse_all(data + 1, size - 1); break;
    case 1: engine(data + 1, size - 1, 1, NULL); break;
    case 2: engine(data + 1, size - 1, 0, NULL); break;
    default: engine(data + 1, size - 1, 0, "tok"); break;
  }
  return 0;
}

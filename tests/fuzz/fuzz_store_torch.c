/* fuzz_store_torch.c - libFuzzer target: the store server's torch TCPStore engine (1.x and 2.x,
 * store/torch_proto.c) and the first-bytes sniff that routes a connection to it, over arbitrary
 * bytes from two connections that share one engine (a WAIT of one, a SET of the other), and
 * the job's torch round changing under them (a new round's client closes the last round's). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/server_core.h"
#include "store/torch_proto.h"

static const uint8_t validate[] = {0, 0xCE, 0xF7, 0x85, 0x3C};

/* prefix: 0 none (the sniff decides), 1 a torch 2.x VALIDATE first; rounds: the round key's
 * value is the top bit of each chunk's header */
static void engine(const uint8_t *p, size_t n, int prefix, int rounds) {
  cddp__srv_core_t core;
  if (cddp__core_init(&core, NULL) != CDDP_OK) return;
  core.torch = 1;
  if (rounds && !(core.torch_round_key = strdup("job/torch/round"))) rounds = 0;
  cddp__srv_conn_t c[2];
  int dead[2] = {0, 0};
  cddp__conn_init(&c[0], "fuzz:0");
  cddp__conn_init(&c[1], "fuzz:1");
  if (prefix)
    for (int i = 0; i < 2; i++) cddp__wire_raw(&c[i].in, validate, sizeof validate);
  while (n > 0) {
    int who = p[0] & 1;
    size_t len = (p[0] >> 1) + 1;
    if (rounds) {
      int created;
      (void)cddp__kv_set(&core.kv, "job/torch/round", 15, p[0] >> 7 ? "1" : "0", 1, &created);
    }
    p++, n--;
    if (len > n) len = n;
    if (!dead[who]) {
      cddp__wire_raw(&c[who].in, p, len);
      if (cddp__core_process(&core, &c[who]) != 0 || c[who].closing) dead[who] = 1;
      c[who].out.len = c[who].out.off = 0; /* "sent" */
    }
    p += len, n -= len;
    cddp__srv_conn_t *r;
    while ((r = cddp__core_pop_ready(&core))) {
      int i = r == &c[1];
      if (!dead[i] && cddp__core_process(&core, r) != 0) dead[i] = 1;
    }
  }
  if (core.torch_kv.n > (size_t)1 << 20) __builtin_trap(); /* keys come from bytes: bounded */
  cddp__core_expire(&core, UINT64_MAX);
  cddp__srv_conn_t *r;
  while ((r = cddp__core_pop_ready(&core))) (void)r;
  cddp__conn_release(&core, &c[0]);
  cddp__conn_release(&core, &c[1]);
  cddp__core_free(&core);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint8_t sniff_in[16];
  size_t k = size - 1 < sizeof sniff_in ? size - 1 : sizeof sniff_in;
  memcpy(sniff_in, data + 1, k);
  int proto = cddp__torch_sniff(sniff_in, k);
  if (proto != -1 && proto != CDDP__PROTO_CDDP && proto != CDDP__PROTO_TORCH1 && proto != CDDP__PROTO_TORCH2)
    __builtin_trap();
  engine(data + 1, size - 1, data[0] & 1, data[0] & 2);
  return 0;
}

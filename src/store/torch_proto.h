/* torch_proto.h - torch's TCPStore wire protocol (1.x and 2.x) as a second engine of the store
 * server, over byte buffers like server_core.c: the server's epoll loop (store_server.c) feeds
 * it the connections whose first bytes are not a cddp hello, when the server serves torch
 * (cddp__store_server_start_torch). The agent serves its workers this way when they use
 * TORCHELASTIC_USE_AGENT_STORE, so no rank binds MASTER_PORT and none waits in a connect retry. */
#ifndef CDDP_STORE_TORCH_PROTO_H
#define CDDP_STORE_TORCH_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "store/server_core.h"

/* torch 2.x's client opens with VALIDATE (query 0) and this number; 1.x's has no handshake. */
#define CDDP__TORCH_MAGIC 0x3C85F7CEu

/* Which protocol a connection's first bytes say it speaks (CDDP__PROTO_*), or -1 when more
 * bytes are needed to tell. A cddp hello frame starts with its length byte, 7; torch's first
 * byte is a query (0..16); torch 2.x's is VALIDATE, 0, then the magic. */
int cddp__torch_sniff(const uint8_t *p, size_t n);

/* Serves every complete torch request in c->in (replies go to c->out) until c parks on a WAIT,
 * closes, or has too much unsent output. Keys live in core->torch_kv. -1: a protocol error or
 * a request not served (logged): close c now. */
int cddp__torch_process(cddp__srv_core_t *core, cddp__srv_conn_t *c);

#endif /* CDDP_STORE_TORCH_PROTO_H */

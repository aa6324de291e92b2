/* server_core.h - the store server's protocol engine over byte buffers (no sockets): the epoll
 * loop in store_server.c drives it, and so does the fuzzer. */
#ifndef CDDP_STORE_SERVER_CORE_H
#define CDDP_STORE_SERVER_CORE_H

#include <stdint.h>

#include "store/store_internal.h"
#include "store/wire.h"

enum { CDDP__CONN_HELLO, CDDP__CONN_AUTH, CDDP__CONN_READY };
/* What a connection speaks, told by its first bytes (torch_proto.h) when the server serves
 * torch too; else every connection is cddp's. */
enum { CDDP__PROTO_UNKNOWN, CDDP__PROTO_CDDP, CDDP__PROTO_TORCH1, CDDP__PROTO_TORCH2 };

#define CDDP__SRV_WAIT_BUCKETS 4096
#define CDDP__TORCH_ROUND_MAX 32 /* bytes of the round key's value that name a torch round */

/* One client connection as the engine sees it. The loop appends received bytes to in
 * (unconsumed bytes are [in.off, in.len)) and sends out from out.off. */
typedef struct cddp__srv_conn {
  int state;
  int proto;   /* CDDP__PROTO_* */
  int closing; /* 1: close once out is flushed (refused or wrong version) */
  int parked;  /* a GET/WAIT at the head of in waits for keys or its deadline */
  int requested; /* 1 once a whole request past the handshake came, cddp's or torch's (the
                  * server times out and sheds the others first) */
  uint64_t deadline;
  /* the pending GET/WAIT: opcode, keys found so far of pk_n, offset of the next key
   * from the frame's start (the frame sits at in.off), frame size */
  uint8_t pk_op;
  uint32_t pk_idx, pk_n;
  size_t pk_cur, pk_used;
  int on_ready;
  struct cddp__srv_conn *pnext, *pprev; /* parked list */
  /* a parked cddp wait sits in the waiter index under the hash of the key it misses, so that a
   * created key re-checks only the waits for it, not every parked connection */
  struct cddp__srv_conn *wnext, *wprev;
  uint64_t whash;
  int windexed;
  struct cddp__srv_conn *rnext;         /* ready list */
  cddp__wire_buf_t in, out;
  char *will_key;    /* WILL: set when the connection ends without BYE (NULL: none) */
  uint8_t *will_val;
  uint32_t will_klen;
  size_t will_vlen;
  uint8_t nonce[CDDP__WIRE_NONCE];
  /* a torch client's round: the round key's value when it came (core->torch_round_key) */
  char torch_round[CDDP__TORCH_ROUND_MAX];
  uint8_t torch_round_len;
  char addr[80];
} cddp__srv_conn_t;

typedef struct cddp__srv_core {
  cddp__kv_t kv;
  char *token; /* NULL: no authentication */
  int torch;          /* serve torch's TCPStore protocol too (torch_proto.c) */
  cddp__kv_t torch_kv; /* torch clients' keys: apart from the job's, as they do not authenticate */
  /* The torch keys belong to one round: the value of this key of the job's (NULL: one round for
   * ever). A torch client that comes when the value changed empties torch_kv, and the clients of
   * the round before are closed, so a restarted worker never reads the last round's keys. */
  char *torch_round_key;
  char torch_round[CDDP__TORCH_ROUND_MAX];
  uint8_t torch_round_len;
  cddp__srv_conn_t *parked;
  cddp__srv_conn_t *waiters[CDDP__SRV_WAIT_BUCKETS]; /* the waiter index, by whash */
  uint64_t min_deadline; /* <= every parked deadline (may be early: the expiry scan renews it) */
  cddp__srv_conn_t *ready_head, *ready_tail;
  /* what the job cost the store, said at INFO when it stops (bench/rdzv_scale.sh reads it) */
  uint64_t n_requests, n_rechecks, n_clients;
} cddp__srv_core_t;

/* Unsent output above this stops the engine from reading more requests of a conn. */
#define CDDP__SRV_OUT_HIGH (1u << 20)

cddp_result_t cddp__core_init(cddp__srv_core_t *core, const char *token);
void cddp__core_free(cddp__srv_core_t *core);
void cddp__conn_init(cddp__srv_conn_t *c, const char *addr);
/* Removes c from the engine's lists and frees its buffers (the caller frees c). */
void cddp__conn_release(cddp__srv_core_t *core, cddp__srv_conn_t *c);
/* The connection ended without a goodbye (closed, reset, protocol error): sets the key of
 * its will, if it registered one, and wakes the waits that satisfies. Call before
 * cddp__conn_release; not when the server itself stops. */
void cddp__conn_gone(cddp__srv_core_t *core, cddp__srv_conn_t *c);

/* Handles every complete frame in c->in until c parks, closes or has too much unsent
 * output. Answers go to c->out; other conns whose waits it satisfied go on the ready
 * list. -1: protocol error (already logged): close c now. */
int cddp__core_process(cddp__srv_core_t *core, cddp__srv_conn_t *c);
/* Answers TIMEOUT to parked conns whose deadline <= now; they go on the ready list. */
void cddp__core_expire(cddp__srv_core_t *core, uint64_t now);
/* Earliest deadline of a parked conn, or UINT64_MAX. */
uint64_t cddp__core_next_deadline(const cddp__srv_core_t *core);
/* Parks c on the request at the head of its input until a key is created (or the deadline). */
void cddp__core_park(cddp__srv_core_t *core, cddp__srv_conn_t *c, uint32_t timeout_ms);
/* Takes c off the parked list (nothing is answered). */
void cddp__core_unpark(cddp__srv_core_t *core, cddp__srv_conn_t *c);
/* Key (cddp's key space) was created: the parked waits that miss it look again. */
void cddp__core_wake_key(cddp__srv_core_t *core, const char *key, size_t klen);
/* A key was created where the index does not say (torch's key space): every parked wait looks again. */
void cddp__core_wake(cddp__srv_core_t *core);
/* Pops a conn whose state changed outside its own events (answered wait), or NULL. */
cddp__srv_conn_t *cddp__core_pop_ready(cddp__srv_core_t *core);

#endif /* CDDP_STORE_SERVER_CORE_H */

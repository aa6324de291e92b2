/* tcp.h - internals of the TCP transport shared by its files: state, wire helpers, schedule, engine. */
#ifndef CDDP_COMM_TCP_H
#define CDDP_COMM_TCP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "comm/transport.h"
#include "comm/tune.h"

/* ---- wire: the handshake that tells an accepted connection who it is (tcp_sock.c) ---- */
#define CDDP__TCP_MAGIC 0x43444454u /* "CDDT" */
#define CDDP__TCP_VERSION 1
#define CDDP__TCP_HELLO_BYTES 40
enum { CDDP__TCP_HELLO = 1, CDDP__TCP_ACK = 2 };

typedef struct cddp__tcp_hello {
  uint32_t magic;
  uint16_t version, kind;
  uint32_t round, world, from, to, stream, nstreams;
  uint64_t nonce; /* the acceptor's, read from its published address: same store, same comm */
} cddp__tcp_hello_t;

void cddp__tcp_hello_encode(const cddp__tcp_hello_t *h, unsigned char out[CDDP__TCP_HELLO_BYTES]);
/* 0 on success; -1 (bad magic), -2 (bad version) with the fields left partial. */
int cddp__tcp_hello_decode(const unsigned char in[CDDP__TCP_HELLO_BYTES], cddp__tcp_hello_t *h);

/* "ip:port nonce-hex" (IPv6 as "[ip]:port ...") and back. Parse returns INVALID_ARG
 * naming the text when it is malformed. */
void cddp__tcp_addr_format(const struct sockaddr *sa, uint64_t nonce, char *buf, size_t size);
cddp_result_t cddp__tcp_addr_parse(const char *text, struct sockaddr_storage *sa, socklen_t *len,
                                   uint64_t *nonce);

/* Options that must precede the handshake (on a connecting socket or a listener, whose
 * accepted sockets inherit them): buffers, so the window scale covers them, and the
 * congestion control cc (NULL: the system's; one that cannot be set is skipped). */
int cddp__tcp_preconnect(int fd, int buf_bytes, const char *cc); /* -1: cc refused (errno) */
/* Socket options for a data connection: TCP_NODELAY, keepalive, user timeout. */
void cddp__tcp_tune(int fd);
/* Non-blocking listening socket on addr (port 0 = ephemeral); *port receives the port. */
cddp_result_t cddp__tcp_listen(const struct sockaddr *addr, socklen_t len, int buf_bytes, const char *cc,
                               int *fd, int *port);

/* ---- schedule: pure functions shared by the algorithms and their tests (tcp_sched.c) ---- */

/* Balanced split of n items into parts: part i starts at *off and has *len items. */
void cddp__tcp_split(size_t n, size_t parts, size_t i, size_t *off, size_t *len);
/* Ring step s of 2(world-1) (reduce-scatter steps 0..world-2, then allgather): the block
 * this rank sends to rank+1 and the block it receives from rank-1. */
void cddp__tcp_ring_blocks(int rank, int world, int s, int *send_block, int *recv_block);
/* Chunks per block so that no chunk exceeds chunk_bytes (at least 1). */
size_t cddp__tcp_nchunks(size_t max_block_bytes, size_t chunk_bytes);
/* Does rank need a connection to peer? Ring neighbours, recursive-doubling partners and
 * the fold partner of a non-power-of-two world. Symmetric. */
int cddp__tcp_needs(int rank, int world, int peer);
/* Largest power of two <= world. */
int cddp__tcp_pow2_floor(int world);

/* ---- engine: one pipelined transfer with one peer to send to and one to receive from ---- */

/* Where received chunk (s, k) goes: straight into dst, or into staging and then
 * dst = incoming op mine (mine_first flips the order). */
typedef struct cddp__tcp_rslot {
  char *dst;
  size_t len;         /* bytes */
  const char *mine;   /* NULL: copy (receive straight into dst) */
  int mine_first;
  double scale;       /* AVG factor for this reduction (1.0 on partial steps) */
} cddp__tcp_rslot_t;

typedef struct cddp__tcp_xfer {
  const char *what; /* for messages: "allreduce ring" */
  int to, from;     /* peer ranks, -1 for none */
  int nsend, nrecv; /* steps of K chunks each; chunk k travels on stream k % nstreams */
  size_t K;
  int dep;          /* send (s,k) waits until received steps of chunk k >= s + dep */
  cddp_dtype_t dt;
  cddp_redop_t op;
  void (*send_at)(const struct cddp__tcp_xfer *x, int s, size_t k, const char **p, size_t *len);
  void (*recv_at)(const struct cddp__tcp_xfer *x, int s, size_t k, cddp__tcp_rslot_t *slot);
  void *arg;
} cddp__tcp_xfer_t;

typedef struct cddp__tcp {
  const cddp__comm_ctx_t *ctx;
  int rank, world, nstreams;
  int *fds;             /* world * nstreams; -1 where no connection */
  int wakefd;           /* eventfd that wake() writes */
  size_t chunk_bytes;   /* pipeline chunk (= staging slot) */
  const char *cc;       /* congestion control to set on data connections, NULL = the system's */
  size_t direct_max;    /* AUTO picks the latency algorithm at or below this many bytes */
  char *staging_mem, **staging; /* one slot per stream */
  char *scratch;        /* grow-only work memory for reduce_scatter / recursive doubling */
  size_t scratch_cap;
  int *done;            /* received steps per chunk */
  size_t done_cap;
  uint64_t deadline;
  int failed;           /* once set, run() refuses: the transport is only destroyed */
  cddp__tune_t tune;    /* allreduce: recursive doubling or ring, and the ring's chunk (tcp_tune.c) */
  cddp__fp_t fp;        /* the call being run: with seq != 0 every transfer starts with it, as a
                           24-byte header in the same send as the first chunk (desync.h) */
  char bounce[16384 + 64]; /* a small first chunk and its header, as one send / recv (tcp_engine.c) */
} cddp__tcp_t;

/* ---- tcp_tune.c: the tuner's TCP side (docs/tuner.md) ---- */
enum { TCP_MECH_RD, TCP_MECH_RING, TCP_MECH_RING4 }; /* ring4: chunks of chunk_bytes / 4 */
enum { TCP_SET_DIRECT = 1, TCP_SET_CHUNK = 2 };
/* Init: every rank arms the tuner alike (knobs are agreed when it runs). */
void cddp__tcp_tune_init(cddp__tcp_t *t);
/* Collective, at the first allreduce above 4 KiB of every rank: agrees the knobs, measures,
 * fills t->tune. */
cddp_result_t cddp__tcp_tune_run(cddp__tcp_t *t, uint64_t deadline);
/* The mechanism for an allreduce of bytes under CDDP_ALGO=auto. */
int cddp__tcp_tune_pick(const cddp__tcp_t *t, size_t bytes);
/* Runs one allreduce (tcp.c's entry point, used by the tuner's timed calls). */
cddp_result_t cddp__tcp_run(void *state, const cddp__coll_t *c);

/* Runs one transfer to completion. TIMEOUT / REMOTE / ABORTED name the peer; on any
 * failure every connection is shut down so the failure reaches every peer at once. */
cddp_result_t cddp__tcp_xfer_run(cddp__tcp_t *t, const cddp__tcp_xfer_t *x);

/* Connects to every needed peer (tcp_boot.c). Fills t->fds. */
cddp_result_t cddp__tcp_bootstrap(cddp__tcp_t *t);

/* Records a failure: the first one of the job goes to the store ("tcp/failed") so every
 * rank can name the rank that started it; shuts every connection down. Returns code. */
cddp_result_t cddp__tcp_fail(cddp__tcp_t *t, cddp_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The header from peer did not match t->fp (theirs NULL: not a header at all): records the
 * desync line in the store, shuts every connection down, returns INVALID_USAGE. */
cddp_result_t cddp__tcp_desync(cddp__tcp_t *t, const cddp__fp_t *theirs, int peer);

#endif /* CDDP_COMM_TCP_H */

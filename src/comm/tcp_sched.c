/* tcp_sched.c - pure schedule arithmetic of the TCP algorithms: blocks, chunks, ring steps, partners. */
#include "comm/tcp.h"

void cddp__tcp_split(size_t n, size_t parts, size_t i, size_t *off, size_t *len) {
  size_t base = n / parts, extra = n % parts;
  *off = i * base + (i < extra ? i : extra);
  *len = base + (i < extra ? 1 : 0);
}

static int mod(int a, int n) { return ((a % n) + n) % n; }

void cddp__tcp_ring_blocks(int rank, int world, int s, int *send_block, int *recv_block) {
  if (s < world - 1) { /* reduce-scatter: partial sums travel forward, block r ends complete */
    *send_block = mod(rank - 1 - s, world);
    *recv_block = mod(rank - 2 - s, world);
  } else { /* allgather: complete blocks travel forward */
    int t = s - (world - 1);
    *send_block = mod(rank - t, world);
    *recv_block = mod(rank - 1 - t, world);
  }
}

size_t cddp__tcp_nchunks(size_t max_block_bytes, size_t chunk_bytes) {
  if (chunk_bytes == 0) chunk_bytes = 1;
  size_t k = (max_block_bytes + chunk_bytes - 1) / chunk_bytes;
  return k ? k : 1;
}

int cddp__tcp_pow2_floor(int world) {
  int p = 1;
  while (p * 2 <= world) p *= 2;
  return p;
}

int cddp__tcp_needs(int rank, int world, int peer) {
  if (peer == rank || peer < 0 || peer >= world) return 0;
  if (peer == mod(rank + 1, world) || peer == mod(rank - 1, world)) return 1;
  int p2 = cddp__tcp_pow2_floor(world);
  if (rank >= p2 || peer >= p2) return peer == rank - p2 || rank == peer - p2;
  int x = rank ^ peer;
  return (x & (x - 1)) == 0;
}

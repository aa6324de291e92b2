/* store_bench.c - store figures: 1,000 clients connect+authenticate+add, and set->wait wake-up
 * latency (median over ping-pong round trips) on loopback.
 * Build and run:  make lib && cc -O2 -Iinclude -Isrc bench/store_bench.c build/libcddp.a \
 *                   -lcrypto -pthread -o build/store_bench && build/store_bench [clients] [rounds] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cddp/store.h"
#include "common/clock.h"
#include "store/store_internal.h"

#define DIE(call)                                                                           \
  do {                                                                                      \
    cddp_result_t r_ = (call);                                                              \
    if (r_ != CDDP_OK) {                                                                    \
      fprintf(stderr, "%s: %s (%s)\n", #call, cddp_result_name(r_), cddp_last_error());     \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

static int port, rounds;

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The responder: waits for ping/i, answers pong/i. */
static void *pong(void *arg) {
  (void)arg;
  cddp_store_t *s;
  DIE(cddp_store_tcp_connect(&s, "127.0.0.1", port, "bench", 5000));
  char k[32];
  for (int i = 0; i < rounds; i++) {
    snprintf(k, sizeof k, "ping/%d", i);
    DIE(cddp_store_wait(s, (const char *[]){k}, 1, 10000));
    snprintf(k, sizeof k, "pong/%d", i);
    DIE(cddp_store_set(s, k, "1", 1));
  }
  cddp_store_close(s);
  return NULL;
}

int main(int argc, char **argv) {
  int nclients = argc > 1 ? atoi(argv[1]) : 1000;
  rounds = argc > 2 ? atoi(argv[2]) : 1000;
  cddp_store_server_t *srv;
  DIE(cddp_store_server_start(&srv, "127.0.0.1", 0, "bench"));
  port = cddp_store_server_port(srv);

  cddp_store_t **c = calloc((size_t)nclients, sizeof *c);
  uint64_t t0 = cddp__now_ns();
  for (int i = 0; i < nclients; i++) {
    DIE(cddp_store_tcp_connect(&c[i], "127.0.0.1", port, "bench", 5000));
    DIE(cddp_store_add(c[i], "arrived", 1, NULL));
  }
  double conn_ms = (cddp__now_ns() - t0) / 1e6;
  const char *go[] = {"go"};
  for (int i = 0; i < nclients; i++) DIE(cddp__store_tcp_wait_begin(c[i], go, 1, 10000));
  cddp_store_t *setter;
  DIE(cddp_store_tcp_connect(&setter, "127.0.0.1", port, "bench", 5000));
  t0 = cddp__now_ns();
  DIE(cddp_store_set(setter, "go", "1", 1));
  for (int i = 0; i < nclients; i++) DIE(cddp__store_tcp_wait_end(c[i], go, 1, 10000));
  double wake_all_ms = (cddp__now_ns() - t0) / 1e6;
  for (int i = 0; i < nclients; i++) cddp_store_close(c[i]);
  free(c);

  /* ping-pong: each round trip is two set->wait wake-ups */
  pthread_t th;
  pthread_create(&th, NULL, pong, NULL);
  uint64_t *rt = calloc((size_t)rounds, sizeof *rt);
  char k[32];
  for (int i = 0; i < rounds; i++) {
    uint64_t a = cddp__now_ns();
    snprintf(k, sizeof k, "ping/%d", i);
    DIE(cddp_store_set(setter, k, "1", 1));
    snprintf(k, sizeof k, "pong/%d", i);
    DIE(cddp_store_wait(setter, (const char *[]){k}, 1, 10000));
    rt[i] = cddp__now_ns() - a;
  }
  pthread_join(th, NULL);
  qsort(rt, (size_t)rounds, sizeof *rt, cmp_u64);
  /* plain request latency: add() round trips */
  uint64_t *op = calloc((size_t)rounds, sizeof *op);
  for (int i = 0; i < rounds; i++) {
    uint64_t a = cddp__now_ns();
    DIE(cddp_store_add(setter, "ctr", 1, NULL));
    op[i] = cddp__now_ns() - a;
  }
  qsort(op, (size_t)rounds, sizeof *op, cmp_u64);
  printf("store bench (loopback, token auth)\n");
  printf("  %d clients connect+authenticate+add: %.1f ms (%.1f us each)\n", nclients, conn_ms,
         conn_ms * 1e3 / nclients);
  printf("  one set wakes %d parked waits:       %.2f ms\n", nclients, wake_all_ms);
  printf("  set->wait wake-up, median of %d:    %.1f us (p99 %.1f us; half a ping-pong round trip)\n",
         rounds, rt[rounds / 2] / 2e3, rt[rounds * 99 / 100] / 2e3);
  printf("  add() round trip, median of %d:     %.1f us\n", rounds, op[rounds / 2] / 1e3);
  free(rt);
  free(op);
  cddp_store_close(setter);
  cddp_store_server_stop(srv);
  return 0;
}

/* test_comm_tcp_harness.h - ranks as threads driving the TCP transport table over one in-memory store. */
#ifndef CDDP_TEST_COMM_TCP_HARNESS_H
#define CDDP_TEST_COMM_TCP_HARNESS_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/transport.h"
#include "common/clock.h"
#include "test.h"

#define MAXW 8

/* Streams per peer for the next job; all_local = 0 so the transport does not fall back to
 * one stream on this (single) host. */
static int harness_nstreams = 2;

typedef struct job job_t;
typedef struct trank {
  int rank;
  job_t *job;
  cddp_store_t *store;
  cddp__comm_ctx_t ctx;
  int aborted;
  void *st;
  cddp_result_t init_result;
  pthread_t th;
} trank_t;

struct job {
  int world, nstreams, timeout_ms, all_local;
  cddp_comm_config_t cfg;
  cddp__peer_t peers[MAXW];
  cddp_store_t *base;
  trank_t r[MAXW];
  pthread_barrier_t bar;
  void (*body)(trank_t *);
  void *out[MAXW]; /* each rank's result buffer, for the cross-rank bit comparison */
  size_t out_bytes;
  void *arg;
  void (*before_init)(trank_t *); /* optional, runs on the rank's thread */
};

static __attribute__((unused)) void *rank_main(void *p) {
  trank_t *tr = p;
  if (tr->job->before_init) tr->job->before_init(tr);
  tr->init_result = cddp__transport_tcp.init(&tr->ctx, &tr->st);
  if (tr->init_result != CDDP_OK) {
    fprintf(stderr, "rank %d init: %s: %s\n", tr->rank, cddp_result_name(tr->init_result), cddp_last_error());
    pthread_barrier_wait(&tr->job->bar); /* let the others notice instead of hanging */
    return NULL;
  }
  if (tr->job->body) tr->job->body(tr);
  cddp__transport_tcp.destroy(tr->st);
  return NULL;
}

static __attribute__((unused)) void job_start(job_t *j, int world, void (*body)(trank_t *), void *arg) {
  j->world = world, j->body = body, j->arg = arg;
  j->cfg = (cddp_comm_config_t){"native", "tcp", j->nstreams ? j->nstreams : harness_nstreams,
                                j->timeout_ms ? j->timeout_ms : 10000, CDDP_ALGO_AUTO};
  CHECK_OK(cddp_store_mem_create(&j->base));
  pthread_barrier_init(&j->bar, NULL, (unsigned)world);
  for (int r = 0; r < world; r++) {
    snprintf(j->peers[r].host, sizeof j->peers[r].host, "testhost%d", r);
    snprintf(j->peers[r].host_id, sizeof j->peers[r].host_id, "id");
    j->peers[r].pid = getpid();
  }
  for (int r = 0; r < world; r++) {
    trank_t *tr = &j->r[r];
    tr->rank = r, tr->job = j;
    CHECK_OK(cddp_store_prefix_create(&tr->store, j->base, "comm/r0/", 0));
    tr->ctx = (cddp__comm_ctx_t){r, world, 0, tr->store, &j->cfg, j->peers, &tr->aborted, j->all_local, tr->store};
  }
  for (int r = 0; r < world; r++) CHECK(pthread_create(&j->r[r].th, NULL, rank_main, &j->r[r]) == 0);
}

static __attribute__((unused)) void job_join(job_t *j) {
  for (int r = 0; r < j->world; r++) {
    pthread_join(j->r[r].th, NULL);
    cddp_store_close(j->r[r].store);
  }
  cddp_store_close(j->base);
  pthread_barrier_destroy(&j->bar);
}

static __attribute__((unused)) void run_job(int world, void (*body)(trank_t *), void *arg) {
  job_t *j = calloc(1, sizeof *j);
  if (!j) abort();
  job_start(j, world, body, arg);
  job_join(j);
  for (int r = 0; r < world; r++) CHECK_OK(j->r[r].init_result);
  free(j);
}

static __attribute__((unused)) cddp_result_t coll_dl(trank_t *tr, cddp__coll_kind_t kind, const void *send, void *recv, size_t count,
                             cddp_dtype_t dt, cddp_redop_t op, int root, cddp_algo_t algo, int timeout_ms) {
  cddp__coll_t c = {kind, send, recv, count, dt, op, root, algo, cddp__deadline_ms(timeout_ms), {0}};
  return cddp__transport_tcp.run(tr->st, &c);
}

static __attribute__((unused)) cddp_result_t coll(trank_t *tr, cddp__coll_kind_t kind, const void *send, void *recv, size_t count,
                          cddp_dtype_t dt, cddp_redop_t op, int root, cddp_algo_t algo) {
  return coll_dl(tr, kind, send, recv, count, dt, op, root, algo, 10000);
}

#endif /* CDDP_TEST_COMM_TCP_HARNESS_H */

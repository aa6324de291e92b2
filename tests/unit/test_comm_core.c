/* test_comm_core.c - the communicator core on its own: arguments, world of one, async order, abort. */
#include <string.h>

#include "cddp/comm.h"
#include "cddp/store.h"
#include "test.h"

static cddp_store_t *mem_store(void) {
  cddp_store_t *s = NULL;
  CHECK_OK(cddp_store_mem_create(&s));
  return s;
}

TEST(init_rejects_bad_arguments) {
  cddp_store_t *s = mem_store();
  cddp_comm_t *c = NULL;
  CHECK_RESULT(cddp_comm_init(&c, NULL, 0, 1, 0, NULL), CDDP_INVALID_ARG);
  CHECK_RESULT(cddp_comm_init(&c, s, 2, 2, 0, NULL), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "rank 2") != NULL);
  CHECK_RESULT(cddp_comm_init(&c, s, 0, 0, 0, NULL), CDDP_INVALID_ARG);
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.transport = "carrier-pigeon";
  CHECK_RESULT(cddp_comm_init(&c, s, 0, 1, 0, &cfg), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "carrier-pigeon") != NULL);
  cddp_comm_config_default(&cfg);
  cfg.backend = "nccl"; /* no GPU in this suite: refused, saying why (test_comm_nccl) */
  CHECK_RESULT(cddp_comm_init(&c, s, 0, 1, 0, &cfg), CDDP_INVALID_USAGE);
  CHECK(strncmp(cddp_last_error(), "backend 'nccl' ", 15) == 0);
  CHECK(c == NULL);
  cddp_store_close(s);
}

TEST_TIMEOUT(init_times_out_naming_the_missing_rank, 20) {
  cddp_store_t *s = mem_store();
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.timeout_ms = 200;
  cddp_comm_t *c = NULL;
  CHECK_RESULT(cddp_comm_init(&c, s, 0, 2, 0, &cfg), CDDP_TIMEOUT);
  CHECK(strstr(cddp_last_error(), "rank 1 of 2") != NULL);
  cddp_store_close(s);
}

TEST(world_of_one_copies) {
  cddp_store_t *s = mem_store();
  cddp_comm_t *c = NULL;
  CHECK_OK(cddp_comm_init(&c, s, 0, 1, 3, NULL));
  CHECK_EQ(cddp_comm_rank(c), 0);
  CHECK_EQ(cddp_comm_world(c), 1);
  CHECK(strcmp(cddp_comm_transport(c), "self") == 0);
  float in[5] = {1, 2, 3, 4, 5}, out[5] = {0};
  CHECK_OK(cddp_allreduce(c, in, out, 5, CDDP_F32, CDDP_AVG));
  for (int i = 0; i < 5; i++) CHECK_NEAR(out[i], in[i], 0);
  int64_t g[3] = {7, 8, 9}, gout[3] = {0};
  CHECK_OK(cddp_allgather(c, g, gout, 3, CDDP_I64));
  CHECK_EQ(gout[2], 9);
  CHECK_OK(cddp_reduce_scatter(c, g, gout, 2, CDDP_I64, CDDP_SUM));
  CHECK_EQ(gout[1], 8);
  CHECK_OK(cddp_broadcast(c, in, 5, CDDP_F32, 0));
  CHECK_RESULT(cddp_broadcast(c, in, 5, CDDP_F32, 1), CDDP_INVALID_ARG);
  CHECK_RESULT(cddp_allreduce(c, in, out, 5, (cddp_dtype_t)42, CDDP_SUM), CDDP_INVALID_ARG);
  CHECK_RESULT(cddp_allreduce(c, NULL, out, 5, CDDP_F32, CDDP_SUM), CDDP_INVALID_ARG);
  CHECK_OK(cddp_barrier(c));
  void *buf = NULL;
  CHECK_OK(cddp_comm_mem_alloc(c, 1 << 20, &buf));
  CHECK(buf != NULL && ((uintptr_t)buf & 4095) == 0);
  CHECK_OK(cddp_comm_mem_free(c, buf));
  CHECK_OK(cddp_comm_finalize(c));
  cddp_comm_destroy(c);
  cddp_store_close(s);
}

/* Requests complete in start order, and a blocking call queues behind them. */
TEST(async_requests_complete_in_order) {
  cddp_store_t *s = mem_store();
  cddp_comm_t *c = NULL;
  CHECK_OK(cddp_comm_init(&c, s, 0, 1, 0, NULL));
  enum { N = 64 };
  static int32_t src[N][256], dst[N][256];
  cddp_request_t *req[N];
  for (int k = 0; k < N; k++) {
    for (int i = 0; i < 256; i++) src[k][i] = k * 1000 + i;
    CHECK_OK(cddp_iallreduce(c, src[k], dst[k], 256, CDDP_I32, CDDP_SUM, &req[k]));
  }
  int32_t x = 5, y = 0;
  CHECK_OK(cddp_allreduce(c, &x, &y, 1, CDDP_I32, CDDP_SUM)); /* behind all 64 */
  CHECK_EQ(y, 5);
  for (int k = 0; k < N; k++) { /* the blocking call ran after every one of them */
    int done = 0;
    CHECK_OK(cddp_test(req[k], &done));
    CHECK_EQ(done, 1);
  }
  for (int k = 0; k < N; k++) CHECK_EQ(dst[k][255], k * 1000 + 255);
  cddp_comm_destroy(c);
  cddp_store_close(s);
}

TEST(abort_fails_later_calls) {
  cddp_store_t *s = mem_store();
  cddp_comm_t *c = NULL;
  CHECK_OK(cddp_comm_init(&c, s, 0, 1, 0, NULL));
  cddp_comm_abort(c);
  float v = 1;
  CHECK_RESULT(cddp_allreduce(c, &v, &v, 1, CDDP_F32, CDDP_SUM), CDDP_ABORTED);
  cddp_request_t *r;
  CHECK_OK(cddp_iallreduce(c, &v, &v, 1, CDDP_F32, CDDP_SUM, &r));
  CHECK_RESULT(cddp_wait(r), CDDP_ABORTED);
  const char *msg = NULL;
  CHECK_RESULT(cddp_comm_last_error(c, &msg), CDDP_ABORTED);
  CHECK(strstr(msg, "aborted") != NULL);
  cddp_comm_destroy(c);
  cddp_store_close(s);
}

/* test_grad_stage.c - the gradients' crossing to DDP during backward, direct form (NCCL on the
 * device's gradients, grad_stage.c): each piece's all-reduces queue behind a comm-stream wait on
 * a mark recorded on the compute stream just then, and the optimizer's work waits for the comm
 * stream's event after DDP's finish. A recording table over the CPU's logs the stream calls. */
#include <string.h>

#include "cddp/comm.h"
#include "cddp/store.h"
#include "test.h"
#include "trainer/grad_stage.h"
#include "trainer/ops.h"

static char calls[64][24]; /* "record e1", "comm_wait e1", ... */
static int n_calls;
static char tokens[8];
static int n_tokens;

static int id(void *e) { return (int)((char *)e - tokens); }
static void log_call(const char *what, void *e) {
  if (n_calls < 64) snprintf(calls[n_calls++], sizeof calls[0], "%s e%d", what, id(e));
}
static void *rec_event_create(void) { return n_tokens < 8 ? &tokens[n_tokens++] : NULL; }
static void rec_event_record(void *e) { log_call("record", e); }
static void rec_event_wait(void *e) { log_call("wait", e); }
static void rec_comm_wait(void *e) { log_call("comm_wait", e); }
static void rec_comm_record(void *e) { log_call("comm_record", e); }
static void *rec_comm_stream(void) { return NULL; }

TEST(each_piece_waits_for_its_mark_and_the_optimizer_for_the_comm_stream) {
  cddp_ops_t t = cddp__ops_cpu;
  t.event_create = rec_event_create, t.event_record = rec_event_record, t.event_wait = rec_event_wait;
  t.comm_wait = rec_comm_wait, t.comm_record = rec_comm_record, t.comm_stream = rec_comm_stream;
  cddp_store_t *st;
  cddp_comm_t *comm;
  cddp_ddp_t *ddp;
  static float g[4096];
  for (int i = 0; i < 4096; i++) g[i] = (float)i;
  CHECK_OK(cddp_store_mem_create(&st));
  CHECK_OK(cddp_comm_init(&comm, st, 0, 1, 0, NULL));
  CHECK_OK(cddp_ddp_create_over(&ddp, comm, g, 4096, 4096, CDDP_SUM)); /* 4 buckets of 1024 */
  cddp__grad_stage_t s;
  CHECK_OK(cddp__grad_stage_init_direct(&s, &t, ddp, g, 4096));
  CHECK(s.direct && s.host_grads == NULL);
  cddp_ddp_begin(ddp);
  cddp__grad_stage_begin(&s, 1.0f);
  cddp__grad_stage_ready(&s, 3072);
  cddp__grad_stage_ready(&s, 3072); /* reported twice: nothing new */
  cddp__grad_stage_ready(&s, 1024);
  CHECK_OK(cddp__grad_stage_finish(&s)); /* [0, 1024): backward did not report it */
  int ready = id(s.ready), back = id(s.back);
  const char *want[] = {"record", "comm_wait", "record", "comm_wait", "record", "comm_wait", "comm_record", "wait"};
  CHECK_EQ(n_calls, 8);
  for (int i = 0; i < 8 && i < n_calls; i++) {
    char w[24];
    snprintf(w, sizeof w, "%s e%d", want[i], i < 6 ? ready : back);
    if (strcmp(calls[i], w) != 0) TEST_FAIL("call %d is '%s', not '%s'", i, calls[i], w);
  }
  for (int i = 0; i < 4096; i++) CHECK(g[i] == (float)i); /* a world of one sums nothing */
  cddp__grad_stage_destroy(&s);
  cddp_ddp_destroy(ddp);
  cddp_comm_destroy(comm);
  cddp_store_close(st);
}

TEST(a_table_without_device_collectives_is_refused) {
  cddp_store_t *st;
  cddp_comm_t *comm;
  cddp_ddp_t *ddp;
  static float g[1024];
  CHECK_OK(cddp_store_mem_create(&st));
  CHECK_OK(cddp_comm_init(&comm, st, 0, 1, 0, NULL));
  CHECK_OK(cddp_ddp_create_over(&ddp, comm, g, 1024, 0, CDDP_SUM));
  cddp__grad_stage_t s = {0};
  CHECK_RESULT(cddp__grad_stage_init_direct(&s, &cddp__ops_emu, ddp, g, 1024), CDDP_INVALID_USAGE);
  CHECK(strstr(cddp_last_error(), "has no collectives of its own") != NULL);
  CHECK(s.dev == NULL);
  cddp_ddp_destroy(ddp);
  cddp_comm_destroy(comm);
  cddp_store_close(st);
}

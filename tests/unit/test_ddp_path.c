/* test_ddp_path.c - ddp.backend's choice as a pure function of every rank's reason code: NCCL on
 * the device's gradients only where every rank can, the staged native path otherwise, and
 * nccl asked for where a rank cannot refused in one line naming the rank and its reason. */
#include <string.h>

#include "test.h"
#include "trainer/ddp_path.h"

static cddp__ddp_local_t gpu_of_its_own(void) {
  return (cddp__ddp_local_t){.on_device = 1, .nccl_ok = 1};
}

TEST(a_rank_names_the_first_reason_that_applies) {
  cddp__ddp_local_t l = gpu_of_its_own();
  CHECK_EQ(cddp__ddp_nccl_why(&l), CDDP__NCCL_CAN);
  l.compressed = 1;
  CHECK_EQ(cddp__ddp_nccl_why(&l), CDDP__NCCL_COMPRESSED);
  l.nccl_ok = 0;
  CHECK_EQ(cddp__ddp_nccl_why(&l), CDDP__NCCL_MISSING);
  l.sharing = 1;
  CHECK_EQ(cddp__ddp_nccl_why(&l), CDDP__NCCL_SHARED_GPU);
  l.emulated = 1;
  CHECK_EQ(cddp__ddp_nccl_why(&l), CDDP__NCCL_EMULATED);
  l.on_device = 0;
  CHECK_EQ(cddp__ddp_nccl_why(&l), CDDP__NCCL_ON_CPU);
  for (int w = 0; w < CDDP__NCCL_WHY_COUNT; w++) CHECK(strlen(cddp__nccl_why_text(w)) > 10);
  CHECK(strstr(cddp__nccl_why_text(77), "unknown") != NULL); /* a code from another rank is data */
  CHECK(strstr(cddp__nccl_why_text(-1), "unknown") != NULL);
}

TEST(auto_takes_nccl_when_every_rank_can) {
  int64_t codes[4] = {0, 0, 0, 0};
  cddp__ddp_path_t p;
  char why[400];
  CHECK_OK(cddp__ddp_path_choose(CDDP_DDP_BACKEND_AUTO, codes, 4, 1, &p, why, sizeof why));
  CHECK_EQ(p, CDDP__DDP_PATH_NCCL);
  CHECK(strstr(why, "NCCL all-reduces the device's gradients in place (ddp.backend auto") != NULL);
}

TEST(auto_stages_when_one_rank_cannot_and_says_which) {
  int64_t codes[3] = {0, CDDP__NCCL_SHARED_GPU, CDDP__NCCL_MISSING};
  cddp__ddp_path_t p;
  char why[400];
  CHECK_OK(cddp__ddp_path_choose(CDDP_DDP_BACKEND_AUTO, codes, 3, 1, &p, why, sizeof why));
  CHECK_EQ(p, CDDP__DDP_PATH_STAGED);
  CHECK(strstr(why, "staged through pinned host memory") != NULL);
  CHECK(strstr(why, "rank 1 cannot use NCCL: it shares its GPU") != NULL);
  int64_t emu[2] = {CDDP__NCCL_EMULATED, CDDP__NCCL_EMULATED};
  CHECK_OK(cddp__ddp_path_choose(CDDP_DDP_BACKEND_AUTO, emu, 2, 1, &p, why, sizeof why));
  CHECK_EQ(p, CDDP__DDP_PATH_STAGED);
  CHECK(strstr(why, "rank 0 cannot use NCCL: the emulated device has no NCCL") != NULL);
}

TEST(auto_in_a_world_of_one_reduces_nothing) {
  int64_t codes[1] = {0};
  cddp__ddp_path_t p;
  char why[400];
  CHECK_OK(cddp__ddp_path_choose(CDDP_DDP_BACKEND_AUTO, codes, 1, 1, &p, why, sizeof why));
  CHECK_EQ(p, CDDP__DDP_PATH_STAGED);
  CHECK(strstr(why, "a world of one") != NULL);
}

TEST(nccl_asked_for_runs_even_alone) { /* one GPU: the path is still exercised */
  int64_t codes[1] = {0};
  cddp__ddp_path_t p;
  char why[400];
  CHECK_OK(cddp__ddp_path_choose(CDDP_DDP_BACKEND_NCCL, codes, 1, 1, &p, why, sizeof why));
  CHECK_EQ(p, CDDP__DDP_PATH_NCCL);
  CHECK(strstr(why, "ddp.backend nccl") != NULL);
}

TEST(nccl_asked_for_where_a_rank_cannot_is_refused_naming_it) {
  int64_t codes[3] = {0, 0, CDDP__NCCL_EMULATED};
  cddp__ddp_path_t p;
  char why[400];
  CHECK_RESULT(cddp__ddp_path_choose(CDDP_DDP_BACKEND_NCCL, codes, 3, 1, &p, why, sizeof why), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "ddp.backend nccl: rank 2 cannot all-reduce its gradients with NCCL: the emulated "
                                  "device has no NCCL (use ddp.backend auto or native)") != NULL);
  CHECK(strchr(cddp_last_error(), '\n') == NULL);
  int64_t comp[2] = {CDDP__NCCL_COMPRESSED, CDDP__NCCL_COMPRESSED};
  CHECK_RESULT(cddp__ddp_path_choose(CDDP_DDP_BACKEND_NCCL, comp, 2, 1, &p, why, sizeof why), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "rank 0 cannot all-reduce its gradients with NCCL: ddp.compress works on host memory") != NULL);
}

TEST(native_always_stages) {
  int64_t codes[2] = {0, 0};
  cddp__ddp_path_t p;
  char why[400];
  CHECK_OK(cddp__ddp_path_choose(CDDP_DDP_BACKEND_NATIVE, codes, 2, 1, &p, why, sizeof why));
  CHECK_EQ(p, CDDP__DDP_PATH_STAGED);
  CHECK(strstr(why, "(ddp.backend native)") != NULL);
}

TEST(the_cpu_trainer_keeps_host_memory_and_refuses_nccl) {
  int64_t codes[1] = {CDDP__NCCL_ON_CPU};
  cddp__ddp_path_t p;
  char why[400];
  CHECK_OK(cddp__ddp_path_choose(CDDP_DDP_BACKEND_AUTO, codes, 1, 0, &p, why, sizeof why));
  CHECK_EQ(p, CDDP__DDP_PATH_HOST);
  CHECK_OK(cddp__ddp_path_choose(CDDP_DDP_BACKEND_NATIVE, codes, 1, 0, &p, why, sizeof why));
  CHECK_EQ(p, CDDP__DDP_PATH_HOST);
  CHECK_RESULT(cddp__ddp_path_choose(CDDP_DDP_BACKEND_NCCL, codes, 1, 0, &p, why, sizeof why), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "ddp.backend nccl all-reduces GPU buffers, but the model trains on the CPU here "
                                  "(train.device)") != NULL);
}

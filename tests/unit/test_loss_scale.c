/* test_loss_scale.c - the fp16 loss scale's rule, GradScaler's: halve on an overflow (the step
 * skipped, the count of good steps restarted), double after `interval` good steps in a row. */
#include "test.h"
#include "trainer/loss_scale.h"

TEST(gradscaler_defaults_back_off_and_grow) {
  cddp__loss_scale_t s;
  cddp__loss_scale_init(&s, 65536.0f, 2000);
  CHECK(s.on && s.scale == 65536.0f);
  CHECK_EQ(cddp__loss_scale_update(&s, 1), 1); /* skipped, halved */
  CHECK(s.scale == 32768.0f);
  for (int i = 0; i < 1999; i++) CHECK_EQ(cddp__loss_scale_update(&s, 0), 0);
  CHECK(s.scale == 32768.0f);
  CHECK_EQ(cddp__loss_scale_update(&s, 0), 0); /* the 2000th good step */
  CHECK(s.scale == 65536.0f);
  CHECK_EQ(s.skipped, 1);
}

TEST(an_overflow_restarts_the_count_of_good_steps) {
  cddp__loss_scale_t s;
  cddp__loss_scale_init(&s, 8.0f, 3);
  cddp__loss_scale_update(&s, 0), cddp__loss_scale_update(&s, 0);
  CHECK_EQ(cddp__loss_scale_update(&s, 1), 1);
  CHECK(s.scale == 4.0f);
  cddp__loss_scale_update(&s, 0), cddp__loss_scale_update(&s, 0);
  CHECK(s.scale == 4.0f); /* 2 good steps since the overflow, not 4 */
  cddp__loss_scale_update(&s, 0);
  CHECK(s.scale == 8.0f);
  CHECK_EQ(cddp__loss_scale_update(&s, 1) + cddp__loss_scale_update(&s, 1), 2);
  CHECK(s.scale == 2.0f);
  CHECK_EQ(s.skipped, 3);
}

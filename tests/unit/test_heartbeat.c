/* test_heartbeat.c - the heartbeat's beat grows with the job's size past 1,024 members and stays
 * bounded, so the store's steady load stops growing with N while a loss is still seen in time. */
#include "job/member.h"
#include "test.h"

TEST(heartbeat_is_the_knob_at_small_n) {
  CHECK_EQ(cddp__heartbeat_ms(2, 500, 3000), 500);
  CHECK_EQ(cddp__heartbeat_ms(128, 500, 3000), 500);
  CHECK_EQ(cddp__heartbeat_ms(1024, 500, 3000), 500);
  CHECK_EQ(cddp__heartbeat_ms(16, 100, 1500), 100); /* the tests' fast settings keep their timings */
}

TEST(heartbeat_grows_with_n_and_is_bounded) {
  int timeout = 30000, last = 0;
  for (int n = 1024; n <= 16384; n *= 2) {
    int b = cddp__heartbeat_ms(n, 500, timeout);
    CHECK(b >= last);
    last = b;
  }
  CHECK_EQ(cddp__heartbeat_ms(2048, 500, timeout), 1000);
  CHECK_EQ(cddp__heartbeat_ms(10000, 500, timeout), 2000); /* 4,882 capped: loss seen in timeout + 2 s */
  CHECK_EQ(cddp__heartbeat_ms(10000, 500, 3000), 750);     /* timeout / 4: two beats in half the timeout */
  CHECK_EQ(cddp__heartbeat_ms(4096, 500, 6000), 1500);
}

TEST(heartbeat_never_below_the_knob) {
  CHECK_EQ(cddp__heartbeat_ms(100000, 2500, 3000), 2500); /* a user's long beat is kept */
  CHECK_EQ(cddp__heartbeat_ms(5000, 0, 3000), 500);
}

TEST(timeout_is_the_default_up_to_1536_nodes) {
  CHECK_EQ(cddp__heartbeat_timeout_ms(1, 500, 3000), 3000);
  CHECK_EQ(cddp__heartbeat_timeout_ms(1024, 500, 3000), 3000);
  CHECK_EQ(cddp__heartbeat_timeout_ms(1536, 500, 3000), 3000);
  CHECK_EQ(cddp__heartbeat_timeout_ms(64, 100, 3000), 3000); /* the tests' fast beat */
}

TEST(timeout_grows_to_keep_the_grown_beat_uncut) {
  CHECK_EQ(cddp__heartbeat_timeout_ms(2048, 500, 3000), 4000);
  CHECK_EQ(cddp__heartbeat_timeout_ms(4096, 500, 3000), 8000);
  CHECK_EQ(cddp__heartbeat_timeout_ms(10000, 500, 3000), 8000); /* 8 s + a 2 s beat: a loss within 10 s */
  CHECK_EQ(cddp__heartbeat_timeout_ms(100000, 500, 3000), 8000);
  for (int n = 1024; n <= 16384; n += 512) { /* the beat it allows is the beat N asks for, up to the 2 s cap */
    int t = cddp__heartbeat_timeout_ms(n, 500, 3000);
    int want = n * 500 / 1024 < 2000 ? n * 500 / 1024 : 2000;
    CHECK_EQ(cddp__heartbeat_ms(n, 500, t), want < 500 ? 500 : want);
  }
  CHECK_EQ(cddp__heartbeat_timeout_ms(0, 0, 3000), 3000);
  CHECK_EQ(cddp__heartbeat_timeout_ms(-5, 500, 3000), 3000);
}

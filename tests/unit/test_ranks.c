/* test_ranks.c - the straggler rule on gathered timings: named after `windows` slow gathers in a
 * row, once; a quiet window on a noisy host neither clears it nor names it again. */
#include <math.h>
#include <stdlib.h>

#include "test.h"
#include "trainer/ranks.h"

/* A job of 3 ranks, its rule: 20 % above the others' median for 3 gathers. */
static cddp__ranks_t job(void) {
  cddp__ranks_t r;
  cddp__ranks_init(&r, 5, 20, 3);
  r.world = 3;
  r.all = calloc(3, sizeof *r.all), r.over = calloc(3, sizeof *r.over);
  CHECK(r.all && r.over);
  return r;
}

/* One gather with these busy times (ms a step, all compute); returns the straggler, -1 none. */
static int gather(cddp__ranks_t *r, double b0, double b1, double b2) {
  double b[3] = {b0, b1, b2};
  for (int i = 0; i < 3; i++) r->all[i] = (cddp__rank_times_t){.compute_ms = b[i], .comm_ms = 1};
  CHECK_OK(cddp__ranks_judge(r));
  return r->straggler;
}

TEST(a_slow_rank_is_named_after_three_windows_once) {
  cddp__ranks_t r = job();
  CHECK_EQ(gather(&r, 100, 160, 100), -1);
  CHECK_EQ(r.slowest, 1);
  CHECK_NEAR(r.spread, 0.6, 1e-9);
  CHECK_EQ(gather(&r, 100, 160, 100), -1);
  CHECK_EQ(gather(&r, 100, 160, 100), 1);
  CHECK_EQ(r.fresh, 1);
  CHECK_NEAR(r.straggler_pct, 60, 1e-9);
  CHECK_EQ(gather(&r, 100, 170, 100), 1);
  CHECK_EQ(r.fresh, 0); /* said once */
  CHECK_NEAR(r.straggler_pct, 70, 1e-9);
  cddp__ranks_free(&r);
}

/* the stress run's case: one window under the line (a busy host evened the ranks out) between
 * slow ones; the line came twice when one quiet window cleared the name */
TEST(one_quiet_window_neither_clears_nor_renames) {
  cddp__ranks_t r = job();
  for (int i = 0; i < 3; i++) gather(&r, 100, 155, 100);
  CHECK(r.straggler == 1 && r.fresh == 1);
  CHECK_EQ(gather(&r, 100, 110, 100), 1); /* 10 %: quiet, still named */
  CHECK_EQ(r.fresh, 0);
  CHECK_EQ(gather(&r, 100, 166, 100), 1);
  CHECK_EQ(r.fresh, 0); /* not named a second time */
  cddp__ranks_free(&r);
}

TEST(three_quiet_windows_clear_it_and_a_new_slow_spell_names_it_again) {
  cddp__ranks_t r = job();
  for (int i = 0; i < 3; i++) gather(&r, 100, 160, 100);
  CHECK_EQ(gather(&r, 100, 100, 100), 1);
  CHECK_EQ(gather(&r, 100, 105, 100), 1);
  CHECK_EQ(gather(&r, 100, 100, 100), -1); /* caught up: three windows under the line */
  CHECK_EQ(gather(&r, 100, 160, 100), -1);
  CHECK_EQ(gather(&r, 100, 160, 100), -1);
  CHECK_EQ(gather(&r, 100, 160, 100), 1);
  CHECK_EQ(r.fresh, 1); /* a new spell: said again */
  cddp__ranks_free(&r);
}

TEST(another_rank_takes_the_name_while_the_first_is_quiet) {
  cddp__ranks_t r = job();
  for (int i = 0; i < 3; i++) gather(&r, 100, 160, 100);
  CHECK_EQ(gather(&r, 100, 100, 160), 1); /* rank 2 slow once, rank 1 quiet once */
  CHECK_EQ(gather(&r, 100, 100, 160), 1);
  CHECK_EQ(gather(&r, 100, 100, 160), 2); /* rank 2's third window, rank 1 quiet: rank 2 named */
  CHECK_EQ(r.fresh, 1);
  CHECK_EQ(r.slowest, 2);
  cddp__ranks_free(&r);
}

TEST(alike_ranks_and_a_world_of_one_name_nobody) {
  cddp__ranks_t r = job();
  for (int i = 0; i < 10; i++) CHECK_EQ(gather(&r, 100, 115, 95), -1); /* rank 1 18 % above the others: under the line */
  cddp__ranks_free(&r);
  cddp__ranks_t one;
  cddp__ranks_init(&one, 5, 20, 1);
  one.world = 1;
  one.all = calloc(1, sizeof *one.all), one.over = calloc(1, sizeof *one.over);
  CHECK(one.all && one.over);
  one.all[0].compute_ms = 1000;
  for (int i = 0; i < 3; i++) {
    CHECK_OK(cddp__ranks_judge(&one));
    CHECK(one.straggler == -1 && one.slowest == 0 && one.spread == 0);
  }
  cddp__ranks_free(&one);
}

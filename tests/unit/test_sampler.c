/* test_sampler.c - exactly-once per epoch, world-size independence, restore, padding layout,
 * pinned generator output. */
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "test.h"
#include "trainer/sampler.h"

/* Walks one whole epoch with (world, accum, micro) and checks that every sample is handed out
 * exactly once (or, with drop_last, at most once and exactly steps*global_batch in all), that
 * real slots come first, and that per-batch real counts sum to batch_size. */
static void one_epoch(size_t n, int world, int accum, int micro, int drop_last, uint64_t seed) {
  int gb = world * accum * micro;
  cddp_sampler_t s;
  CHECK_OK(cddp__sampler_init(&s, seed, n, gb, drop_last));
  int *seen = calloc(n, sizeof(int));
  uint32_t *idx = malloc(micro * sizeof(uint32_t));
  int64_t steps = cddp__sampler_steps_per_epoch(&s);
  CHECK_EQ(steps, drop_last ? (int64_t)(n / gb) : (int64_t)((n + gb - 1) / gb));
  size_t total = 0;
  for (int64_t st = 0; st < steps; st++) {
    CHECK_EQ(s.epoch, 0);
    int bs = cddp__sampler_batch_size(&s), got = 0;
    CHECK(bs > 0 && bs <= gb);
    if (drop_last) CHECK_EQ(bs, gb);
    for (int m = 0; m < accum; m++)
      for (int r = 0; r < world; r++) {
        int real = cddp__sampler_micro(&s, r, world, m, micro, idx);
        CHECK(real >= 0 && real <= micro);
        /* slots are consecutive window positions: the real ones come first */
        int first = (m * world + r) * micro;
        int expect = bs - first < 0 ? 0 : (bs - first > micro ? micro : bs - first);
        CHECK_EQ(real, expect);
        for (int k = 0; k < micro; k++) CHECK(idx[k] < n); /* padding is a valid row too */
        for (int k = 0; k < real; k++) seen[idx[k]]++;
        got += real;
      }
    CHECK_EQ(got, bs);
    total += (size_t)bs;
    int ended = cddp__sampler_advance(&s);
    CHECK_EQ(ended, st == steps - 1);
  }
  CHECK_EQ(s.epoch, 1);
  CHECK_EQ(s.consumed, 0);
  CHECK_EQ(total, drop_last ? (size_t)steps * gb : n);
  size_t once = 0;
  for (size_t i = 0; i < n; i++) {
    if (seen[i] > 1) TEST_FAIL("sample %zu seen %d times (n %zu world %d accum %d micro %d)", i,
                               seen[i], n, world, accum, micro);
    once += (size_t)seen[i];
  }
  CHECK_EQ(once, total);
  free(seen);
  free(idx);
  cddp__sampler_free(&s);
}

TEST(exactly_once_per_epoch) {
  static const struct { size_t n; int world, accum, micro; } cases[] = {
      {1000, 1, 1, 100}, {1000, 2, 1, 50}, {1000, 4, 2, 16}, /* 1000 % 128 != 0 */
      {1001, 3, 1, 7},   {17, 4, 1, 8},    /* one short batch only: ranks 2,3 get 0 real */
      {60000, 2, 1, 128}, {60000, 4, 2, 32}, {5, 1, 1, 1}, {100, 2, 5, 10},
  };
  for (size_t c = 0; c < CDDP_ARRAY_LEN(cases); c++)
    for (int drop = 0; drop <= 1; drop++) {
      int gb = cases[c].world * cases[c].accum * cases[c].micro;
      if (drop && (size_t)gb > cases[c].n) continue;
      one_epoch(cases[c].n, cases[c].world, cases[c].accum, cases[c].micro, drop, 42 + c);
    }
}

/* A short last batch with 4 ranks: 17 samples in batches of 32 (micro 8): rank 0 gets 8, rank
 * 1 gets 8, rank 2 gets 1, rank 3 gets 0. */
TEST(short_batch_padding_layout) {
  cddp_sampler_t s;
  CHECK_OK(cddp__sampler_init(&s, 1, 17, 32, 0));
  CHECK_EQ(cddp__sampler_steps_per_epoch(&s), 1);
  CHECK_EQ(cddp__sampler_batch_size(&s), 17);
  uint32_t idx[8];
  int want[4] = {8, 8, 1, 0};
  for (int r = 0; r < 4; r++) {
    CHECK_EQ(cddp__sampler_micro(&s, r, 4, 0, 8, idx), want[r]);
    if (want[r]) CHECK_EQ(idx[0], s.perm[r * 8]);
  }
  /* out-of-range arguments give no real slot, never a crash */
  CHECK_EQ(cddp__sampler_micro(&s, 4, 4, 0, 8, idx), 0);
  CHECK_EQ(cddp__sampler_micro(&s, -1, 4, 0, 8, idx), 0);
  CHECK_EQ(cddp__sampler_micro(&s, 0, 4, 1, 8, idx), 0);
  CHECK_EQ(cddp__sampler_micro(&s, 0, 4, 0, 0, idx), 0);
  cddp__sampler_free(&s);
  /* drop_last: 17 samples with global batch 8 -> 2 steps, one sample left out */
  CHECK_OK(cddp__sampler_init(&s, 1, 17, 8, 1));
  CHECK_EQ(cddp__sampler_steps_per_epoch(&s), 2);
  cddp__sampler_free(&s);
}

/* The union of all ranks' indices for each global batch is the same set whatever the split. */
TEST(world_size_independent_batches) {
  const size_t n = 1000;
  const int gb = 64, nsteps = 16; /* crosses the epoch end (15.6 steps) */
  static const int splits[][3] = {{1, 1, 64}, {2, 1, 32}, {4, 1, 16}, {2, 2, 16}, {4, 4, 4}};
  uint32_t ref[16][64];
  int refn[16];
  for (size_t c = 0; c < CDDP_ARRAY_LEN(splits); c++) {
    int world = splits[c][0], accum = splits[c][1], micro = splits[c][2];
    cddp_sampler_t s;
    CHECK_OK(cddp__sampler_init(&s, 7, n, gb, 0));
    for (int st = 0; st < nsteps; st++) {
      uint32_t got[64], idx[64];
      int cnt = 0;
      for (int m = 0; m < accum; m++)
        for (int r = 0; r < world; r++) {
          int real = cddp__sampler_micro(&s, r, world, m, micro, idx);
          for (int k = 0; k < real; k++) got[cnt++] = idx[k];
        }
      /* same order too: positions are laid out micro-major, then rank */
      if (c == 0) {
        memcpy(ref[st], got, sizeof got);
        refn[st] = cnt;
      } else {
        CHECK_EQ(cnt, refn[st]);
        for (int k = 0; k < cnt; k++)
          if (got[k] != ref[st][k])
            TEST_FAIL("split %zu step %d position %d: %u != %u", c, st, k, got[k], ref[st][k]);
      }
      cddp__sampler_advance(&s);
    }
    cddp__sampler_free(&s);
  }
}

/* Resuming at a batch boundary (also on another world size) continues the same sequence. */
TEST(restore_mid_epoch_continues) {
  const size_t n = 500;
  cddp_sampler_t a, b;
  CHECK_OK(cddp__sampler_init(&a, 99, n, 40, 0));
  for (int i = 0; i < 20; i++) cddp__sampler_advance(&a); /* epoch 1, 80 in (13 steps/epoch) */
  CHECK_EQ(a.epoch, 1);
  CHECK_EQ(a.consumed, 280);
  CHECK_OK(cddp__sampler_init(&b, 99, n, 40, 0));
  CHECK_OK(cddp__sampler_restore(&b, a.epoch, a.consumed));
  for (int i = 0; i < 30; i++) {
    uint32_t ia[40], ib[40];
    int ra = cddp__sampler_micro(&a, 0, 1, 0, 40, ia);
    int rb = 0;
    for (int r = 0; r < 4; r++) rb += cddp__sampler_micro(&b, r, 4, 0, 10, ib + 10 * r);
    CHECK_EQ(ra, rb);
    CHECK(memcmp(ia, ib, ra * sizeof(uint32_t)) == 0);
    CHECK_EQ(cddp__sampler_advance(&a), cddp__sampler_advance(&b));
    CHECK_EQ(a.epoch, b.epoch);
    CHECK_EQ(a.consumed, b.consumed);
  }
  /* the end of an epoch is the start of the next */
  CHECK_OK(cddp__sampler_restore(&b, 3, n));
  CHECK_EQ(b.epoch, 4);
  CHECK_EQ(b.consumed, 0);
  cddp__sampler_free(&a);
  cddp__sampler_free(&b);
}

TEST(restore_rejects_bad_state) {
  cddp_sampler_t s;
  CHECK_OK(cddp__sampler_init(&s, 1, 500, 40, 0));
  CHECK_RESULT(cddp__sampler_restore(&s, 0, 41), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "41 samples consumed in epoch 0: expected a multiple") != NULL);
  CHECK(strstr(cddp_last_error(), "global batch 40") != NULL);
  CHECK_RESULT(cddp__sampler_restore(&s, 0, 520), CDDP_INVALID_ARG);
  CHECK_OK(cddp__sampler_restore(&s, 0, 480));
  cddp__sampler_free(&s);
  CHECK_OK(cddp__sampler_init(&s, 1, 500, 40, 1));
  CHECK_RESULT(cddp__sampler_restore(&s, 0, 500), CDDP_INVALID_ARG); /* end is 480 */
  CHECK_OK(cddp__sampler_restore(&s, 0, 480));
  CHECK_EQ(s.epoch, 1);
  cddp__sampler_free(&s);
  CHECK_RESULT(cddp__sampler_init(&s, 1, 0, 40, 0), CDDP_INVALID_ARG);
  CHECK_RESULT(cddp__sampler_init(&s, 1, 10, 0, 0), CDDP_INVALID_ARG);
  CHECK_RESULT(cddp__sampler_init(&s, 1, 10, 40, 1), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "no step") != NULL);
  CHECK_OK(cddp__sampler_init(&s, 1, 10, 40, 0)); /* padding: one short step */
  CHECK_EQ(cddp__sampler_steps_per_epoch(&s), 1);
  cddp__sampler_free(&s);
}

static int is_perm(const uint32_t *p, size_t n) {
  char *seen = calloc(n, 1);
  int ok = 1;
  for (size_t i = 0; i < n && ok; i++) ok = p[i] < n && !seen[p[i]]++;
  free(seen);
  return ok;
}

TEST(epochs_and_seeds_differ_runs_agree) {
  const size_t n = 1000;
  cddp_sampler_t a, b;
  CHECK_OK(cddp__sampler_init(&a, 42, n, 100, 0));
  CHECK_OK(cddp__sampler_init(&b, 42, n, 100, 0));
  CHECK(is_perm(a.perm, n));
  CHECK(memcmp(a.perm, b.perm, n * sizeof(uint32_t)) == 0);
  uint32_t *e0 = malloc(n * sizeof(uint32_t));
  memcpy(e0, a.perm, n * sizeof(uint32_t));
  for (int i = 0; i < 10; i++) cddp__sampler_advance(&a);
  CHECK_EQ(a.epoch, 1);
  CHECK(is_perm(a.perm, n));
  size_t same = 0;
  for (size_t i = 0; i < n; i++) same += a.perm[i] == e0[i];
  CHECK(same < 20); /* a random pair of permutations agrees in ~1 place */
  cddp__sampler_free(&b);
  CHECK_OK(cddp__sampler_init(&b, 43, n, 100, 0));
  same = 0;
  for (size_t i = 0; i < n; i++) same += b.perm[i] == e0[i];
  CHECK(same < 20);
  free(e0);
  cddp__sampler_free(&a);
  cddp__sampler_free(&b);
}

/* Pins the generator: a change of splitmix64, the epoch mixing or the Fisher-Yates draw would
 * silently change which samples a resumed run sees; docs/data.md states these numbers. */
TEST(generator_is_pinned) {
  cddp_sampler_t s;
  CHECK_OK(cddp__sampler_init(&s, 42, 60000, 256, 0));
  static const uint32_t want0[8] = {57630, 3518, 47514, 24059, 52744, 32630, 681, 56646};
  static const uint32_t want1[8] = {4306, 29176, 58599, 32742, 34482, 12848, 31788, 13404};
  for (int i = 0; i < 8; i++) CHECK_EQ(s.perm[i], want0[i]);
  CHECK_OK(cddp__sampler_restore(&s, 1, 0));
  for (int i = 0; i < 8; i++) CHECK_EQ(s.perm[i], want1[i]);
  cddp__sampler_free(&s);
  CHECK_OK(cddp__sampler_init(&s, 42, 10, 5, 0));
  static const uint32_t want10[10] = {8, 3, 6, 5, 4, 0, 9, 2, 1, 7};
  for (int i = 0; i < 10; i++) CHECK_EQ(s.perm[i], want10[i]);
  cddp__sampler_free(&s);
}

/* micro_next gives what micro gives after an advance, within the epoch; -1 at its end */
TEST(micro_next_is_the_next_batch_until_the_epoch_ends) {
  for (int drop_last = 0; drop_last < 2; drop_last++) {
    cddp_sampler_t s;
    CHECK_OK(cddp__sampler_init(&s, 3, 50, 12, drop_last)); /* 4 full batches, then 2 */
    uint32_t want[3], got[3], keep[3] = {7, 7, 7};
    int steps = (int)cddp__sampler_steps_per_epoch(&s);
    for (int b = 0; b < steps; b++) {
      if (b == steps - 1) /* the next batch is the next epoch's */
        for (int m = 0; m < 2; m++) {
          memcpy(got, keep, sizeof got);
          CHECK_EQ(cddp__sampler_micro_next(&s, 1, 2, m, 3, got), -1);
          CHECK(memcmp(got, keep, sizeof got) == 0);
        }
      uint64_t epoch = s.epoch;
      cddp__sampler_advance(&s);
      if (b == steps - 1) {
        CHECK_EQ(s.epoch, epoch + 1);
        continue;
      }
      for (int m = 0; m < 2; m++) {
        int n = cddp__sampler_micro(&s, 1, 2, m, 3, want);
        cddp_sampler_t back = s; /* the state one batch earlier */
        back.consumed -= 12;
        CHECK_EQ(cddp__sampler_micro_next(&back, 1, 2, m, 3, got), n);
        CHECK(memcmp(got, want, sizeof want) == 0);
      }
    }
    cddp__sampler_free(&s);
  }
}

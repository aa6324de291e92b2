/* test_cpubind.c - how cddp run splits the allowed CPUs between its local workers. */
#include <string.h>

#include "launcher/cpubind.h"
#include "test.h"

static cpu_set_t cpus(const int *list, int n) {
  cpu_set_t s;
  CPU_ZERO(&s);
  for (int i = 0; i < n; i++) CPU_SET(list[i], &s);
  return s;
}

static void expect_share(const cpu_set_t *allowed, int n, int index, const char *want) {
  cpu_set_t out;
  char got[256];
  int count = cddp__cpu_share(allowed, n, index, &out);
  cddp__cpu_list(&out, got, sizeof got);
  if (strcmp(got, want)) TEST_FAIL("worker %d of %d got CPUs '%s', expected '%s'", index, n, got, want);
  CHECK_EQ(count, CPU_COUNT(&out));
}

TEST(share_even_split) {
  cpu_set_t all = cpus((int[]){0, 1, 2, 3}, 4);
  expect_share(&all, 2, 0, "0-1");
  expect_share(&all, 2, 1, "2-3");
  expect_share(&all, 4, 3, "3");
}

TEST(share_uneven_split_gives_the_first_ones_more) {
  cpu_set_t all = cpus((int[]){0, 1, 2, 3, 4}, 5);
  expect_share(&all, 2, 0, "0-2");
  expect_share(&all, 2, 1, "3-4");
  expect_share(&all, 3, 0, "0-1");
  expect_share(&all, 3, 1, "2-3");
  expect_share(&all, 3, 2, "4");
}

TEST(share_follows_the_allowed_mask) {
  /* an agent confined by taskset or a Slurm cgroup: only those CPUs are handed out */
  cpu_set_t some = cpus((int[]){2, 5, 7, 9}, 4);
  expect_share(&some, 2, 0, "2,5");
  expect_share(&some, 2, 1, "7,9");
}

TEST(share_none_when_oversubscribed) {
  cpu_set_t two = cpus((int[]){0, 1}, 2);
  cpu_set_t out;
  CHECK_EQ(cddp__cpu_share(&two, 3, 0, &out), 0);
  CHECK_EQ(CPU_COUNT(&out), 0);
  CHECK_EQ(cddp__cpu_share(&two, 2, 2, &out), 0); /* index out of range */
  CHECK_EQ(cddp__cpu_share(&two, 0, 0, &out), 0);
}

TEST(cpu_list_ranges) {
  char buf[64];
  cpu_set_t s = cpus((int[]){0, 1, 2, 4, 6, 7}, 6);
  CHECK(strcmp(cddp__cpu_list(&s, buf, sizeof buf), "0-2,4,6-7") == 0);
  CPU_ZERO(&s);
  CHECK(strcmp(cddp__cpu_list(&s, buf, sizeof buf), "") == 0);
}

/* test_nodelist.c - Slurm host-list and tasks-per-node expansion, good and malformed. */
#include <string.h>

#include "common/check.h"
#include "common/nodelist.h"
#include "test.h"

/* The hosts space-separated into buf; frees them. */
static const char *join_free(char **h, int n, char *buf) {
  buf[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (i) strcat(buf, " ");
    strcat(buf, h[i]);
  }
  cddp__nodelist_free(h, n);
  return buf;
}

static void expect(const char *list, const char *joined) {
  char **h, buf[4096];
  int n;
  CHECK_OK(cddp__nodelist_expand(list, &h, &n));
  if (strcmp(join_free(h, n, buf), joined)) TEST_FAIL("'%s' expanded to '%s', expected '%s'", list, buf, joined);
}

static void expect_bad(const char *list, const char *what, int pos) {
  char **h;
  int n;
  CHECK_RESULT(cddp__nodelist_expand(list, &h, &n), CDDP_INVALID_ARG);
  const char *e = cddp_last_error();
  char p[64];
  snprintf(p, sizeof p, "at position %d", pos);
  if (!strstr(e, list) || !strstr(e, what) || !strstr(e, p))
    TEST_FAIL("error for '%s' was '%s'; wanted '%s' %s", list, e, what, p);
}

TEST(nodelist_expands_ranges_and_padding) {
  expect("node[01-03,7],gpu-a[1-2]", "node01 node02 node03 node07 gpu-a1 gpu-a2");
  expect("node1", "node1");
  expect("node[1-3],other", "node1 node2 node3 other");
  expect("node[1,3-4]", "node1 node3 node4");
  expect("gpu-a[01-03,10],gpu-b[7-8]", "gpu-a01 gpu-a02 gpu-a03 gpu-a10 gpu-b7 gpu-b8");
  expect("n[8-11]", "n8 n9 n10 n11");
  expect("n[098-101]", "n098 n099 n100 n101");
  expect("10.0.0.1,10.0.0.2", "10.0.0.1 10.0.0.2");
}

TEST(nodelist_several_bracket_groups) {
  expect("rack[1-2]-n[01-02]", "rack1-n01 rack1-n02 rack2-n01 rack2-n02");
  expect("a[1-2]b[3]c", "a1b3c a2b3c");
}

TEST(nodelist_first_host) {
  char b[64];
  CHECK_OK(cddp__nodelist_first("node[07-09],x", b, sizeof b));
  CHECK(strcmp(b, "node07") == 0);
}

static void expect_candidates(const char *list, const char *first, const char *joined) {
  char **h, buf[4096];
  int n;
  CHECK_OK(cddp__nodelist_candidates(list, first, &h, &n));
  if (strcmp(join_free(h, n, buf), joined))
    TEST_FAIL("candidates of '%s' from '%s': '%s', expected '%s'", list, first, buf, joined);
}

TEST(nodelist_store_candidates_in_step_order) {
  /* the step's first host is the endpoint; the others follow in SLURM_NODEID order */
  expect_candidates("node[1-3]", "node1", "node1 node2 node3");
  expect_candidates("node[01-02,7],gpu-a[1-2]", "node01", "node01 node02 node07 gpu-a1 gpu-a2");
  /* an endpoint from the middle of the list comes first, the rest keep their order, no repeat */
  expect_candidates("node[1-4]", "node3", "node3 node1 node2 node4");
  expect_candidates("node[1-3]", "node3", "node3 node1 node2");
  /* one not in the list is put in front of all of them */
  expect_candidates("node[1-2]", "10.0.0.9", "10.0.0.9 node1 node2");
  expect_candidates("node1", "node1", "node1");
  char **h;
  int n;
  CHECK_RESULT(cddp__nodelist_candidates("node[1-", "node1", &h, &n), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "malformed node list 'node[1-'") != NULL);
}

TEST(nodelist_rejects_malformed) {
  expect_bad("node[01-03", "missing ']'", 5);
  expect_bad("node[3-1]", "range goes backwards", 8);
  expect_bad("node[]", "empty range", 6);
  expect_bad("node[1-]", "expected a number after '-'", 8);
  expect_bad("node[a]", "expected a number", 6);
  expect_bad("node1,,node2", "empty host name", 7);
  expect_bad("node1,", "trailing ','", 7);
  expect_bad("node]1", "']' without '['", 5);
  expect_bad("node[1[2]]", "nested '['", 7);
  expect_bad("no de", "invalid character", 3);
  expect_bad("n[1-999999]", "more than 65536 hosts", 5);
  char **h;
  int n;
  CHECK_RESULT(cddp__nodelist_expand("", &h, &n), CDDP_INVALID_ARG);
  CHECK_RESULT(cddp__nodelist_expand(NULL, &h, &n), CDDP_INVALID_ARG);
}

TEST(tasks_per_node_lists) {
  int t;
  CHECK_OK(cddp__tasks_per_node("2(x2),1", 0, &t));
  CHECK_EQ(t, 2);
  CHECK_OK(cddp__tasks_per_node("2(x2),1", 1, &t));
  CHECK_EQ(t, 2);
  CHECK_OK(cddp__tasks_per_node("2(x2),1", 2, &t));
  CHECK_EQ(t, 1);
  CHECK_OK(cddp__tasks_per_node("8", 0, &t));
  CHECK_EQ(t, 8);
  CHECK_RESULT(cddp__tasks_per_node("2(x2),1", 3, &t), CDDP_INVALID_ARG);
  CHECK_RESULT(cddp__tasks_per_node("2(y2)", 0, &t), CDDP_INVALID_ARG);
  CHECK_RESULT(cddp__tasks_per_node("x", 0, &t), CDDP_INVALID_ARG);
}

TEST(slurm_port_in_range_and_distinct) {
  for (long j = 1; j < 2000; j++) {
    int p = cddp__slurm_port(j, 0);
    CHECK(p >= 20000 && p <= 32767);
    CHECK(p != cddp__slurm_port(j + 1, 0));
  }
  CHECK(cddp__slurm_port(31, 0) != cddp__slurm_port(31, 1));
  /* 20000 + (job * 64 + step % 64) % 12768: any 399 consecutive job ids get distinct ports */
  static char seen[12768];
  for (long j = 5000; j < 5000 + 399; j++) {
    int p = cddp__slurm_port(j, 0) - 20000;
    CHECK(!seen[p]);
    seen[p] = 1;
  }
  CHECK_EQ(cddp__slurm_port(5000, 0), cddp__slurm_port(5000 + 399, 0)); /* the period */
}

/* test_run_rdzv.c - the rendezvous with threads as agents on the in-memory store. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/clock.h"
#include "job/rdzv.h"
#include "job/rdzv_watch.h"
#include "job/elastic.h"
#include "test.h"

typedef struct agent {
  pthread_t th;
  cddp_store_t *base;
  cddp__rdzv_cfg_t cfg;
  int min_round;
  cddp_result_t rc;
  cddp__rdzv_t out;
  char err[256];
  double ms; /* how long the join took */
} agent_t;

static void *agent_main(void *arg) {
  agent_t *a = arg;
  cddp_store_t *v;
  uint64_t t0 = cddp__now_ns();
  if (cddp_store_prefix_create(&v, a->base, "job/", 0) != CDDP_OK) {
    a->rc = CDDP_INTERNAL;
    return NULL;
  }
  a->rc = cddp__rdzv_join(v, &a->cfg, a->min_round, &a->out);
  a->ms = (cddp__now_ns() - t0) / 1e6;
  snprintf(a->err, sizeof a->err, "%s", cddp_last_error());
  cddp_store_close(v);
  return NULL;
}

static int next_static_nodes, next_late_ok; /* the next start's (then back to 0) */

static void start(agent_t *a, cddp_store_t *base, int minn, int maxn, int node_rank, int last_call_ms, int timeout_ms,
                  int nproc, int id) {
  memset(a, 0, sizeof *a);
  a->base = base;
  a->cfg = (cddp__rdzv_cfg_t){.min_nodes = minn, .max_nodes = maxn, .node_rank = node_rank,
                              .last_call_ms = last_call_ms, .timeout_ms = timeout_ms,
                              .static_nodes = next_static_nodes, .late_ok = next_late_ok};
  next_static_nodes = next_late_ok = 0;
  snprintf(a->cfg.self.host, sizeof a->cfg.self.host, "host%d", id);
  snprintf(a->cfg.self.addr, sizeof a->cfg.self.addr, "10.0.0.%d", id);
  a->cfg.self.nproc = nproc;
  a->cfg.self.master_port = 1000 + id;
  CHECK(pthread_create(&a->th, NULL, agent_main, a) == 0);
}

/* Members of one round agree on it; node ranks are 0..n-1 and rank bases follow node order. */
static void check_round(agent_t **m, int n) {
  int seen[256] = {0};
  for (int i = 0; i < n; i++) {
    CHECK_EQ(m[i]->out.nnodes, n);
    CHECK_EQ(m[i]->out.round, m[0]->out.round);
    int r = m[i]->out.node_rank;
    CHECK(r >= 0 && r < n && !seen[r]);
    seen[r] = 1;
    int base = 0;
    for (int j = 0; j < r; j++) base += m[i]->out.nodes[j].nproc;
    CHECK_EQ(m[i]->out.rank_base, base);
    /* the record at my node rank is mine */
    CHECK(!strcmp(m[i]->out.nodes[r].host, m[i]->cfg.self.host));
    CHECK_EQ(m[i]->out.nodes[r].master_port, m[i]->cfg.self.master_port);
  }
}

TEST(rdzv_closes_at_max_nodes) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  agent_t a[3];
  agent_t *m[3];
  for (int i = 0; i < 3; i++) start(&a[i], s, 3, 3, -1, 60000, 5000, i + 1, i);
  for (int i = 0; i < 3; i++) {
    pthread_join(a[i].th, NULL);
    if (a[i].rc != CDDP_OK) TEST_FAIL("agent %d: %s", i, a[i].err);
    m[i] = &a[i];
    CHECK(a[i].ms < 3000 * cddp_test_scale()); /* closed at max, not after the 60 s last call */
  }
  check_round(m, 3);
  CHECK_EQ(a[0].out.world_size, 6);
  CHECK_EQ(a[0].out.closed_here + a[1].out.closed_here + a[2].out.closed_here, 1);
  for (int i = 0; i < 3; i++) cddp__rdzv_release(&a[i].out);
  cddp_store_close(s);
}

TEST(rdzv_long_member_list_travels_deflated) {
  /* 160 nodes: the list the closing node leaves is packed (job/jobkeys.h); every node reads it back */
  enum { N = 160 };
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  agent_t *a = calloc(N, sizeof *a), *m[N];
  for (int i = 0; i < N; i++) start(&a[i], s, N, N, -1, 60000, 20000, 1, i);
  for (int i = 0; i < N; i++) {
    pthread_join(a[i].th, NULL);
    if (a[i].rc != CDDP_OK) TEST_FAIL("agent %d: %s", i, a[i].err);
    m[i] = &a[i];
  }
  check_round(m, N);
  void *v = NULL;
  size_t len = 0;
  CHECK_OK(cddp_store_get(s, "job/rdzv/0/members", &v, &len, 0));
  CHECK(len > 3 && !memcmp(v, "#z ", 3));
  free(v);
  for (int i = 0; i < N; i++) cddp__rdzv_release(&a[i].out);
  free(a);
  cddp_store_close(s);
}

TEST(rdzv_closes_after_last_call_past_min) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  agent_t a[2];
  agent_t *m[2] = {&a[0], &a[1]};
  for (int i = 0; i < 2; i++) start(&a[i], s, 2, 4, -1, 300, 5000, 2, i);
  for (int i = 0; i < 2; i++) {
    pthread_join(a[i].th, NULL);
    if (a[i].rc != CDDP_OK) TEST_FAIL("agent %d: %s", i, a[i].err);
    CHECK(a[i].ms >= 250); /* waited for the last call */
  }
  check_round(m, 2);
  CHECK_EQ(a[0].out.world_size, 4);
  CHECK_EQ(a[0].out.closed_here + a[1].out.closed_here, 1);
  cddp__rdzv_release(&a[0].out);
  cddp__rdzv_release(&a[1].out);
  cddp_store_close(s);
}

/* Eight agents race to close a 2:8 round with no last call: exactly one decides; the
 * members agree; agents past the close wait for round 1 (and time out here). */
TEST(rdzv_exactly_one_closer) {
  for (int iter = 0; iter < 5; iter++) {
    cddp_store_t *s;
    CHECK_OK(cddp_store_mem_create(&s));
    agent_t a[8];
    agent_t *m[8];
    int nm = 0, closers = 0, late = 0;
    for (int i = 0; i < 8; i++) start(&a[i], s, 2, 8, -1, 0, 400, 1, i);
    for (int i = 0; i < 8; i++) pthread_join(a[i].th, NULL);
    for (int i = 0; i < 8; i++) {
      if (a[i].rc == CDDP_OK) {
        m[nm++] = &a[i];
        closers += a[i].out.closed_here;
      } else {
        CHECK_EQ(a[i].rc, CDDP_TIMEOUT);
        if (!strstr(a[i].err, "round 1 did not open")) TEST_FAIL("late agent error: %s", a[i].err);
        late++;
      }
    }
    CHECK(nm >= 2);
    CHECK_EQ(nm + late, 8);
    CHECK_EQ(closers, 1);
    check_round(m, nm);
    for (int i = 0; i < nm; i++) cddp__rdzv_release(&m[i]->out);
    cddp_store_close(s);
  }
}

/* A node arriving after round 0 closed joins round 1, which opens on a restart. */
TEST(rdzv_late_joiner_goes_to_next_round) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  agent_t a[3];
  start(&a[0], s, 2, 3, -1, 100, 5000, 1, 0);
  start(&a[1], s, 2, 3, -1, 100, 5000, 1, 1);
  pthread_join(a[0].th, NULL);
  pthread_join(a[1].th, NULL);
  CHECK_OK(a[0].rc);
  CHECK_OK(a[1].rc);
  CHECK_EQ(a[0].out.nnodes, 2);
  start(&a[2], s, 2, 3, -1, 100, 5000, 1, 2);
  usleep(100000);
  /* a worker failed: the agents of round 0 open round 1 with restart count 1 and rejoin */
  cddp_store_t *v;
  CHECK_OK(cddp_store_prefix_create(&v, s, "job/", 0));
  cddp__job_event_t restart = {.kind = CDDP__EV_RESTART};
  CHECK_OK(cddp__rdzv_post(v, 0, &restart, NULL));
  CHECK_OK(cddp__gen_open_restart(v, 0, 0));
  CHECK_OK(cddp__gen_open_restart(v, 0, 1)); /* every agent opens it: one generation */
  cddp_store_close(v);
  for (int i = 0; i < 2; i++) {
    cddp__rdzv_release(&a[i].out);
    start(&a[i], s, 2, 3, -1, 100, 5000, 1, i);
    a[i].min_round = 1;
  }
  /* start() launched the threads already with min_round 0; restart generation 1 takes them to round 1 */
  agent_t *m[3] = {&a[0], &a[1], &a[2]};
  for (int i = 0; i < 3; i++) {
    pthread_join(a[i].th, NULL);
    if (a[i].rc != CDDP_OK) TEST_FAIL("agent %d: %s", i, a[i].err);
    CHECK_EQ(a[i].out.round, 1);
    CHECK_EQ(a[i].out.restart_count, 1);
  }
  check_round(m, 3);
  for (int i = 0; i < 3; i++) cddp__rdzv_release(&a[i].out);
  cddp_store_close(s);
}

/* restart-all: a node that came after round 0 closed waits for round 1; when the job ends with
 * round 0 instead (done, or a failure with no restart left), it is told at once with the job's
 * code and line, instead of waiting out its timeout. So is a node that comes after the end. */
TEST(rdzv_late_joiner_learns_the_job_ended) {
  const cddp__job_event_t ends[2] = {{.kind = CDDP__EV_DONE},
                                     {.kind = CDDP__EV_FAIL, .code = 3, .line = "cddp run: rank 1 (host h1) exited 3"}};
  for (int e = 0; e < 2; e++) {
    cddp_store_t *s, *v;
    CHECK_OK(cddp_store_mem_create(&s));
    agent_t a[4];
    start(&a[0], s, 2, 3, -1, 100, 20000, 1, 0);
    start(&a[1], s, 2, 3, -1, 100, 20000, 1, 1);
    for (int i = 0; i < 2; i++) {
      pthread_join(a[i].th, NULL);
      CHECK_OK(a[i].rc);
    }
    start(&a[2], s, 2, 3, -1, 100, 20000, 1, 2);
    CHECK_OK(cddp_store_prefix_create(&v, s, "job/", 0));
    int64_t joined = 0; /* the late node took its slot: it waits for round 1 now */
    for (int i = 0; i < 500 && joined < 3; i++) {
      CHECK_OK(cddp_store_add(v, cddp__job_key(CDDP__JK_RDZV_JOINED, 0, 0).s, 0, &joined));
      if (joined < 3) usleep(10000);
    }
    CHECK_EQ(joined, 3);
    usleep(50000); /* past the slot into the wait (either order ends the same way) */
    uint64_t t0 = cddp__now_ns();
    CHECK_OK(cddp__rdzv_post(v, 0, &ends[e], NULL));
    CHECK_OK(cddp__gen_close_job(v, 0, 0));
    CHECK_OK(cddp__gen_close_job(v, 0, 1)); /* every agent of the round may: one generation */
    pthread_join(a[2].th, NULL);
    double waited_ms = (cddp__now_ns() - t0) / 1e6;
    CHECK_EQ(a[2].rc, CDDP_ABORTED);
    CHECK_EQ(a[2].out.ended, 1);
    CHECK_EQ(a[2].out.end_code, e == 0 ? 0 : 3);
    CHECK(waited_ms < 10000); /* not the 20 s timeout */
    const char *want = e == 0 ? "the job finished without this node: it came after round 0 closed"
                              : "the job ended without this node (it came after round 0 closed): rank 1 (host h1) exited 3";
    if (!strstr(a[2].err, want)) TEST_FAIL("late node's line: %s", a[2].err);
    int64_t gen;
    CHECK_OK(cddp__gen_latest(v, &gen));
    CHECK_EQ(gen, 1);
    /* a node started after the end: told at once too, with the same code */
    start(&a[3], s, 2, 3, -1, 100, 20000, 1, 3);
    pthread_join(a[3].th, NULL);
    CHECK_EQ(a[3].rc, CDDP_ABORTED);
    CHECK_EQ(a[3].out.end_code, e == 0 ? 0 : 3);
    CHECK(a[3].ms < 10000);
    for (int i = 0; i < 2; i++) cddp__rdzv_release(&a[i].out);
    cddp_store_close(v);
    cddp_store_close(s);
  }
}

TEST(rdzv_static_node_ranks_and_timeout) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  agent_t a[3];
  agent_t *m[3] = {&a[0], &a[1], &a[2]};
  int ranks[3] = {2, 0, 1};
  for (int i = 0; i < 3; i++) start(&a[i], s, 3, 3, ranks[i], 0, 5000, i + 1, i);
  for (int i = 0; i < 3; i++) {
    pthread_join(a[i].th, NULL);
    if (a[i].rc != CDDP_OK) TEST_FAIL("agent %d: %s", i, a[i].err);
    CHECK_EQ(a[i].out.node_rank, ranks[i]);
  }
  check_round(m, 3);
  CHECK_EQ(a[0].out.rank_base, 2 + 3); /* node 2 follows nodes 0 (nproc 2) and 1 (nproc 3) */
  for (int i = 0; i < 3; i++) cddp__rdzv_release(&a[i].out);
  cddp_store_close(s);
  /* a missing static node: TIMEOUT naming the count and the missing rank */
  CHECK_OK(cddp_store_mem_create(&s));
  start(&a[0], s, 2, 2, 0, 0, 300, 1, 0);
  pthread_join(a[0].th, NULL);
  CHECK_EQ(a[0].rc, CDDP_TIMEOUT);
  if (!strstr(a[0].err, "1 of 2 nodes joined") || !strstr(a[0].err, "node 1 missing")) TEST_FAIL("error: %s", a[0].err);
  cddp_store_close(s);
}

/* A Slurm step's agents (static, --nnodes 2:3, replace): a restarted node finds its slot taken
 * and joins late; after the store was rebuilt elsewhere (cddp__rdzv_restore from a member's
 * round) it does the same instead of waiting for a round that never fills. */
TEST(rdzv_static_late_node_and_restore) {
  cddp_store_t *s, *fresh, *v;
  CHECK_OK(cddp_store_mem_create(&s));
  agent_t a[4];
  for (int i = 0; i < 3; i++) {
    next_static_nodes = 3, next_late_ok = 1;
    start(&a[i], s, 2, 3, i, 0, 5000, 1, i);
  }
  for (int i = 0; i < 3; i++) {
    pthread_join(a[i].th, NULL);
    if (a[i].rc != CDDP_OK) TEST_FAIL("agent %d: %s", i, a[i].err);
    CHECK_EQ(a[i].out.late, 0);
  }
  for (int pass = 0; pass < 2; pass++) { /* the first store, then one rebuilt from node 1's round */
    CHECK_OK(cddp_store_mem_create(&fresh));
    if (pass == 1) {
      CHECK_OK(cddp_store_prefix_create(&v, fresh, "job/", 0));
      CHECK_OK(cddp__rdzv_restore(v, &a[1].cfg, &a[1].out));
      cddp_store_close(v);
    }
    next_static_nodes = 3, next_late_ok = 1;
    start(&a[3], pass ? fresh : s, 2, 3, 0, 0, 2000, 4, 9); /* node 0 again, a new agent */
    pthread_join(a[3].th, NULL);
    if (a[3].rc != CDDP_OK) TEST_FAIL("pass %d, the restarted node: %s", pass, a[3].err);
    CHECK_EQ(a[3].out.late, 1);
    CHECK_EQ(a[3].out.node_rank, 3); /* appended after the step's 3 nodes */
    CHECK_EQ(a[3].out.world_size, 3 + 4);
    CHECK(!strcmp(a[3].out.nodes[0].host, "host0")); /* the round as it closed, in node order */
    CHECK(!strcmp(a[3].out.nodes[2].host, "host2"));
    cddp__rdzv_release(&a[3].out);
    cddp_store_close(fresh);
  }
  for (int i = 0; i < 3; i++) cddp__rdzv_release(&a[i].out);
  cddp_store_close(s);
}

TEST(rdzv_min_not_reached_times_out) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  agent_t a[2];
  for (int i = 0; i < 2; i++) start(&a[i], s, 3, 4, -1, 0, 300, 1, i);
  for (int i = 0; i < 2; i++) {
    pthread_join(a[i].th, NULL);
    CHECK_EQ(a[i].rc, CDDP_TIMEOUT);
    if (!strstr(a[i].err, "2 of at least 3 nodes")) TEST_FAIL("error: %s", a[i].err);
  }
  cddp_store_close(s);
}

TEST(rdzv_events_first_value_wins) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  cddp__job_event_t fail = {.kind = CDDP__EV_FAIL, .code = 3, .line = "rank 1 exited"}, now;
  cddp__job_event_t restart = {.kind = CDDP__EV_RESTART};
  CHECK_OK(cddp__rdzv_post(s, 4, &fail, &now));
  CHECK(now.kind == CDDP__EV_FAIL && now.code == 3 && !strcmp(now.line, "rank 1 exited"));
  CHECK_OK(cddp__rdzv_post(s, 4, &restart, &now));
  CHECK(now.kind == CDDP__EV_FAIL && now.code == 3);
  void *raw = NULL; /* the wire text other versions of cddp read */
  size_t rlen = 0;
  CHECK_OK(cddp_store_get(s, "rdzv/4/event", &raw, &rlen, 0));
  CHECK(rlen == 20 && !memcmp(raw, "fail 3 rank 1 exited", 20));
  free(raw);
  cddp__rdzv_t r = {.round = 4, .nnodes = 2};
  CHECK_OK(cddp__rdzv_node_done(s, &r));
  r.round = 5;
  CHECK_OK(cddp__rdzv_node_done(s, &r));
  CHECK_OK(cddp__rdzv_node_done(s, &r));
  CHECK_OK(cddp__rdzv_post(s, 5, &restart, &now));
  CHECK(now.kind == CDDP__EV_DONE);
  CHECK_OK(cddp__rdzv_exit(s, &r, 0, 0));
  CHECK_RESULT(cddp__rdzv_exit(s, &(cddp__rdzv_t){.round = 6, .nnodes = 2}, 1, 50), CDDP_TIMEOUT);
  CHECK_OK(cddp__rdzv_exit(s, &r, 1, 1000));
  cddp_store_close(s);
}

TEST(rdzv_waiter_record_and_id_line) {
  cddp__rdzv_waiter_t a = {.wall_ms = 1700000000123ull, .waiting = 1, .node_records = 2}, b = {0}, back;
  snprintf(a.run_id, sizeof a.run_id, "jobB");
  snprintf(a.host, sizeof a.host, "vm1");
  char buf[300], l1[400], l2[400];
  int len = cddp__rdzv_waiter_format(&a, buf, sizeof buf);
  CHECK(len > 0);
  CHECK_EQ(cddp__rdzv_waiter_parse(buf, (size_t)len, &back), 0);
  CHECK(back.wall_ms == a.wall_ms && back.waiting == 1 && back.node_records == 2);
  CHECK(!strcmp(back.run_id, "jobB") && !strcmp(back.host, "vm1"));
  CHECK_EQ(cddp__rdzv_waiter_parse("12 1", 4, &back), -1);
  b = a;
  snprintf(b.run_id, sizeof b.run_id, "jobA");
  snprintf(b.host, sizeof b.host, "vm2");
  cddp__rdzv_id_line(&a, &b, l1, sizeof l1);
  cddp__rdzv_id_line(&b, &a, l2, sizeof l2);
  CHECK(!strcmp(l1, l2)); /* both sides print the same line */
  CHECK(strstr(l1, "--rdzv-id: node vm2 was started with jobA, node vm1 with jobB") != NULL);
}

/* A node of another job ends this job's round-0 join with the line, as a --nnodes disagreement does. */
TEST(rdzv_mismatch_ends_a_waiting_join) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  cddp__rdzv_mismatch(s, 0, 0, "the nodes disagree on --rdzv-id: test");
  cddp__rdzv_cfg_t cfg = {.min_nodes = 2, .max_nodes = 2, .node_rank = -1, .last_call_ms = 100, .timeout_ms = 3000};
  snprintf(cfg.self.host, sizeof cfg.self.host, "h");
  cfg.self.nproc = 1;
  cddp__rdzv_t rz;
  CHECK_RESULT(cddp__rdzv_join(s, &cfg, 0, &rz), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "disagree on --rdzv-id: test") != NULL);
  cddp_store_close(s);
}

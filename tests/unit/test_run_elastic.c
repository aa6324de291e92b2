/* test_run_elastic.c - the generation protocol of in-place replacement, with threads as ranks on
 * the in-memory store: announce and wait, a bootstrap that gives up when a later generation
 * appears, convergence on the latest of two close failures, a bounded wait. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cddp/comm.h"
#include "cddp/ddp.h"
#include "common/clock.h"
#include "comm/transport.h"
#include "world/world_internal.h"
#include "job/elastic.h"
#include "test.h"

/* comm.c refers to the transports weakly; a strong reference pulls shm.o from libcddp.a. */
const cddp__transport_t *const elastic_force_link = &cddp__transport_shm;

static double ms_since(uint64_t t0) { return (double)(cddp__now_ns() - t0) / 1e6; }

TEST(gen_bump_announces_and_wakes_waiters) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  int64_t g = -1;
  CHECK_OK(cddp__gen_latest(s, &g));
  CHECK_EQ(g, 0);
  CHECK_RESULT(cddp__gen_wait_past(s, 0, 0), CDDP_TIMEOUT);
  CHECK(strstr(cddp_last_error(), "elastic/gen/1") != NULL);
  cddp__job_announce_t a = cddp__job_announce_replace(1, 42);
  CHECK_OK(cddp__gen_bump(s, &a, &g));
  CHECK_EQ(g, 1);
  CHECK_OK(cddp__gen_wait_past(s, 0, 0));
  CHECK_RESULT(cddp__gen_wait_past(s, 1, 0), CDDP_TIMEOUT);
  void *v = NULL;
  size_t len = 0;
  CHECK_OK(cddp_store_get(s, "elastic/gen/1", &v, &len, 0));
  CHECK(len == 21 && !memcmp(v, "replace rank 1 pid 42", 21)); /* the kind, then the words */
  free(v);
  a = cddp__job_announce_replace(0, 43);
  CHECK_OK(cddp__gen_bump(s, &a, &g));
  CHECK_EQ(g, 2);
  CHECK_OK(cddp__gen_latest(s, &g));
  CHECK_EQ(g, 2);
  cddp_store_close(s);
}

typedef struct later {
  cddp_store_t *s;
  int delay_ms, n;
} later_t;

static void *bump_later(void *arg) {
  later_t *l = arg;
  for (int i = 0; i < l->n; i++) {
    usleep((useconds_t)l->delay_ms * 1000);
    int64_t g;
    cddp__job_announce_t a = cddp__job_announce_replace(i, 1);
    cddp__gen_bump(l->s, &a, &g);
  }
  return NULL;
}

TEST(gen_view_gives_up_when_a_later_generation_appears) {
  cddp_store_t *s, *v;
  CHECK_OK(cddp_store_mem_create(&s));
  CHECK_OK(cddp__gen_view(&v, s, 0, cddp__deadline_ms(20000)));
  CHECK_OK(cddp_store_set(v, "x", "1", 1)); /* keys live under elastic/g0/ */
  CHECK_OK(cddp_store_wait(s, (const char *[]){"elastic/g0/x"}, 1, 0));
  later_t l = {s, 100, 1};
  pthread_t th;
  pthread_create(&th, NULL, bump_later, &l);
  uint64_t t0 = cddp__now_ns();
  void *val = NULL;
  size_t len;
  CHECK_RESULT(cddp_store_get(v, "never", &val, &len, 10000), CDDP_ABORTED);
  double ms = ms_since(t0);
  CHECK(ms >= 90 && ms < 2000 * cddp_test_scale());
  CHECK(strstr(cddp_last_error(), "generation 1") != NULL);
  pthread_join(th, NULL);
  /* disarmed: a plain view again */
  cddp__gen_view_disarm(v);
  CHECK_RESULT(cddp_store_wait(v, (const char *[]){"never"}, 1, 10), CDDP_TIMEOUT);
  cddp_store_close(v);
  /* the deadline bounds every wait */
  CHECK_OK(cddp__gen_view(&v, s, 1, cddp__deadline_ms(200)));
  t0 = cddp__now_ns();
  CHECK_RESULT(cddp_store_wait(v, (const char *[]){"never"}, 1, 10000), CDDP_TIMEOUT);
  CHECK(ms_since(t0) < 2000);
  cddp_store_close(v);
  cddp_store_close(s);
}

typedef struct rank {
  pthread_t th;
  cddp_store_t *s;
  int rank, world;
  int64_t min_gen, gen;
  int deadline_ms;
  cddp_result_t rc;
  cddp_comm_t *comm;
  cddp_store_t *view;
  cddp__gen_place_t *place;
  double sum;
} rank_t;

static void *form_main(void *arg) {
  rank_t *r = arg;
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.transport = "shm";
  cfg.timeout_ms = 20000;
  r->rc = cddp__gen_form(r->s, r->rank, r->world, 0, &cfg, r->min_gen, cddp__deadline_ms(r->deadline_ms), r->place, &r->comm,
                         &r->view, &r->gen);
  if (r->rc != CDDP_OK) return NULL;
  double x = r->rank + 1;
  r->rc = cddp_allreduce(r->comm, &x, &x, 1, CDDP_F64, CDDP_SUM);
  r->sum = x;
  return NULL;
}

/* Ranks 0 and 1 wait in generation 0 for rank 2, which "dies" twice in a row (generations 1
 * and 2 are announced 100 ms apart); its replacement starts in generation 2: everyone meets
 * there. */
TEST(gen_form_converges_on_the_latest_of_two_close_failures) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  rank_t r[3];
  memset(r, 0, sizeof r);
  for (int i = 0; i < 3; i++) r[i] = (rank_t){.s = s, .rank = i, .world = 3, .deadline_ms = 20000};
  uint64_t t0 = cddp__now_ns();
  for (int i = 0; i < 2; i++) pthread_create(&r[i].th, NULL, form_main, &r[i]);
  later_t l = {s, 100, 2};
  bump_later(&l);
  r[2].min_gen = 2;
  pthread_create(&r[2].th, NULL, form_main, &r[2]);
  for (int i = 0; i < 3; i++) pthread_join(r[i].th, NULL);
  for (int i = 0; i < 3; i++) {
    CHECK_OK(r[i].rc);
    CHECK_EQ(r[i].gen, 2);
    CHECK_NEAR(r[i].sum, 6.0, 0);
  }
  CHECK(ms_since(t0) < 10000);
  for (int i = 0; i < 3; i++) cddp_comm_destroy(r[i].comm), cddp_store_close(r[i].view);
  cddp_store_close(s);
}

/* Nobody else comes: the wait ends at the deadline with TIMEOUT naming the generation. */
TEST(gen_form_is_bounded) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  rank_t r = {.s = s, .rank = 0, .world = 2, .deadline_ms = 300};
  uint64_t t0 = cddp__now_ns();
  form_main(&r);
  CHECK_RESULT(r.rc, CDDP_TIMEOUT);
  CHECK(strstr(cddp_last_error(), "generation 0") != NULL);
  CHECK(ms_since(t0) < 3000);
  cddp_store_close(s);
}

/* The member record: text in, ranks out (rank_base = the nproc before the agent). */
TEST(members_parse_format_and_rank_derivation) {
  cddp__members_t m, back;
  const char *t = "0 1 hostA\n2 2 hostB\n5 1 hostC";
  CHECK_EQ(cddp__members_parse(t, strlen(t), &m), 0);
  CHECK_EQ(m.n, 3);
  int base = -9, world = -9;
  CHECK_EQ(cddp__members_find(&m, 0, &base, &world), 0);
  CHECK_EQ(base, 0);
  CHECK_EQ(world, 4);
  CHECK_EQ(cddp__members_find(&m, 2, &base, NULL), 1);
  CHECK_EQ(base, 1);
  CHECK_EQ(cddp__members_find(&m, 5, &base, NULL), 2);
  CHECK_EQ(base, 3);
  CHECK_EQ(cddp__members_find(&m, 1, &base, NULL), -1); /* not a member: dropped */
  CHECK_EQ(base, -1);
  char buf[256];
  size_t len = cddp__members_format(&m, buf, sizeof buf);
  CHECK(len == strlen(t) && !memcmp(buf, t, len));
  char small[10];
  CHECK_EQ(cddp__members_format(&m, small, sizeof small), 0); /* does not fit */
  CHECK_EQ(cddp__members_parse(buf, len, &back), 0);
  CHECK(!strcmp(back.m[1].host, "hostB") && back.m[1].nproc == 2);
  const char *stop = "stop job stopped: 1 of at least 2 nodes left";
  CHECK_EQ(cddp__members_parse(stop, strlen(stop), &m), 0);
  CHECK(m.stop && !strcmp(m.line, "job stopped: 1 of at least 2 nodes left"));
  const char *bad[] = {"", "0 0 a", "x 1 a", "0 1 a\n0 1 b", "0 1", "0 1 a\n\n1 1 b", "-1 1 a", "0 1 a b"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK_EQ(cddp__members_parse(bad[i], strlen(bad[i]), &m), -1);
}

typedef struct dropper {
  cddp_store_t *s;
  int self;
  int64_t gen;
  cddp_result_t rc;
} dropper_t;

static int drop_one(const cddp__members_t *cur, cddp__members_t *next, void *ctx) {
  (void)ctx;
  if (cddp__members_find(cur, 1, NULL, NULL) < 0) return 1; /* a peer did it */
  *next = *cur;
  next->n = 0;
  for (int i = 0; i < cur->n; i++)
    if (cur->m[i].id != 1) next->m[next->n++] = cur->m[i];
  return 0;
}

static void *drop_main(void *arg) {
  dropper_t *d = arg;
  cddp__job_announce_t a = {.kind = CDDP__GEN_LOSS, .what = "node h (agent 1, test)"};
  d->rc = cddp__gen_change(d->s, &a, d->self, drop_one, NULL, &d->gen);
  return NULL;
}

/* Two survivors see the same loss at once: exactly one makes the new generation. */
TEST(gen_change_makes_each_change_once) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  cddp__members_t m = {.n = 3};
  for (int i = 0; i < 3; i++) m.m[i] = (cddp__member_t){.id = i, .nproc = 1, .host = "h"};
  CHECK_OK(cddp__members_write(s, 0, &m));
  dropper_t d[2] = {{s, 0, -1, CDDP_OK}, {s, 2, -1, CDDP_OK}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, drop_main, &d[i]);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  CHECK_OK(d[0].rc);
  CHECK_OK(d[1].rc);
  CHECK_EQ(d[0].gen + d[1].gen, 1); /* one made generation 1, the other had nothing to do */
  int64_t g;
  CHECK_OK(cddp__gen_latest(s, &g));
  CHECK_EQ(g, 1);
  cddp__members_t now;
  CHECK_OK(cddp__members_read(s, 1, &now));
  int base, world;
  CHECK_EQ(cddp__members_find(&now, 2, &base, &world), 1);
  CHECK_EQ(base, 1);
  CHECK_EQ(world, 2);
  /* a replacement (no edit) copies the members into its generation */
  cddp__job_announce_t a = cddp__job_announce_replace(1, 9);
  CHECK_OK(cddp__gen_bump(s, &a, &g));
  CHECK_EQ(g, 2);
  CHECK_OK(cddp__members_read(s, 2, &now));
  CHECK_EQ(now.n, 2);
  cddp_store_close(s);
}

/* A worker whose agent is not in the generation's record is told at once that it was
 * dropped; a stop record ends it with the record's line. */
TEST(gen_form_drops_a_worker_whose_agent_is_gone) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  cddp__members_t m = {.n = 2};
  for (int i = 0; i < 2; i++) m.m[i] = (cddp__member_t){.id = i, .nproc = 1, .host = "h"};
  CHECK_OK(cddp__members_write(s, 0, &m));
  cddp__gen_place_t place = {.agent_id = 7, .local_rank = 0};
  rank_t r = {.s = s, .rank = 0, .world = 2, .deadline_ms = 5000, .place = &place};
  uint64_t t0 = cddp__now_ns();
  form_main(&r);
  CHECK_RESULT(r.rc, CDDP_NOT_FOUND);
  CHECK_EQ(place.gone, 1);
  CHECK(strstr(cddp_last_error(), "dropped") != NULL);
  CHECK(ms_since(t0) < 1000);
  cddp__members_t stop = {.stop = 1};
  snprintf(stop.line, sizeof stop.line, "job stopped: test");
  CHECK_OK(cddp__members_write(s, 1, &stop));
  CHECK_OK(cddp_store_set(s, "elastic/gen/1", "x", 1));
  place = (cddp__gen_place_t){.agent_id = 0};
  form_main(&r);
  CHECK_RESULT(r.rc, CDDP_NOT_FOUND);
  CHECK_EQ(place.gone, 2);
  CHECK(!strcmp(cddp_last_error(), "job stopped: test"));
  cddp_store_close(s);
}

static cddp__members_t *mk(const char *text) {
  static cddp__members_t m[4];
  static int k;
  cddp__members_t *r = &m[k++ % 4];
  cddp__members_parse(text, strlen(text), r);
  return r;
}

TEST(members_next_takes_joiners_up_to_max_and_keeps_ranks) {
  cddp__members_t *cur = mk("0 1 a\n1 2 b"), next;
  cddp__member_t cand[] = {{.id = 1, .nproc = 2, .host = "b"}, {.id = 4, .nproc = 1, .host = "c"},
                           {.id = 5, .nproc = 1, .host = "d"}};
  cddp__change_t c = {.self = 0, .lost = -1, .min_nodes = 2, .max_nodes = 3, .cand = cand, .ncand = 3};
  CHECK_EQ(cddp__members_next(cur, &next, &c), 0);
  CHECK_EQ(next.n, 3); /* a member among the candidates is skipped; d is beyond max */
  CHECK_EQ(next.m[2].id, 4);
  int base, w;
  CHECK_EQ(cddp__members_find(&next, 1, &base, &w), 1);
  CHECK_EQ(base, 1);
  CHECK_EQ(w, 4);
  CHECK_EQ(cddp__members_find(&next, 4, &base, NULL), 2);
  CHECK_EQ(base, 3);
  CHECK(!strcmp(c.ann.what, "node c (agent 4)") && c.ann.kind == CDDP__GEN_JOIN);
  CHECK_EQ(c.added, 1);
  CHECK_EQ(c.refused_id, 5);
  CHECK(strstr(c.refused, "maximum of 3") != NULL);
  /* at max, nothing to do; not a member, nothing to do */
  c.max_nodes = 2;
  CHECK_EQ(cddp__members_next(cur, &next, &c), 1);
  c.max_nodes = 3, c.self = 9;
  CHECK_EQ(cddp__members_next(cur, &next, &c), 1);
}

TEST(members_next_keeps_a_joiner_whose_world_cannot_split_the_batch_pending) {
  cddp__members_t *cur = mk("0 1 a\n1 1 b"), next;
  cddp__member_t cand[] = {{.id = 2, .nproc = 2, .host = "c"}, {.id = 3, .nproc = 1, .host = "d"}};
  cddp__change_t c = {.self = 1, .lost = -1, .min_nodes = 1, .max_nodes = 4, .cand = cand, .ncand = 2,
                      .worlds = "1 2 3 6"};
  CHECK_EQ(cddp__members_next(cur, &next, &c), 0); /* 2 + 2 = 4 does not split; 2 + 1 = 3 does */
  CHECK_EQ(next.n, 3);
  CHECK_EQ(next.m[2].id, 3);
  CHECK_EQ(c.refused_id, 2);
  CHECK(strstr(c.refused, "a world of 4 ranks cannot split") != NULL);
  cand[1].nproc = 3; /* 5: nobody fits */
  CHECK_EQ(cddp__members_next(cur, &next, &c), 1);
}

TEST(members_next_a_spare_takes_a_lost_nodes_place_in_one_generation) {
  cddp__members_t *cur = mk("0 1 a\n1 1 b"), next;
  cddp__member_t cand[] = {{.id = 2, .nproc = 1, .host = "c"}};
  cddp__change_t c = {.self = 0, .lost = 0, .why = "x", .min_nodes = 2, .max_nodes = 2, .cand = cand, .ncand = 1};
  c.self = 1;
  CHECK_EQ(cddp__members_next(cur, &next, &c), 0);
  CHECK_EQ(next.n, 2);
  CHECK(!next.stop);
  CHECK_EQ(next.m[0].id, 1); /* ranks shift down past the lost node, the spare comes last */
  CHECK_EQ(next.m[1].id, 2);
  CHECK(!strcmp(c.ann.what, "node a (agent 0, x); spare node c (agent 2) takes its place"));
  CHECK_EQ(c.ann.kind, CDDP__GEN_LOSS);
  /* no spare: below min, the record says stop */
  c.ncand = 0;
  CHECK_EQ(cddp__members_next(cur, &next, &c), 0);
  CHECK(next.stop && c.proposed_stop);
  CHECK(strstr(next.line, "job stopped: 1 of at least 2 nodes left after losing a (agent 0, x)") != NULL);
  /* the lost agent is gone already and nobody waits: nothing to do */
  cddp__members_t *after = mk("1 1 b\n2 1 c");
  c.ncand = 1;
  CHECK_EQ(cddp__members_next(after, &next, &c), 1);
}

TEST(members_next_below_min_waits_then_takes_enough_joiners_in_or_stops) {
  cddp__members_t *cur = mk("0 1 a\n1 1 b\n2 1 c"), next;
  cddp__member_t cand[] = {{.id = 3, .nproc = 1, .host = "d"}, {.id = 4, .nproc = 1, .host = "e"}};
  cddp__change_t c = {.self = 0, .lost = 2, .why = "x", .min_nodes = 3, .max_nodes = 3, .wait_ms = 4000,
                      .cand = cand, .ncand = 0};
  /* below MIN, nobody pending: a wait record of the survivors, not a stop */
  CHECK_EQ(cddp__members_next(cur, &next, &c), 0);
  CHECK(!next.stop && !c.proposed_stop && c.proposed_wait);
  CHECK_EQ(next.n, 2);
  CHECK_EQ(next.wait_ms, 4000);
  CHECK(!strcmp(next.line, "c (agent 2, x)"));
  CHECK_EQ(c.ann.kind, CDDP__GEN_WAIT);
  char buf[512];
  size_t len = cddp__members_format(&next, buf, sizeof buf);
  CHECK(!strcmp(buf, "wait 4000 c (agent 2, x)\n0 1 a\n1 1 b"));
  cddp__members_t *wait = mk(buf); /* round trip */
  CHECK(len > 0 && wait->wait_ms == 4000 && wait->n == 2 && !strcmp(wait->line, "c (agent 2, x)"));
  CHECK_EQ(cddp__members_parse("wait 0 x\n0 1 a", 14, &next), -1);
  CHECK_EQ(cddp__members_parse("wait 5 x", 8, &next), -1);
  /* one pending agent would make 3 of 3: one generation takes it in, the wait ends */
  c.lost = -1, c.why = NULL, c.ncand = 1;
  CHECK_EQ(cddp__members_next(wait, &next, &c), 0);
  CHECK(!next.stop && next.wait_ms == 0 && c.ended_wait && !c.proposed_wait);
  CHECK_EQ(next.n, 3);
  CHECK_EQ(next.m[2].id, 3);
  CHECK(!strcmp(c.ann.what, "node c (agent 2, x); node d (agent 3) joined in time"));
  CHECK_EQ(c.ann.kind, CDDP__GEN_LOSS); /* not a join: the survivors redo the interrupted step */
  /* min 4: one is not enough, it stays pending (no generation) */
  c.min_nodes = 4, c.max_nodes = 4;
  CHECK_EQ(cddp__members_next(wait, &next, &c), 1);
  c.ncand = 2; /* two are */
  CHECK_EQ(cddp__members_next(wait, &next, &c), 0);
  CHECK_EQ(next.n, 4);
  CHECK(c.ended_wait);
  /* the wait is over: the wait record becomes the stop; a record that is no longer waiting: nothing */
  c.min_nodes = 3, c.max_nodes = 3, c.expired = 1;
  CHECK_EQ(cddp__members_next(wait, &next, &c), 0);
  CHECK(next.stop && c.proposed_stop);
  CHECK(!strcmp(next.line, "job stopped: 2 of at least 3 nodes left after losing c (agent 2, x); no node joined within "
                           "4.0 s (--rdzv-timeout)"));
  CHECK_EQ(cddp__members_next(cur, &next, &c), 1);
  /* wait_ms 0: the stop at once, as before */
  c.expired = 0, c.wait_ms = 0, c.lost = 2, c.why = "x", c.ncand = 0;
  CHECK_EQ(cddp__members_next(cur, &next, &c), 0);
  CHECK(next.stop && c.proposed_stop && !c.proposed_wait);
}

/* A rank frozen through a loss reads its old peers' last words when thawed, which can look
 * like a desync: past a non-join generation the failure is the re-forming's, not the job's. */
TEST(world_superseded_by_a_loss_not_by_a_join) {
  cddp_world_t w;
  memset(&w, 0, sizeof w);
  w.env.source = CDDP_ENV_AGENT, w.env.replace_mode = 1, w.world = 3;
  CHECK_OK(cddp_store_mem_create(&w.store));
  CHECK_EQ(cddp_world_superseded(&w), 0);
  int64_t g;
  cddp__job_announce_t a = {.kind = CDDP__GEN_JOIN, .what = "node vm (agent 3)"};
  CHECK_OK(cddp__gen_bump(w.store, &a, &g));
  CHECK_EQ(cddp_world_superseded(&w), 0); /* a join: w->comm keeps working */
  a = cddp__job_announce_replace(1, 42);
  CHECK_OK(cddp__gen_bump(w.store, &a, &g));
  CHECK_EQ(cddp_world_superseded(&w), 1);
  w.env.gen = 2; /* re-formed into the latest */
  CHECK_EQ(cddp_world_superseded(&w), 0);
  w.env.replace_mode = 0; /* no in-place recovery: nothing to re-form into */
  w.env.gen = 0;
  CHECK_EQ(cddp_world_superseded(&w), 0);
  cddp_store_close(w.store);
}

/* The store's new host writes the latest generation back into its fresh store: the next change
 * makes the one after it, over the restored members. */
TEST(gen_restore_puts_a_generation_back_in_a_fresh_store) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  cddp__members_t m, got;
  CHECK_EQ(cddp__members_parse("0 1 a\n1 1 b\n2 1 c", 17, &m), 0);
  cddp__job_announce_t a = cddp__job_announce_moved(1), got_a;
  CHECK_OK(cddp__gen_restore(s, 4, &a, &m));
  int64_t g = -1;
  CHECK_OK(cddp__gen_latest(s, &g));
  CHECK_EQ(g, 4);
  CHECK_OK(cddp__members_read(s, 4, &got));
  CHECK(got.n == 3 && got.m[2].id == 2);
  CHECK(cddp__gen_what(s, 4, &got_a) && got_a.kind == CDDP__GEN_MOVED && !strcmp(got_a.what, "store moved to agent 1"));
  CHECK_OK(cddp__gen_restore(s, 4, &a, &m)); /* twice: the counter stays */
  CHECK_OK(cddp__gen_latest(s, &g));
  CHECK_EQ(g, 4);
  a = cddp__job_announce_replace(0, 9);
  CHECK_OK(cddp__gen_bump(s, &a, &g));
  CHECK_EQ(g, 5);
  cddp_store_close(s);
}

/* test_jobkeys.c - the job protocol's keys and values: every key's text (the wire format other
 * cddp versions and docs/elastic.md rely on), each value's round trip and its malformed forms,
 * and the generation state machine driven directly on the in-memory store. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cddp/ddp.h"
#include "world/world_internal.h"
#include "job/elastic.h"
#include "job/jobkeys.h"
#include "test.h"

#define KEYIS(kind, a, b, text) CHECK(!strcmp(cddp__job_key(CDDP__JK_##kind, a, b).s, text))

TEST(jobkeys_spell_every_key_of_the_table) {
  KEYIS(RDZV_SETTINGS, 0, 0, "rdzv/settings");
  KEYIS(RDZV_MISMATCH, 0, 0, "rdzv/mismatch");
  KEYIS(RDZV_JOINED, 3, 0, "rdzv/3/joined");
  KEYIS(RDZV_NODE, 3, 7, "rdzv/3/node/7");
  KEYIS(RDZV_CLOSED, 3, 0, "rdzv/3/closed");
  KEYIS(RDZV_MEMBERS, 3, 0, "rdzv/3/members");
  KEYIS(RDZV_EVENT, 12, 0, "rdzv/12/event");
  KEYIS(RDZV_FAILURE, 3, 1, "rdzv/3/failure/1");
  KEYIS(RDZV_NDONE, 3, 0, "rdzv/3/ndone");
  KEYIS(RDZV_NEXIT, 3, 0, "rdzv/3/nexit");
  KEYIS(RDZV_ALLEXIT, 3, 0, "rdzv/3/allexit");
  KEYIS(RDZV_DONE, 3, 9, "rdzv/3/done/9");
  KEYIS(GEN, 0, 0, "elastic/gen");
  KEYIS(GEN_ANNOUNCE, 5, 0, "elastic/gen/5");
  KEYIS(GEN_CLAIM, 5, 0, "elastic/claim/5");
  KEYIS(GEN_MEMBERS, 5, 0, "elastic/members/5");
  KEYIS(GEN_COMM, 5, 0, "elastic/g5/");
  KEYIS(RESTARTS, 0, 0, "elastic/restarts");
  KEYIS(AGENTS, 0, 0, "elastic/agents");
  KEYIS(HEARTBEAT, 2, 0, "elastic/hb/2");
  KEYIS(DEAD, 2, 0, "elastic/dead/2");
  KEYIS(LEFT, 2, 0, "elastic/left/2");
  KEYIS(PENDING, 2, 0, "elastic/pending/2");
  KEYIS(SPARE, 2, 0, "elastic/spare/2");
  KEYIS(WORLDS, 0, 0, "elastic/worlds");
  KEYIS(STOP, 0, 0, "elastic/stop");
  KEYIS(COMPLETE, 0, 0, "elastic/complete");
  KEYIS(STORE_VOTE, 2, 5, "elastic/vote/2/5");
  KEYIS(WORLD_DONE, 4, 3, "world/g4/done/3");
  KEYIS(STATUS_SLOTS, 0, 0, "status/slots");
  KEYIS(STATUS_NODE, 2, 0, "status/node/2");
  KEYIS(STATUS_EVENTS, 0, 0, "status/events");
  KEYIS(STATUS_EVENT, 17, 0, "status/event/17");
  KEYIS(STATUS_ONCE, 9, 0, "status/once/9");
  KEYIS(RDZV_WATCH, 0, 0, "rdzv-watch/latest");
  CHECK(!strcmp(cddp__job_key_in("job7", CDDP__JK_DEAD, 2).s, "job7/elastic/dead/2"));
  CHECK(!strcmp(cddp__job_key(CDDP__JK_GEN_ANNOUNCE, INT64_MAX, 0).s, "elastic/gen/9223372036854775807"));
  CHECK_EQ(cddp__job_key(CDDP__JK_COUNT, 1, 2).s[0], '\0'); /* not a kind: no key */
  for (int k = 0; k < CDDP__JK_COUNT; k++) /* every kind has a shape */
    CHECK(cddp__job_key3((cddp__jobkey_kind_t)k, 1, 2, 3).s[0] != '\0');
}

TEST(jobkeys_events_round_trip_and_reject_other_text) {
  char buf[700];
  cddp__job_event_t e = {.kind = CDDP__EV_FAIL, .code = 137, .line = "cddp run: rank 1 (host a, pid 9) killed"}, d;
  size_t n = cddp__job_event_format(&e, buf, sizeof buf);
  CHECK(!strcmp(buf, "fail 137 cddp run: rank 1 (host a, pid 9) killed") && n == strlen(buf));
  CHECK_EQ(cddp__job_event_parse(buf, n, &d), 0);
  CHECK(d.kind == CDDP__EV_FAIL && d.code == 137 && !strcmp(d.line, e.line));
  CHECK_EQ(cddp__job_event_parse("done", 4, &d), 0);
  CHECK(d.kind == CDDP__EV_DONE);
  CHECK_EQ(cddp__job_event_parse("restart", 7, &d), 0);
  CHECK(d.kind == CDDP__EV_RESTART && !d.line[0]);
  /* a lost node's will: a restart with the line that names it */
  cddp__job_event_t r = {.kind = CDDP__EV_RESTART, .line = "cddp run: node 2 (host c, agent 3) was lost"};
  n = cddp__job_event_format(&r, buf, sizeof buf);
  CHECK(!strcmp(buf, "restart cddp run: node 2 (host c, agent 3) was lost") && n == strlen(buf));
  CHECK(!cddp__job_event_parse(buf, n, &d) && d.kind == CDDP__EV_RESTART && !strcmp(d.line, r.line));
  CHECK_EQ(cddp__job_event_parse("restarted", 9, &d), 0); /* as before: any "restart..." restarts */
  CHECK(d.kind == CDDP__EV_RESTART && !d.line[0]);
  CHECK_EQ(cddp__job_event_parse("doneX", 4, &d), 0); /* the store's length counts, not a NUL */
  CHECK_EQ(cddp__job_event_parse("lost the watcher", 16, &d), -1);
  CHECK(d.kind == CDDP__EV_NONE);
  CHECK_EQ(cddp__job_event_parse("fail 3", 6, &d), 0); /* no line: the whole value is printed */
  CHECK(d.code == 3 && !strcmp(d.line, "fail 3"));
}

TEST(jobkeys_rendezvous_values_round_trip) {
  char buf[300];
  cddp__job_node_rec_t r = {.node = {.host = "h1", .addr = "10.0.0.1", .nproc = 4, .master_port = 2900, .id = 3},
                            .min_nodes = 1, .max_nodes = 3}, d = {.min_nodes = 9, .max_nodes = 9};
  size_t n = cddp__job_node_format(&r, buf, sizeof buf);
  CHECK(!strcmp(buf, "h1 10.0.0.1 4 2900 3 1 3"));
  CHECK_EQ(cddp__job_node_parse(buf, n, &d), 0);
  CHECK(!d.mismatch && d.node.nproc == 4 && d.node.id == 3 && d.min_nodes == 1 && d.max_nodes == 3);
  d.min_nodes = 2, d.max_nodes = 5; /* an old record without --nnodes keeps the reader's own */
  CHECK_EQ(cddp__job_node_parse("h2 a 2 99", 9, &d), 0);
  CHECK(d.node.id == -1 && d.min_nodes == 2 && d.max_nodes == 5);
  CHECK_EQ(cddp__job_node_parse("h2 a 0 99", 9, &d), -1); /* no workers */
  CHECK_EQ(cddp__job_node_parse("mismatch", 8, &d), 0);
  CHECK(d.mismatch);
  cddp__job_closed_t c;
  CHECK_EQ(cddp__job_closed_parse("3", 1, &c), 0);
  CHECK(c.nnodes == 3 && !c.mismatch);
  CHECK_EQ(cddp__job_closed_parse("mismatch", 8, &c), 0);
  CHECK(c.mismatch);
  CHECK_EQ(cddp__job_closed_parse("x", 1, &c), -1);
  cddp__job_settings_t s = {.min_nodes = 2, .max_nodes = 4, .host = "n0"}, t;
  n = cddp__job_settings_format(&s, buf, sizeof buf);
  CHECK(!strcmp(buf, "2 4 n0"));
  CHECK(!cddp__job_settings_parse(buf, n, &t) && t.min_nodes == 2 && t.max_nodes == 4 && !strcmp(t.host, "n0"));
  cddp__job_failure_t f = {.wall_ns = 1700000000123456789ull, .code = 1, .line = "rank 0 failed"}, g;
  n = cddp__job_failure_format(&f, buf, sizeof buf);
  CHECK(!cddp__job_failure_parse(buf, n, &g) && g.wall_ns == f.wall_ns && g.code == 1 && !strcmp(g.line, f.line));
  CHECK_EQ(cddp__job_failure_parse("none", 4, &g), -1);
  int64_t v;
  CHECK(!cddp__job_int_parse("42", 2, &v) && v == 42);
  CHECK_EQ(cddp__job_int_parse("", 0, &v), -1);
}

TEST(jobkeys_membership_values_round_trip) {
  char buf[256];
  cddp__member_t p = {.nproc = 2, .host = "spare1"}, q = {.id = 7};
  size_t n = cddp__job_pending_format(&p, buf, sizeof buf);
  CHECK(!strcmp(buf, "2 spare1"));
  CHECK(!cddp__job_pending_parse(buf, n, &q) && q.nproc == 2 && q.id == 7 && !strcmp(q.host, "spare1"));
  CHECK_EQ(cddp__job_pending_parse("0 h", 3, &q), -1);
  int sizes[] = {1, 2, 3, 6};
  n = cddp__job_worlds_format(sizes, 4, buf, sizeof buf);
  CHECK(!strcmp(buf, "1 2 3 6") && n == 7);
  CHECK(cddp__job_worlds_allow(buf, 3) && !cddp__job_worlds_allow(buf, 4) && cddp__job_worlds_allow(NULL, 4));
  CHECK(cddp__job_worlds_allow("", 5));
  /* a generation's announcement: its kind, then its words; every kind both ways */
  cddp__job_announce_t an = cddp__job_announce_replace(1, 3), back;
  n = cddp__job_announce_format(&an, buf, sizeof buf);
  CHECK(!strcmp(buf, "replace rank 1 pid 3") && n == 20);
  CHECK(!cddp__job_announce_parse(buf, n, &back) && back.kind == CDDP__GEN_REPLACE && !strcmp(back.what, "rank 1 pid 3"));
  for (int k = CDDP__GEN_NONE + 1; k < CDDP__GEN_KINDS; k++) {
    an = (cddp__job_announce_t){.kind = (cddp__gen_kind_t)k, .what = "node b (agent 4)"};
    n = cddp__job_announce_format(&an, buf, sizeof buf);
    CHECK(!cddp__job_announce_parse(buf, n, &back) && back.kind == an.kind && !strcmp(back.what, an.what));
  }
  CHECK(!cddp__job_announce_parse("join", 4, &back) && back.kind == CDDP__GEN_JOIN && !back.what[0]);
  CHECK_EQ(cddp__job_announce_parse("rank 1 pid 3", 12, &back), -1); /* the old words alone: no kind */
  CHECK_EQ(back.kind, CDDP__GEN_NONE);
  CHECK_EQ(cddp__job_announce_parse("", 0, &back), -1);
  CHECK_EQ(cddp__job_announce_parse("joined x", 8, &back), -1);
  an = cddp__job_announce_replace(1, 3);
  n = cddp__job_claim_format(4, &an, buf, sizeof buf);
  CHECK(!strcmp(buf, "4 replace rank 1 pid 3"));
  /* a vote for the store's next host: the generation, the restarts counted, the members */
  cddp__job_vote_t v = {.gen = 3, .restarts = 2}, w;
  CHECK_EQ(cddp__members_parse("0 2 a\n4 1 b", 11, &v.members), 0);
  n = cddp__job_vote_format(&v, buf, sizeof buf);
  CHECK(!strcmp(buf, "gen 3 restarts 2\n0 2 a\n4 1 b"));
  CHECK(!cddp__job_vote_parse(buf, n, &w) && w.gen == 3 && w.restarts == 2 && w.members.n == 2 &&
        w.members.m[1].id == 4);
  CHECK_EQ(cddp__job_vote_parse("gen x\n0 2 a", 11, &w), -1);
  CHECK_EQ(cddp__job_vote_parse("gen 3\n0 2 a", 11, &w), -1); /* no restarts counted */
  CHECK_EQ(cddp__job_vote_parse("gen 3 restarts -1\n0 2 a", 23, &w), -1);
  CHECK_EQ(cddp__job_vote_parse("gen 3", 5, &w), -1);
  CHECK_EQ(cddp__job_vote_format(&v, buf, 8), 0);
  an = cddp__job_announce_moved(2);
  CHECK(an.kind == CDDP__GEN_MOVED && !strcmp(an.what, "store moved to agent 2"));
}

/* The state machine of generations, on the in-memory store, with no threads: a replacement, a
 * loss with a spare taking its place, a join, a wait below MIN that expires into a stop. */
static int64_t change(cddp_store_t *s, cddp__change_t *c) {
  int64_t g = -1;
  c->ann.kind = CDDP__GEN_LOSS;
  snprintf(c->ann.what, sizeof c->ann.what, "node ? (agent %d, %s)", c->lost, c->why ? c->why : "");
  return cddp__gen_change(s, &c->ann, c->self, cddp__members_next, c, &g) == CDDP_OK ? g : -1;
}

TEST(jobkeys_generation_state_machine_on_the_in_memory_store) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  cddp__members_t *m = calloc(1, sizeof *m);
  CHECK(m != NULL);
  m->n = 2, m->m[0] = (cddp__member_t){0, 1, "a"}, m->m[1] = (cddp__member_t){1, 1, "b"};
  CHECK_OK(cddp__members_write(s, 0, m));
  /* a worker replaced in place: the same members, announced in words */
  int64_t g = -1;
  cddp__job_announce_t what = cddp__job_announce_replace(1, 77), got;
  CHECK_OK(cddp__gen_change(s, &what, 0, NULL, NULL, &g));
  CHECK_EQ(g, 1);
  CHECK_EQ(cddp__gen_what(s, 1, &got), 1);
  CHECK(!strcmp(got.what, "rank 1 pid 77") && got.kind == CDDP__GEN_REPLACE);
  CHECK_EQ(cddp__gen_what(s, 2, &got), 0); /* not announced yet */
  CHECK_OK(cddp__members_read(s, 1, m));
  CHECK(m->n == 2 && m->m[1].id == 1);
  /* agent 1 is lost; pending agent 2 takes its place in one generation */
  cddp__member_t cand[2] = {{2, 1, "c"}, {3, 2, "d"}};
  cddp__change_t c = {.self = 0, .lost = 1, .why = "its connection closed", .min_nodes = 2, .max_nodes = 3,
                      .cand = cand, .ncand = 1, .refused_id = -1};
  CHECK_EQ(change(s, &c), 2);
  CHECK_OK(cddp__members_read(s, 2, m));
  CHECK(m->n == 2 && m->m[0].id == 0 && m->m[1].id == 2);
  CHECK(cddp__gen_what(s, 2, &got) && got.kind == CDDP__GEN_LOSS && strstr(got.what, "spare node c (agent 2)"));
  CHECK(c.spare_at > 0 && !strcmp(c.ann.what + c.spare_at, "; spare node c (agent 2) takes its place"));
  /* agent 3 joins: appended, nobody's rank moves; the announcement is a join */
  c = (cddp__change_t){.self = 0, .lost = -1, .min_nodes = 2, .max_nodes = 3, .cand = cand, .ncand = 2,
                       .refused_id = -1};
  CHECK_EQ(change(s, &c), 3);
  CHECK_EQ(c.spare_at, -1);
  CHECK_OK(cddp__members_read(s, 3, m));
  CHECK(m->n == 3 && m->m[2].id == 3 && cddp__members_world(m) == 4);
  CHECK(cddp__gen_what(s, 3, &got) && got.kind == CDDP__GEN_JOIN && !strcmp(got.what, "node d (agent 3)"));
  /* a proposer that is not a member changes nothing */
  c = (cddp__change_t){.self = 9, .lost = 0, .why = "x", .min_nodes = 1, .max_nodes = 3, .refused_id = -1};
  CHECK_EQ(change(s, &c), 0);
  /* below MIN: a wait record first, then, expired, the stop; after it nothing changes */
  c = (cddp__change_t){.self = 0, .lost = 3, .why = "no heartbeat", .min_nodes = 3, .max_nodes = 3,
                       .wait_ms = 1000, .refused_id = -1};
  CHECK_EQ(change(s, &c), 4);
  CHECK_OK(cddp__members_read(s, 4, m));
  CHECK(m->wait_ms == 1000 && m->n == 2 && !m->stop && c.proposed_wait);
  CHECK(cddp__gen_what(s, 4, &got) && got.kind == CDDP__GEN_WAIT);
  c = (cddp__change_t){.self = 0, .lost = -1, .min_nodes = 3, .max_nodes = 3, .expired = 1, .refused_id = -1};
  CHECK_EQ(change(s, &c), 5);
  CHECK_OK(cddp__members_read(s, 5, m));
  CHECK(m->stop && strstr(m->line, "job stopped"));
  CHECK(cddp__gen_what(s, 5, &got) && got.kind == CDDP__GEN_STOP);
  CHECK_EQ(change(s, &c), -1); /* ABORTED: the job is stopping */
  CHECK_OK(cddp__gen_latest(s, &g));
  CHECK_EQ(g, 5);
  /* replace mode gathered generation 0 only: a later node starts at round 0 (and is pending) */
  CHECK_OK(cddp__gen_gathering(s, &g));
  CHECK_EQ(g, 0);
  cddp_store_close(s);
  free(m);
}

/* restart-all: each restart is a generation in which every member is new, gathered by the
 * round of its number; every agent opens it, exactly one generation comes of it. */
TEST(jobkeys_restart_all_generations_on_the_in_memory_store) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  int64_t g = -1;
  CHECK_OK(cddp__gen_gathering(s, &g));
  CHECK_EQ(g, 0); /* generation 0, open from the start */
  for (int node = 0; node < 3; node++) CHECK_OK(cddp__gen_open_restart(s, 0, node));
  CHECK_OK(cddp__gen_latest(s, &g));
  CHECK_EQ(g, 1);
  cddp__job_announce_t a;
  CHECK(cddp__gen_what(s, 1, &a) && a.kind == CDDP__GEN_RESTART && !strcmp(a.what, "restart 1"));
  CHECK_OK(cddp__gen_gathering(s, &g));
  CHECK_EQ(g, 1);
  CHECK_OK(cddp__gen_open_restart(s, 1, 2));
  CHECK_OK(cddp__gen_open_restart(s, 1, 0)); /* late: generation 2 is there, nothing more */
  CHECK_OK(cddp__gen_latest(s, &g));
  CHECK_EQ(g, 2);
  CHECK_OK(cddp__gen_gathering(s, &g));
  CHECK_EQ(g, 2);
  /* a generation of another kind after it (replace mode never restarts; a test may): the
   * latest restart is still the one gathered */
  cddp__job_announce_t rep = cddp__job_announce_replace(0, 9);
  CHECK_OK(cddp__gen_bump(s, &rep, &g));
  CHECK_EQ(g, 3);
  CHECK_OK(cddp__gen_gathering(s, &g));
  CHECK_EQ(g, 2);
  cddp_store_close(s);
  /* the gathered members: the round's nodes, in node-rank order */
  cddp__job_node_t nodes[2] = {{.host = "a", .nproc = 2, .id = 5}, {.host = "b", .nproc = 1, .id = 3}};
  cddp__members_t *m = malloc(sizeof *m);
  CHECK(m != NULL);
  CHECK_EQ(cddp__members_of_nodes(nodes, 2, m), 0);
  CHECK(m->n == 2 && m->m[0].id == 5 && m->m[1].id == 3 && !strcmp(m->m[1].host, "b") && cddp__members_world(m) == 3);
  cddp__job_node_t *many = calloc(CDDP__MAX_MEMBERS + 1, sizeof *many);
  CHECK(many != NULL);
  CHECK_EQ(cddp__members_of_nodes(many, CDDP__MAX_MEMBERS + 1, m), -1);
  CHECK_EQ(m->n, CDDP__MAX_MEMBERS);
  free(many), free(m);
}

/* What a trainer says to the agents through its world: the sizes it splits over, a stop. */
TEST(jobkeys_world_says_sizes_and_stop_in_the_jobs_keys) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  cddp_world_t w = {.store = s}, none = {0};
  int sizes[] = {1, 2, 3, 6};
  CHECK_OK(cddp_world_allow_sizes(&w, sizes, 4));
  CHECK_RESULT(cddp_world_allow_sizes(&none, sizes, 4), CDDP_INVALID_USAGE);
  void *v = NULL;
  size_t len = 0;
  CHECK_OK(cddp_store_get(s, "elastic/worlds", &v, &len, 0));
  CHECK(len == 7 && !memcmp(v, "1 2 3 6", 7));
  free(v);
  cddp_world_stop(&w, "job stopped: the batch does not split");
  CHECK_OK(cddp_store_get(s, "elastic/stop", &v, &len, 0));
  CHECK(len == 37 && !memcmp(v, "job stopped: the batch does not split", 37));
  free(v);
  CHECK_EQ(cddp_world_gone(&none), 0);
  /* no world at all (a join out of memory): every reader answers, nothing crashes */
  CHECK_EQ(cddp_world_gone(NULL), 0);
  CHECK(cddp_world_comm(NULL) == NULL && cddp_world_store(NULL) == NULL);
  CHECK_EQ(cddp_world_rank(NULL), 0);
  CHECK_EQ(cddp_world_env(NULL)->world_size, 0);
  CHECK_RESULT(cddp_world_recover(NULL), CDDP_INVALID_USAGE);
  cddp_world_leave(NULL, 1);
  cddp_store_close(s);
}

TEST(jobkeys_member_list_packed_when_long_and_hostile_forms_refused) {
  size_t len = 0, cap = 10000 * 64;
  char *text = malloc(cap);
  CHECK(text != NULL);
  for (int i = 0; i < 10000; i++)
    len += (size_t)snprintf(text + len, cap - len, "node%04d.c1.example.org 10.1.%d.%d 8 29500 %d 10000 10000\n", i,
                            i / 250, i % 250, i);
  char *orig = malloc(len);
  memcpy(orig, text, len);
  size_t raw = len;
  CHECK_EQ(cddp__job_list_pack(&text, &len), 0);
  CHECK(len * 4 < raw); /* 10,000 records: over 4x smaller */
  CHECK(!memcmp(text, "#z ", 3));
  char *back = NULL;
  size_t bl = 0;
  CHECK_EQ(cddp__job_list_unpack(text, len, raw, &back, &bl), 0);
  CHECK(back != NULL && bl == raw && !memcmp(back, orig, raw) && back[bl] == '\0');
  free(back);
  /* a list longer than the reader's bound (n records of at most 256 bytes): refused, never allocated */
  CHECK_EQ(cddp__job_list_unpack(text, len, raw - 1, &back, &bl), -1);
  /* cut short, a byte flipped, a length that lies, no length, garbage after the tag: refused */
  CHECK_EQ(cddp__job_list_unpack(text, len / 2, raw, &back, &bl), -1);
  text[len / 2] ^= 0x5a;
  CHECK_EQ(cddp__job_list_unpack(text, len, raw, &back, &bl), -1);
  const char *bad[] = {"#z 12\nxyz", "#z \n", "#z x\nabc", "#z 0\n", "#z 5", "#z 99999999999999999999\nx"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK_EQ(cddp__job_list_unpack(bad[i], strlen(bad[i]), raw, &back, &bl), -1);
  /* a short list stays text, and text is not taken for a packed list */
  char *small = strdup("vm 127.0.0.1 1 29500 0 2 2\nvm 127.0.0.1 1 29501 1 2 2\n");
  size_t sl = strlen(small);
  CHECK_EQ(cddp__job_list_pack(&small, &sl), 0);
  CHECK(!strncmp(small, "vm ", 3) && sl == strlen(small));
  CHECK_EQ(cddp__job_list_unpack(small, sl, 1000, &back, &bl), 0);
  CHECK(back == NULL);
  free(small), free(text), free(orig);
}

TEST(jobkeys_long_member_record_travels_deflated) {
  /* elastic/members/<G>: every agent reads each generation's record, N copies of N lines */
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  cddp__members_t *m = calloc(1, sizeof *m), *back = calloc(1, sizeof *back);
  CHECK(m && back);
  m->n = 1000;
  for (int i = 0; i < m->n; i++) {
    m->m[i].id = i, m->m[i].nproc = 8;
    snprintf(m->m[i].host, sizeof m->m[i].host, "node%04d.c1.example.org", i);
  }
  CHECK_OK(cddp__members_write(s, 3, m));
  void *v = NULL;
  size_t len = 0;
  CHECK_OK(cddp_store_get(s, "elastic/members/3", &v, &len, 0));
  CHECK(len > 3 && !memcmp(v, "#z ", 3) && len * 4 < 1000 * 30);
  free(v);
  CHECK_OK(cddp__members_read(s, 3, back));
  CHECK_EQ(back->n, 1000);
  CHECK(back->m[999].id == 999 && back->m[999].nproc == 8 && !strcmp(back->m[999].host, "node0999.c1.example.org"));
  /* a packed record that lies is malformed: REMOTE, one line */
  const char *lie = "#z 40\nnot a zlib stream";
  CHECK_OK(cddp_store_set(s, "elastic/members/4", lie, strlen(lie)));
  CHECK_RESULT(cddp__members_read(s, 4, back), CDDP_REMOTE);
  free(m), free(back);
  cddp_store_close(s);
}

/* test_run_status.c - the records of `cddp status` (job/status.c): a node record's text
 * round trip and its malformed forms, events and node records through a store, the endpoint file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "job/status.h"
#include "launcher/status_pub.h"
#include "test.h"

static cddp__status_node_t sample(void) {
  cddp__status_node_t n = {.slot = 1, .node_rank = 0, .agent_id = 3, .pid = 42, .round = 2, .restarts = 1, .gen = 5,
                           .nproc = 2, .rank_base = 0, .world = 4, .wall_ms = 1234567890123ull, .nranks = 2};
  snprintf(n.state, sizeof n.state, "running");
  snprintf(n.host, sizeof n.host, "node-a");
  n.ranks[0] = (cddp__status_rank_t){.rank = 0, .pid = 100, .step = 77, .rate = 9.5, .coll = 300, .in_coll = 1};
  snprintf(n.ranks[0].state, sizeof n.ranks[0].state, "alive");
  snprintf(n.ranks[0].last, sizeof n.ranks[0].last, "allreduce #300 (4096 f32, sum)");
  n.ranks[1] = (cddp__status_rank_t){.rank = 1, .pid = 0, .replaced = 1};
  snprintf(n.ranks[1].state, sizeof n.ranks[1].state, "hung");
  snprintf(n.ranks[1].last, sizeof n.ranks[1].last, "-");
  return n;
}

TEST(status_record_round_trip) {
  cddp__status_node_t n = sample(), back;
  char buf[4096];
  size_t len = cddp__status_format(&n, buf, sizeof buf);
  CHECK(len > 0 && len == strlen(buf));
  CHECK_EQ(cddp__status_parse(buf, len, &back), 0);
  CHECK_EQ(back.slot, 1);
  CHECK_EQ(back.agent_id, 3);
  CHECK_EQ(back.gen, 5);
  CHECK_EQ(back.world, 4);
  CHECK_EQ(back.wall_ms, 1234567890123ull);
  CHECK(!strcmp(back.host, "node-a") && !strcmp(back.state, "running"));
  CHECK_EQ(back.nranks, 2);
  CHECK_EQ(back.ranks[0].step, 77);
  CHECK_NEAR(back.ranks[0].rate, 9.5, 1e-9);
  CHECK_EQ(back.ranks[0].in_coll, 1);
  CHECK(!strcmp(back.ranks[0].last, "allreduce #300 (4096 f32, sum)"));
  CHECK(!strcmp(back.ranks[1].state, "hung") && back.ranks[1].replaced == 1);
  CHECK_EQ(cddp__status_format(&n, buf, 40), 0); /* does not fit: 0, never a cut record */
}

/* steps/s over the last 10 s of changes: steps alternating 1 s and 2 s read about 0.67, not 1.0 and
 * 0.5 by turns; a new process starts afresh; a stall falls as 1 / the time since the last step */
TEST(status_rate_averaged_over_a_window) {
  static cddp__status_pub_t p;
  cddp__status_rank_t r = {.pid = 100};
  uint64_t t = 1000000000000ull, s = 1000000000ull;
  double lo = 9, hi = 0;
  for (int k = 0; k < 12; k++) {
    r.step = (uint64_t)k, r.rate = 0;
    cddp__status_pub_rate(&p, 0, &r, t);
    if (k == 0) CHECK(r.rate == 0); /* one change: no rate yet */
    if (k >= 6) lo = r.rate < lo ? r.rate : lo, hi = r.rate > hi ? r.rate : hi;
    t += (k % 2 ? 2 : 1) * s;
  }
  fprintf(stderr, "# rate %.3f..%.3f\n", lo, hi);
  CHECK(lo > 0.6 && hi < 0.75);
  r.rate = 0; /* no step for 10 s: at most 1 / 10 */
  cddp__status_pub_rate(&p, 0, &r, t + 8 * s);
  CHECK(r.rate > 0.09 && r.rate <= 0.1 + 1e-9);
  r.pid = 101, r.step = 3, r.rate = 0; /* a replacement: counts afresh */
  cddp__status_pub_rate(&p, 0, &r, t + 9 * s);
  CHECK(r.rate == 0);
  r.step = 4;
  cddp__status_pub_rate(&p, 0, &r, t + 12 * s);
  CHECK(r.rate > 0.33 && r.rate < 0.34);
}

TEST(status_record_malformed) {
  cddp__status_node_t back;
  const char *bad[] = {"", "node 1 2 3\n", "nod 1 0 3 42 2 1 5 2 0 4 1 running a\n",
                       "node 1 0 3 42 2 1 5 2 0 4 1 running a\nrank x\n",
                       "node 1 0 3 42 2 1 5 2 0 4 1 running a\nrank 0 1 alive 0 5 1.0 3 0\n",
                       "node 1 0 3 42 2 1 5 2 0 4 1 running a\nrank 0 1 alive 0 5\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK_EQ(cddp__status_parse(bad[i], strlen(bad[i]), &back), -1);
}

TEST(status_through_a_store) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  cddp__status_node_t n = sample(), *got = NULL;
  int slot, count;
  CHECK_OK(cddp__status_slot(s, &slot));
  CHECK_OK(cddp__status_slot(s, &n.slot)); /* slot 0 taken, never posted: skipped */
  CHECK_EQ(slot, 0);
  CHECK_OK(cddp__status_post(s, &n));
  CHECK_OK(cddp__status_read(s, &got, &count));
  CHECK_EQ(count, 1);
  CHECK_EQ(got[0].slot, 1);
  CHECK(got[0].wall_ms != n.wall_ms); /* stamped when posted */
  free(got);
  cddp__status_event_t ev[3];
  for (int i = 0; i < 5; i++) CHECK_OK(cddp__status_event(s, "event %d", i));
  CHECK_OK(cddp__status_events(s, ev, 3, &count));
  CHECK_EQ(count, 3);
  CHECK(!strcmp(ev[0].text, "event 2") && !strcmp(ev[2].text, "event 4") && ev[2].wall_ms > 0);
  cddp_store_close(s);
}

/* A job's events kept in its folder: saved from the store, read back newest-last; the file is
 * anyone's bytes (no number, no text, an escape, no end of line, longer than a text) */
TEST(events_kept_in_the_folder) {
  char dir[] = "/tmp/cddp-events-XXXXXX", path[64];
  CHECK(mkdtemp(dir) != NULL);
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  cddp__status_event_t ev[4];
  int n = -1;
  CHECK(cddp__events_load(dir, ev, 4, &n) == CDDP_NOT_FOUND && n == 0);
  CHECK_OK(cddp__events_save(dir, s)); /* none: no file */
  CHECK(cddp__events_load(dir, ev, 4, &n) == CDDP_NOT_FOUND);
  for (int i = 0; i < 6; i++) CHECK_OK(cddp__status_event(s, "rank %d was lost", i));
  CHECK_OK(cddp__events_save(dir, s));
  snprintf(path, sizeof path, "%s/events", dir);
  struct stat st;
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
  CHECK_OK(cddp__events_load(dir, ev, 4, &n));
  CHECK_EQ(n, 4);
  CHECK(!strcmp(ev[0].text, "rank 2 was lost") && !strcmp(ev[3].text, "rank 5 was lost") && ev[3].wall_ms > 0);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  fprintf(f, "garbage\n12 \n\n34 \x1b[2Jcleared\n56 ");
  for (int i = 0; i < 1000; i++) fputc('x', f);
  fclose(f);
  CHECK_OK(cddp__events_load(dir, ev, 4, &n));
  CHECK_EQ(n, 2);
  CHECK(ev[0].wall_ms == 34 && !strcmp(ev[0].text, "?[2Jcleared"));
  CHECK(ev[1].wall_ms == 56 && strlen(ev[1].text) == sizeof ev[1].text - 1);
  unlink(path);
  rmdir(dir);
  cddp_store_close(s);
}

/* The event counter is anyone's value: INT64_MAX once wrapped the loop's index (a signed
 * overflow, then writes past the caller's array); with only the counter set it never ended. */
TEST(status_events_hostile_counter) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  int64_t v;
  CHECK_OK(cddp_store_add(s, "status/events", INT64_MAX, &v));
  cddp__status_event_t ev[3];
  int count = -1;
  CHECK_OK(cddp__status_events(s, ev, 3, &count)); /* only the counter: returns, nothing read */
  CHECK_EQ(count, 0);
  CHECK_OK(cddp_store_set(s, "status/event/9223372036854775807", "1 last", 6));
  CHECK_OK(cddp_store_set(s, "status/event/-9223372036854775808", "2 wrapped", 9));
  CHECK_OK(cddp_store_set(s, "status/event/0", "3 zero", 6));
  CHECK_OK(cddp__status_events(s, ev, 3, &count));
  CHECK_EQ(count, 1);
  CHECK(!strcmp(ev[0].text, "last"));
  CHECK_OK(cddp_store_add(s, "status/events", INT64_MIN, &v)); /* now -1: negative */
  CHECK_OK(cddp__status_events(s, ev, 3, &count));
  CHECK_EQ(count, 0);
  cddp_store_close(s);
}

/* Records and events are anyone's bytes and reach a terminal: escape sequences print as '?'. */
TEST(status_text_from_the_store_is_printable) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  int64_t v;
  CHECK_OK(cddp_store_add(s, "status/events", 1, &v));
  const char *hostile = "1 a\033]0;pwned\007b\nc";
  CHECK_OK(cddp_store_set(s, "status/event/1", hostile, strlen(hostile)));
  cddp__status_event_t ev[2];
  int count = 0;
  CHECK_OK(cddp__status_events(s, ev, 2, &count));
  CHECK_EQ(count, 1);
  CHECK(!strcmp(ev[0].text, "a?]0;pwned?b?c"));
  const char *node = "node 1 0 3 42 2 1 5 2 0 4 1234 running h\033[2J\nrank 0 100 alive 0 7 1.0 3 0 x\033[2Jy\n";
  cddp__status_node_t n;
  CHECK_EQ(cddp__status_parse(node, strlen(node), &n), 0);
  CHECK(!strcmp(n.host, "h?[2J") && !strcmp(n.ranks[0].last, "x?[2Jy"));
  cddp_store_close(s);
}

TEST(endpoint_file) {
  char dir[] = "/tmp/cddp-endpoint-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  cddp__endpoint_t e = {.port = 29400}, back;
  snprintf(e.host, sizeof e.host, "head-1");
  snprintf(e.run_id, sizeof e.run_id, "J7");
  CHECK_RESULT(cddp__endpoint_read(dir, &back), CDDP_NOT_FOUND);
  CHECK(strstr(cddp_last_error(), "has no job record") != NULL);
  CHECK_OK(cddp__endpoint_write(dir, &e));
  CHECK_OK(cddp__endpoint_read(dir, &back));
  CHECK(!strcmp(back.host, "head-1") && back.port == 29400 && !strcmp(back.run_id, "J7") && !back.token[0]);
  snprintf(e.token, sizeof e.token, "s3cret");
  CHECK_OK(cddp__endpoint_write(dir, &e));
  CHECK_OK(cddp__endpoint_read(dir, &back));
  CHECK(!strcmp(back.token, "s3cret"));
  char path[128];
  struct stat st;
  snprintf(path, sizeof path, "%s/endpoint", dir);
  CHECK(stat(path, &st) == 0 && (st.st_mode & 077) == 0);
  FILE *f = fopen(path, "w");
  fputs("store nohostport\nrun_id x\ntoken -\n", f);
  fclose(f);
  CHECK_RESULT(cddp__endpoint_read(dir, &back), CDDP_INVALID_ARG);
  f = fopen(path, "w"); /* a port past 65535; a control byte in a field */
  fputs("store h:99999\nrun_id x\ntoken -\n", f);
  fclose(f);
  CHECK_RESULT(cddp__endpoint_read(dir, &back), CDDP_INVALID_ARG);
  f = fopen(path, "w");
  fputs("store h:1\nrun_id x\033[2J\ntoken -\n", f);
  fclose(f);
  CHECK_RESULT(cddp__endpoint_read(dir, &back), CDDP_INVALID_ARG);
  unlink(path);
  CHECK(mkfifo(path, 0600) == 0); /* never waited on */
  CHECK_RESULT(cddp__endpoint_read(dir, &back), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "not a regular file") != NULL);
  unlink(path);
  rmdir(dir);
}

TEST(endpoint_records_how_the_run_ended) {
  char dir[] = "/tmp/cddp-endpoint-XXXXXX", path[128];
  CHECK(mkdtemp(dir) != NULL);
  CHECK_RESULT(cddp__endpoint_end(dir, "done at step %d", 7), CDDP_NOT_FOUND); /* no record: nothing made */
  cddp__endpoint_t e = {.port = 29400}, back;
  snprintf(e.host, sizeof e.host, "h");
  snprintf(e.run_id, sizeof e.run_id, "J");
  CHECK_OK(cddp__endpoint_write(dir, &e));
  CHECK_OK(cddp__endpoint_read(dir, &back));
  CHECK(!back.ended[0]);
  CHECK_OK(cddp__endpoint_end(dir, "stopped by signal SIGTERM at step %d", 42));
  CHECK_OK(cddp__endpoint_read(dir, &back));
  CHECK(!strcmp(back.ended, "stopped by signal SIGTERM at step 42") && back.port == 29400 && !strcmp(back.run_id, "J"));
  /* hostile: control bytes end the field, a long line is cut to it */
  snprintf(path, sizeof path, "%s/endpoint", dir);
  FILE *f = fopen(path, "w");
  fprintf(f, "store h:1\nrun_id J\ntoken -\nended done\033[2J at step 1\n");
  fclose(f);
  CHECK_OK(cddp__endpoint_read(dir, &back));
  CHECK(!strcmp(back.ended, "done"));
  f = fopen(path, "w");
  fprintf(f, "store h:1\nrun_id J\ntoken -\nended ");
  for (int i = 0; i < 600; i++) fputc('x', f);
  fclose(f);
  CHECK_OK(cddp__endpoint_read(dir, &back));
  CHECK(strlen(back.ended) < sizeof back.ended);
  unlink(path);
  rmdir(dir);
}

/* writes text as dir/metrics.jsonl */
static void put_metrics(const char *dir, const char *text, size_t len) {
  char path[128];
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  FILE *f = fopen(path, "w");
  fwrite(text, 1, len, f);
  fclose(f);
}

TEST(run_last_step_hostile_metrics) {
  char dir[] = "/tmp/cddp-metrics-XXXXXX", bad[64], path[128];
  CHECK(mkdtemp(dir) != NULL);
  uint64_t step = 99;
  int has = 1;
  CHECK_RESULT(cddp__run_last_step(dir, &step, &has, bad, sizeof bad), CDDP_NOT_FOUND);
  const char *good = "{\"step\":1,\"loss\":2.3}\n{\"step\":2,\"loss\":2.1}\n";
  put_metrics(dir, good, strlen(good));
  CHECK_OK(cddp__run_last_step(dir, &step, &has, bad, sizeof bad));
  CHECK(has && step == 2 && !bad[0]);
  const char *cut = "{\"step\":1,\"loss\":2.3}\n{\"step\":2,\"loss\":2.1}\n{\"step\":3,\"lo";
  put_metrics(dir, cut, strlen(cut)); /* a write cut short: named, the step before it kept */
  CHECK_OK(cddp__run_last_step(dir, &step, &has, bad, sizeof bad));
  CHECK(has && step == 2 && !strcmp(bad, "{\"step\":3,\"lo"));
  const char *junk = "\x01\xff{\"step\":,}\n{\"step\":99999999999999999999999}\n";
  put_metrics(dir, junk, strlen(junk)); /* no line parses (an over-long number neither) */
  CHECK_OK(cddp__run_last_step(dir, &step, &has, bad, sizeof bad));
  CHECK(!has && step == 0 && bad[0] && strlen(bad) < sizeof bad);
  put_metrics(dir, "", 0);
  CHECK_OK(cddp__run_last_step(dir, &step, &has, bad, sizeof bad));
  CHECK(!has && !bad[0]);
  /* a file far past the window: only its tail is read; the window's cut first line is not judged */
  size_t big = 300000;
  char *text = malloc(big + 64);
  CHECK(text != NULL);
  memset(text, 'x', big);
  size_t n = big + (size_t)snprintf(text + big, 64, "\n{\"step\":123456}\n");
  put_metrics(dir, text, n);
  free(text);
  CHECK_OK(cddp__run_last_step(dir, &step, &has, bad, sizeof bad));
  CHECK(has && step == 123456 && !bad[0]);
  memset(bad, 0, sizeof bad);
  text = calloc(1, big);
  CHECK(text != NULL);
  memset(text, 'y', big - 1);
  put_metrics(dir, text, big - 1); /* one line longer than the window, no newline: nothing to judge */
  free(text);
  CHECK_OK(cddp__run_last_step(dir, &step, &has, bad, sizeof bad));
  CHECK(!has && !bad[0]);
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  unlink(path);
  rmdir(dir);
}

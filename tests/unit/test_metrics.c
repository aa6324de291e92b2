/* test_metrics.c - metrics.jsonl when its writer, rank 0, is lost: the rank that takes over cuts
 * the file back to the committed step (a step the old rank 0 logged and the others redo is
 * logged once) and logs the committed step itself when the old rank 0 died before logging it;
 * a write that fails is an error naming the file; a resume repairs a torn last line and refuses
 * a damaged file, naming the line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trainer/metrics.h"
#include "test.h"

static void log_steps(const char *path, int from, int to) {
  cddp_metrics_t m;
  memset(&m, 0, sizeof m);
  CHECK_OK(cddp__metrics_open(&m, path, 1, 1000000));
  m.first_step = -1;
  for (int s = from; s <= to; s++) {
    cddp_step_record_t r = {.step = s, .total = 100, .epochs = 1, .loss = 1.0 / s, .samples = 8, .step_s = 0.01};
    cddp__metrics_step(&m, &r);
  }
  cddp__metrics_close(&m);
}

/* The steps of path's step lines, "1 2 3". */
static void steps_of(const char *path, char *buf, size_t size) {
  FILE *f = fopen(path, "r");
  char line[2048];
  size_t o = 0;
  buf[0] = '\0';
  while (f && fgets(line, sizeof line, f) && o < size) {
    const char *k = strstr(line, "\"step\":");
    if (k) o += (size_t)snprintf(buf + o, size - o, "%s%lld", o ? " " : "", strtoll(k + 7, NULL, 10));
  }
  if (f) fclose(f);
}

/* A rank that is not rank 0: no file, but it keeps its last step's record. */
static void follower(cddp_metrics_t *m, int last) {
  memset(m, 0, sizeof *m);
  CHECK_OK(cddp__metrics_open(m, NULL, 0, 1000000));
  m->first_step = -1;
  for (int s = 1; s <= last; s++) {
    cddp_step_record_t r = {.step = s, .total = 100, .epochs = 1, .loss = 1.0 / s, .samples = 8, .step_s = 0.01};
    cddp__metrics_step(m, &r);
  }
}

TEST(a_new_rank0_cuts_a_step_the_old_one_logged_and_the_others_redo) {
  char file[4200], got[256];
  cddp_test_path(file, sizeof file, "metrics.jsonl");
  log_steps(file, 1, 4); /* the old rank 0 logged step 4; the others had committed 3 */
  cddp_metrics_t m;
  follower(&m, 3);
  CHECK_OK(cddp__metrics_take_over(&m, file, 3, NULL));
  cddp_step_record_t r = {.step = 4, .total = 100, .epochs = 1, .loss = 0.25, .samples = 8, .step_s = 0.01};
  cddp__metrics_step(&m, &r); /* step 4 redone */
  cddp__metrics_close(&m);
  steps_of(file, got, sizeof got);
  CHECK(!strcmp(got, "1 2 3 4"));
}

TEST(a_new_rank0_logs_the_committed_step_the_old_one_died_before_logging) {
  char file[4200], got[256];
  cddp_test_path(file, sizeof file, "metrics.jsonl");
  log_steps(file, 1, 2); /* every rank committed step 3; the old rank 0 died before its line */
  cddp_metrics_t m;
  follower(&m, 3);
  CHECK_OK(cddp__metrics_take_over(&m, file, 3, NULL));
  cddp__metrics_close(&m);
  steps_of(file, got, sizeof got);
  CHECK(!strcmp(got, "1 2 3"));
  /* a rank that did not run the committed step itself (it got the state from another) logs nothing it does not know */
  log_steps(file, 4, 4);
  follower(&m, 2);
  CHECK_OK(cddp__metrics_take_over(&m, file, 5, NULL));
  cddp__metrics_close(&m);
  steps_of(file, got, sizeof got);
  CHECK(!strcmp(got, "1 2 3 4"));
}

/* logged: where this process knows the file ends; the recovery takes the file over whenever
 * it is not at the synced step (a replacement rank 0 starts at -1: the dead writer's file) */
TEST(logged_says_where_the_file_ends_for_the_recovery_to_take_it_over) {
  char file[4200], got[256];
  cddp_test_path(file, sizeof file, "metrics.jsonl");
  log_steps(file, 1, 2); /* the old rank 0 died after committing step 3, before its line */
  cddp_metrics_t m;
  CHECK_OK(cddp__metrics_open(&m, file, 1, 1000000)); /* its replacement: the dead writer's file */
  CHECK(m.logged == -1);
  cddp_step_record_t src = {.step = 3, .total = 100, .epochs = 1, .loss = 1.0 / 3, .samples = 8, .step_s = 0.01};
  m.last = src, m.have_last = 1; /* the state's source's record, sent with the state */
  CHECK_OK(cddp__metrics_take_over(&m, file, 3, NULL));
  CHECK(m.logged == 3);
  cddp_step_record_t r = {.step = 4, .total = 100, .epochs = 1, .loss = 0.25, .samples = 8, .step_s = 0.01};
  CHECK_OK(cddp__metrics_step(&m, &r));
  CHECK(m.logged == 4);
  cddp__metrics_close(&m);
  steps_of(file, got, sizeof got);
  CHECK(!strcmp(got, "1 2 3 4"));
  follower(&m, 2); /* no record of step 6: the file stays behind it, and logged says so */
  CHECK_OK(cddp__metrics_take_over(&m, file, 6, NULL));
  CHECK(m.logged == 4);
  cddp__metrics_close(&m);
}

/* path's bytes, for checking a refused repair left the file as it was */
static size_t slurp(const char *path, char *buf, size_t size) {
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, size - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = '\0';
  return n;
}

static void append(const char *path, const char *text) {
  FILE *f = fopen(path, "a");
  CHECK(f != NULL);
  fputs(text, f);
  fclose(f);
}

TEST(a_write_that_fails_is_an_error_naming_the_file) {
  cddp_metrics_t m;
  memset(&m, 0, sizeof m);
  CHECK_OK(cddp__metrics_open(&m, "/dev/full", 1, 1000000)); /* every write: ENOSPC */
  cddp_step_record_t r = {.step = 1, .total = 100, .epochs = 1, .loss = 1, .samples = 8, .step_s = 0.01};
  CHECK_RESULT(cddp__metrics_step(&m, &r), CDDP_SYSTEM);
  CHECK(strstr(cddp_last_error(), "/dev/full") && strstr(cddp_last_error(), strerror(ENOSPC)));
  CHECK_RESULT(cddp__metrics_eval(&m, 0, 1, 1, 0.5, 1.0, 10), CDDP_SYSTEM);
  CHECK(strstr(cddp_last_error(), "/dev/full") != NULL);
  cddp__metrics_close(&m);
}

TEST(a_resume_drops_a_torn_last_line_and_the_lines_after_its_step) {
  char file[4200], got[256];
  cddp_test_path(file, sizeof file, "metrics.jsonl");
  log_steps(file, 1, 6);
  append(file, "{\"step\":7,\"epoch\":1,\"lo"); /* the disk filled up mid-line */
  int64_t had = 0;
  CHECK_OK(cddp__metrics_trim(file, 4, 4, &had));
  CHECK_EQ(had, 6);
  steps_of(file, got, sizeof got);
  CHECK(!strcmp(got, "1 2 3 4"));
  log_steps(file, 5, 5); /* appended on a line of its own */
  steps_of(file, got, sizeof got);
  CHECK(!strcmp(got, "1 2 3 4 5"));
}

TEST(a_resume_refuses_a_line_before_its_step_that_does_not_parse) {
  char file[4200], before[8192], after[8192];
  cddp_test_path(file, sizeof file, "metrics.jsonl");
  log_steps(file, 1, 2);
  append(file, "garbage\n");
  log_steps(file, 3, 6);
  slurp(file, before, sizeof before);
  CHECK_RESULT(cddp__metrics_trim(file, 5, 5, NULL), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), file) == cddp_last_error() && strstr(cddp_last_error(), "line 3 does not parse"));
  slurp(file, after, sizeof after);
  CHECK(!strcmp(before, after)); /* refused: left as it was */
  /* after the resumed step, a line that does not parse goes with the others */
  CHECK_OK(cddp__metrics_trim(file, 1, 1, NULL));
}

/* "step":1e08 is step 1 to strtoll but 1e8 to strtod (the plot, the resume's check): a line whose
 * step is not a whole integer is not a step line, so before the resumed step it is refused (fuzz). */
TEST(a_resume_refuses_a_step_that_is_not_an_integer) {
  char file[4200], before[8192], after[8192];
  cddp_test_path(file, sizeof file, "metrics.jsonl");
  const char *odd[] = {"{\"step\":1e08}\n", "{\"step\":1.5,\"loss\":1}\n", "{\"step\":1x}\n"};
  for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
    unlink(file);
    append(file, odd[i]);
    log_steps(file, 2, 6);
    slurp(file, before, sizeof before);
    CHECK_RESULT(cddp__metrics_trim(file, 5, 5, NULL), CDDP_INVALID_ARG);
    CHECK(strstr(cddp_last_error(), "line 1 does not parse") != NULL);
    slurp(file, after, sizeof after);
    CHECK(!strcmp(before, after));
  }
}

TEST(a_resume_refuses_steps_missing_before_its_step) {
  char file[4200], got[256];
  cddp_test_path(file, sizeof file, "metrics.jsonl");
  log_steps(file, 1, 5); /* cut back behind the step-10 checkpoint */
  CHECK_RESULT(cddp__metrics_trim(file, 10, 10, NULL), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "ends at step 5") != NULL);
  log_steps(file, 8, 12); /* a gap: steps 6 and 7 */
  CHECK_RESULT(cddp__metrics_trim(file, 10, 10, NULL), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "line 6: step 8 follows step 5") != NULL);
  steps_of(file, got, sizeof got);
  CHECK(!strcmp(got, "1 2 3 4 5 8 9 10 11 12"));
}

/* A FIFO where metrics.jsonl should be (a folder anyone could write into): refused at once, not
 * waited on for ever. */
TEST(a_resume_refuses_a_fifo_for_metrics) {
  char file[4200];
  cddp_test_path(file, sizeof file, "metrics.jsonl");
  CHECK(mkfifo(file, 0600) == 0);
  CHECK_RESULT(cddp__metrics_trim(file, 5, 5, NULL), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "is not a regular file") != NULL);
}

/* Steps near and past int64 (the fuzzer's find): a step past it is a line that does not parse,
 * INT64_MAX itself is followed by nothing (prev + 1 overflowed). */
TEST(a_resume_refuses_steps_at_the_edge_of_int64) {
  char file[4200];
  cddp_test_path(file, sizeof file, "metrics.jsonl");
  log_steps(file, 1, 1);
  append(file, "{\"step\":9223372036854775807,\"loss\":1}\n{\"step\":2,\"loss\":1}\n");
  CHECK_RESULT(cddp__metrics_trim(file, 5, 5, NULL), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "line 3: step 2 follows step 9223372036854775807") != NULL);
  unlink(file);
  log_steps(file, 1, 1);
  append(file, "{\"step\":99999999999999999999999,\"loss\":1}\n{\"step\":2,\"loss\":1}\n");
  CHECK_RESULT(cddp__metrics_trim(file, 5, 5, NULL), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "line 2 does not parse") != NULL);
}

TEST(a_new_rank0_drops_the_torn_line_the_old_one_left) {
  char file[4200], got[256];
  cddp_test_path(file, sizeof file, "metrics.jsonl");
  log_steps(file, 1, 4);
  append(file, "{\"step\":5,\"ep"); /* the old rank 0 died mid-line */
  cddp_metrics_t m;
  follower(&m, 4);
  CHECK_OK(cddp__metrics_take_over(&m, file, 4, NULL));
  cddp_step_record_t r = {.step = 5, .total = 100, .epochs = 1, .loss = 0.2, .samples = 8, .step_s = 0.01};
  CHECK_OK(cddp__metrics_step(&m, &r)); /* on a line of its own, not glued to the torn one */
  cddp__metrics_close(&m);
  steps_of(file, got, sizeof got);
  CHECK(!strcmp(got, "1 2 3 4 5"));
  CHECK_OK(cddp__metrics_trim(file, 5, 5, NULL)); /* every line whole */
}

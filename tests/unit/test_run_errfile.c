/* test_run_errfile.c - the message in torch's error file (TORCHELASTIC_ERROR_FILE): torch's own
 * layout, escapes, non-ASCII, a flat message, and files that hold none. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher/errfile.h"
#include "test.h"

static char path[4200];

static int read_text(const char *json, char *out, size_t size) {
  cddp_test_path(path, sizeof path, "error.json");
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  fputs(json, f);
  fclose(f);
  uint64_t t = 0;
  int r = cddp__errfile_read(path, out, size, &t);
  CHECK(t > 0);
  unlink(path);
  return r;
}

/* what torch 1.13's ErrorHandler.record_exception writes (json.dump, ensure_ascii) */
TEST(errfile_torch_layout) {
  char m[200];
  CHECK_EQ(read_text("{\"message\": {\"message\": \"ValueError: bad lr \\\"x\\\" \\u00e9\\ud83d\\ude00\", \"extraInfo\": "
                     "{\"py_callstack\": \"Traceback (most recent call last):\\n  File ...\", \"timestamp\": \"1700000000\"}}}",
                     m, sizeof m), 1);
  if (strcmp(m, "ValueError: bad lr \"x\" \xc3\xa9\xf0\x9f\x98\x80")) TEST_FAIL("got '%s'", m);
}

/* a message of several lines gives its first; a flat {"message": "..."} works too */
TEST(errfile_first_line_and_flat) {
  char m[200];
  CHECK_EQ(read_text("{\"message\":\"RuntimeError: first\\nsecond line\\tx\"}", m, sizeof m), 1);
  if (strcmp(m, "RuntimeError: first")) TEST_FAIL("got '%s'", m);
  CHECK_EQ(read_text("{ \"message\" : { \"message\" : \"A\\tB\\\\C\\/D\" } }", m, sizeof m), 1);
  if (strcmp(m, "A B\\C/D")) TEST_FAIL("got '%s'", m);
}

/* a long message is cut to the buffer, never past it */
TEST(errfile_truncated_to_buffer) {
  char m[8];
  CHECK_EQ(read_text("{\"message\": {\"message\": \"0123456789abcdef\"}}", m, sizeof m), 1);
  CHECK_EQ(strlen(m), 7);
  CHECK(!strcmp(m, "0123456"));
}

/* no file, an empty one, another layout, an empty or broken message: nothing, and no crash */
TEST(errfile_without_message) {
  char m[64] = "x";
  CHECK_EQ(cddp__errfile_read("/nonexistent/cddp/error.json", m, sizeof m, NULL), 0);
  CHECK_EQ(m[0], '\0');
  CHECK_EQ(read_text("", m, sizeof m), 0);
  CHECK_EQ(read_text("{\"error\": \"x\"}", m, sizeof m), 0);
  CHECK_EQ(read_text("{\"message\": \"\"}", m, sizeof m), 0);
  CHECK_EQ(read_text("{\"message\": {\"message\": \"abc\\u12", m, sizeof m), 0);
  CHECK_EQ(read_text("{\"message\": 42}", m, sizeof m), 0);
  CHECK_EQ(read_text("[1, 2, 3]", m, sizeof m), 0);
}

/* The worker writes this file: a FIFO there must not hang the agent that reads it. */
TEST(errfile_fifo_not_waited_on) {
  char fifo[4200], m[64] = "x";
  cddp_test_path(fifo, sizeof fifo, "error.json");
  CHECK(mkfifo(fifo, 0600) == 0);
  CHECK_EQ(cddp__errfile_read(fifo, m, sizeof m, NULL), 0);
  CHECK_EQ(m[0], '\0');
}

/* test_run_etimer.c - the elastic timer's request lines (torch's FileTimerRequest.to_json) and
 * its table: acquire, release, expiry in order, a pid forgotten; bad lines each refused. */
#include <string.h>

#include "launcher/elastic_timer.h"
#include "test.h"

static int parse(const char *s, cddp__etimer_req_t *r, char *err) {
  return cddp__etimer_parse(s, strlen(s), r, err, 128);
}

TEST(etimer_torch_request) {
  cddp__etimer_req_t r;
  char err[128] = "";
  if (parse("{\"version\": 1, \"pid\": 4321, \"scope_id\": \"data\\\"load\\u00e9\", \"expiration_time\": 1795848480.25, "
            "\"signal\": 9}", &r, err) != 0)
    TEST_FAIL("refused: %s", err);
  CHECK_EQ(r.pid, 4321);
  CHECK_EQ(r.signal, 9);
  CHECK_NEAR(r.expiration_time, 1795848480.25, 1e-3);
  if (strcmp(r.scope, "data\"load?")) TEST_FAIL("scope '%s'", r.scope);
  CHECK_EQ(parse("{\"version\":1,\"pid\":7,\"scope_id\":\"x\",\"expiration_time\":-1,\"signal\":0}", &r, err), 0);
  CHECK(r.expiration_time < 0);
}

TEST(etimer_bad_lines) {
  static const char *bad[] = {
      "", "[]", "{", "{\"pid\": 1}", "{\"pid\": 0, \"scope_id\": \"x\", \"expiration_time\": 1, \"signal\": 9}",
      "{\"pid\": 1.5, \"scope_id\": \"x\", \"expiration_time\": 1, \"signal\": 9}",
      "{\"pid\": 1, \"scope_id\": \"x\", \"expiration_time\": 1, \"signal\": 99}",
      "{\"pid\": 1, \"scope_id\": \"x\", \"expiration_time\": nan, \"signal\": 9}",
      "{\"pid\": 1, \"scope_id\": \"x\", \"expiration_time\": 1e999, \"signal\": 9}",
      "{\"pid\": 1, \"scope_id\": \"x\\q\", \"expiration_time\": 1, \"signal\": 9}",
      "{\"pid\": 1, \"scope_id\": \"x\", \"expiration_time\": 1, \"signal\": 9} x",
      "{\"pid\": 1, \"scope_id\": {}, \"expiration_time\": 1, \"signal\": 9}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cddp__etimer_req_t r;
    char err[128] = "";
    if (parse(bad[i], &r, err) == 0) TEST_FAIL("'%s' was taken", bad[i]);
    CHECK(err[0] != '\0');
  }
}

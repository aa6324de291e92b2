/* test_store.c - one behaviour suite run against every store implementation (mem, file, tcp). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cddp/store.h"
#include "common/clock.h"
#include "test.h"

/* A fixture hands out handles onto one underlying store: the same object for mem,
 * another open of the same file for file, another connection for tcp. */
typedef struct fixture {
  const char *kind;
  cddp_store_t *shared; /* mem */
  char path[256];       /* file */
  cddp_store_server_t *srv; /* tcp */
} fixture_t;

static void fx_setup(fixture_t *fx, const char *kind) {
  memset(fx, 0, sizeof *fx);
  fx->kind = kind;
  if (!strcmp(kind, "mem")) {
    CHECK_OK(cddp_store_mem_create(&fx->shared));
  } else if (!strcmp(kind, "file")) {
    cddp_test_path(fx->path, sizeof fx->path, "store");
  } else {
    CHECK_OK(cddp_store_server_start(&fx->srv, "127.0.0.1", 0, "sekrit"));
  }
}

static cddp_store_t *fx_open(fixture_t *fx) {
  cddp_store_t *s = NULL;
  if (fx->shared) return fx->shared;
  if (fx->path[0]) CHECK_OK(cddp_store_file_create(&s, fx->path));
  else CHECK_OK(cddp_store_tcp_connect(&s, "127.0.0.1", cddp_store_server_port(fx->srv), "sekrit", 5000));
  return s;
}

static void fx_close(fixture_t *fx, cddp_store_t *s) {
  if (s != fx->shared) cddp_store_close(s);
}

static void fx_teardown(fixture_t *fx) {
  cddp_store_close(fx->shared);
  cddp_store_server_stop(fx->srv);
  if (fx->path[0]) {
    char lock[300];
    snprintf(lock, sizeof lock, "%s.lock", fx->path);
    unlink(fx->path);
    unlink(lock);
  }
}

static void expect_value(cddp_store_t *s, const char *key, const char *want, size_t wantlen) {
  void *v = NULL;
  size_t n = 99;
  CHECK_OK(cddp_store_get(s, key, &v, &n, 1000));
  CHECK_EQ(n, wantlen);
  CHECK(memcmp(v, want, wantlen) == 0);
  CHECK_EQ(((char *)v)[n], 0);
  free(v);
}

static void suite_set_get(fixture_t *fx) {
  cddp_store_t *s = fx_open(fx);
  CHECK_OK(cddp_store_set(s, "a", "hello", 5));
  expect_value(s, "a", "hello", 5);
  CHECK_OK(cddp_store_set(s, "a", "bye", 3));
  expect_value(s, "a", "bye", 3);
  CHECK_OK(cddp_store_set(s, "bin", "x\0y", 3)); /* binary values keep their NULs */
  expect_value(s, "bin", "x\0y", 3);
  CHECK_OK(cddp_store_set(s, "empty", NULL, 0));
  expect_value(s, "empty", "", 0);
  /* a large value survives the trip */
  size_t big = 3u << 20;
  char *b = malloc(big);
  for (size_t i = 0; i < big; i++) b[i] = (char)(i * 7);
  CHECK_OK(cddp_store_set(s, "big", b, big));
  void *v;
  size_t n;
  CHECK_OK(cddp_store_get(s, "big", &v, &n, 0));
  CHECK_EQ(n, big);
  CHECK(memcmp(v, b, big) == 0);
  free(v);
  free(b);
  /* bad arguments */
  char longkey[CDDP_STORE_MAX_KEY + 2];
  memset(longkey, 'k', sizeof longkey - 1);
  longkey[sizeof longkey - 1] = 0;
  CHECK_RESULT(cddp_store_set(s, longkey, "v", 1), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "longer than") != NULL);
  CHECK_RESULT(cddp_store_set(s, "", "v", 1), CDDP_INVALID_ARG);
  CHECK_RESULT(cddp_store_set(s, "x", NULL, 4), CDDP_INVALID_ARG);
  fx_close(fx, s);
}

static void suite_get_timeout(fixture_t *fx) {
  cddp_store_t *s = fx_open(fx);
  void *v = (void *)1;
  uint64_t t0 = cddp__now_ns();
  CHECK_RESULT(cddp_store_get(s, "missing", &v, NULL, 150), CDDP_TIMEOUT);
  double ms = (cddp__now_ns() - t0) / 1e6;
  CHECK(v == NULL);
  CHECK(ms >= 140 && ms < 5000 * cddp_test_scale());
  CHECK(strstr(cddp_last_error(), "missing") != NULL);
  CHECK_RESULT(cddp_store_get(s, "missing", &v, NULL, 0), CDDP_TIMEOUT);
  fx_close(fx, s);
}

static void suite_add(fixture_t *fx) {
  cddp_store_t *s = fx_open(fx);
  int64_t r = 0;
  CHECK_OK(cddp_store_add(s, "ctr", 5, &r));
  CHECK_EQ(r, 5);
  CHECK_OK(cddp_store_add(s, "ctr", -7, &r));
  CHECK_EQ(r, -2);
  expect_value(s, "ctr", "-2", 2);
  CHECK_OK(cddp_store_set(s, "ctr", "40", 2));
  CHECK_OK(cddp_store_add(s, "ctr", 2, &r));
  CHECK_EQ(r, 42);
  CHECK_OK(cddp_store_set(s, "word", "abc", 3));
  CHECK_RESULT(cddp_store_add(s, "word", 1, &r), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "word") != NULL);
  CHECK_OK(cddp_store_set(s, "max", "9223372036854775807", 19));
  CHECK_RESULT(cddp_store_add(s, "max", 1, &r), CDDP_INVALID_ARG);
  fx_close(fx, s);
}

static void suite_compare_set(fixture_t *fx) {
  cddp_store_t *s = fx_open(fx);
  void *cur;
  size_t n;
  /* expected NULL on an absent key: swaps */
  CHECK_OK(cddp_store_compare_set(s, "cas", NULL, 0, "one", 3, &cur, &n));
  CHECK(n == 3 && !memcmp(cur, "one", 3));
  free(cur);
  /* expected NULL on a present key: no swap, current value returned */
  CHECK_OK(cddp_store_compare_set(s, "cas", NULL, 0, "two", 3, &cur, &n));
  CHECK(n == 3 && !memcmp(cur, "one", 3));
  free(cur);
  /* wrong expectation: no swap */
  CHECK_OK(cddp_store_compare_set(s, "cas", "nope", 4, "two", 3, &cur, &n));
  CHECK(n == 3 && !memcmp(cur, "one", 3));
  free(cur);
  /* right expectation: swaps */
  CHECK_OK(cddp_store_compare_set(s, "cas", "one", 3, "three", 5, &cur, &n));
  CHECK(n == 5 && !memcmp(cur, "three", 5));
  free(cur);
  /* an expectation on an absent key: no swap, current NULL */
  CHECK_OK(cddp_store_compare_set(s, "cas2", "x", 1, "y", 1, &cur, &n));
  CHECK(cur == NULL && n == 0);
  CHECK_RESULT(cddp_store_get(s, "cas2", &cur, &n, 0), CDDP_TIMEOUT);
  /* current may be NULL */
  CHECK_OK(cddp_store_compare_set(s, "cas2", NULL, 0, "z", 1, NULL, NULL));
  expect_value(s, "cas2", "z", 1);
  fx_close(fx, s);
}

static void suite_delete_num_keys(fixture_t *fx) {
  cddp_store_t *s = fx_open(fx);
  int64_t n = -1;
  int existed = -1;
  CHECK_OK(cddp_store_num_keys(s, &n));
  CHECK_EQ(n, 0);
  CHECK_OK(cddp_store_set(s, "k1", "1", 1));
  CHECK_OK(cddp_store_set(s, "k2", "2", 1));
  CHECK_OK(cddp_store_add(s, "k3", 1, NULL));
  CHECK_OK(cddp_store_num_keys(s, &n));
  CHECK_EQ(n, 3);
  CHECK_OK(cddp_store_delete(s, "k2", &existed));
  CHECK_EQ(existed, 1);
  CHECK_OK(cddp_store_delete(s, "k2", &existed));
  CHECK_EQ(existed, 0);
  CHECK_OK(cddp_store_delete(s, "never", NULL));
  CHECK_OK(cddp_store_num_keys(s, &n));
  CHECK_EQ(n, 2);
  void *v;
  CHECK_RESULT(cddp_store_get(s, "k2", &v, NULL, 0), CDDP_TIMEOUT);
  fx_close(fx, s);
}

static void suite_wait_timeout(fixture_t *fx) {
  cddp_store_t *s = fx_open(fx);
  CHECK_OK(cddp_store_set(s, "w1", "x", 1));
  const char *keys[] = {"w1", "w-missing-2", "w-missing-3"};
  CHECK_OK(cddp_store_wait(s, keys, 1, 0));
  uint64_t t0 = cddp__now_ns();
  CHECK_RESULT(cddp_store_wait(s, keys, 3, 120), CDDP_TIMEOUT);
  double ms = (cddp__now_ns() - t0) / 1e6;
  CHECK(ms >= 110 && ms < 5000 * cddp_test_scale());
  CHECK(strstr(cddp_last_error(), "w-missing-2") != NULL);
  CHECK_OK(cddp_store_wait(s, keys, 0, 0));
  fx_close(fx, s);
}

struct setter {
  fixture_t *fx;
  int delay_ms;
};
static void *setter_thread(void *arg) {
  struct setter *st = arg;
  cddp_store_t *s = fx_open(st->fx);
  usleep((useconds_t)st->delay_ms * 1000);
  if (cddp_store_set(s, "late1", "1", 1) != CDDP_OK) abort();
  usleep(20000);
  if (cddp_store_add(s, "late2", 1, NULL) != CDDP_OK) abort();
  fx_close(st->fx, s);
  return NULL;
}

static void suite_wait_woken(fixture_t *fx) {
  cddp_store_t *s = fx_open(fx);
  struct setter st = {fx, 50};
  pthread_t th;
  pthread_create(&th, NULL, setter_thread, &st);
  const char *keys[] = {"late1", "late2"};
  CHECK_OK(cddp_store_wait(s, keys, 2, 10000));
  void *v;
  size_t n;
  CHECK_OK(cddp_store_get(s, "late2", &v, &n, 0));
  CHECK(n == 1 && !memcmp(v, "1", 1));
  free(v);
  pthread_join(th, NULL);
  /* get parks too */
  st.delay_ms = 30;
  CHECK_OK(cddp_store_delete(s, "late1", NULL));
  pthread_create(&th, NULL, setter_thread, &st);
  CHECK_OK(cddp_store_get(s, "late1", &v, &n, 10000));
  free(v);
  pthread_join(th, NULL);
  fx_close(fx, s);
}

static void suite_prefix(fixture_t *fx) {
  cddp_store_t *s = fx_open(fx), *a, *b, *ab;
  CHECK_OK(cddp_store_prefix_create(&a, s, "job1/", 0));
  CHECK_OK(cddp_store_prefix_create(&b, s, "job2/", 0));
  CHECK_OK(cddp_store_prefix_create(&ab, a, "r3/", 0));
  CHECK_OK(cddp_store_set(a, "x", "A", 1));
  CHECK_OK(cddp_store_set(b, "x", "B", 1));
  CHECK_OK(cddp_store_add(ab, "n", 4, NULL));
  expect_value(s, "job1/x", "A", 1);
  expect_value(s, "job2/x", "B", 1);
  expect_value(s, "job1/r3/n", "4", 1);
  expect_value(a, "r3/n", "4", 1);
  int64_t n;
  CHECK_OK(cddp_store_num_keys(ab, &n));
  CHECK_EQ(n, 3);
  void *cur;
  size_t cl;
  CHECK_OK(cddp_store_compare_set(b, "x", "B", 1, "C", 1, &cur, &cl));
  CHECK(cl == 1 && !memcmp(cur, "C", 1));
  free(cur);
  const char *keys[] = {"x", "nope"};
  CHECK_RESULT(cddp_store_wait(b, keys, 2, 30), CDDP_TIMEOUT);
  CHECK(strstr(cddp_last_error(), "job2/nope") != NULL);
  int existed;
  CHECK_OK(cddp_store_delete(a, "x", &existed));
  CHECK_EQ(existed, 1);
  CHECK_OK(cddp_store_delete(a, "x", &existed));
  CHECK_EQ(existed, 0);
  expect_value(s, "job2/x", "C", 1);
  cddp_store_close(ab);
  cddp_store_close(b);
  cddp_store_close(a);
  /* a view that owns its base closes it (a leak here shows under ASan) */
  cddp_store_t *own;
  cddp_store_t *s2 = fx->shared ? NULL : fx_open(fx);
  if (s2) {
    CHECK_OK(cddp_store_prefix_create(&own, s2, "own/", 1));
    CHECK_OK(cddp_store_set(own, "k", "v", 1));
    cddp_store_close(own);
    expect_value(s, "own/k", "v", 1);
  }
  fx_close(fx, s);
}

struct adder {
  fixture_t *fx;
  int n;
};
static void *adder_thread(void *arg) {
  struct adder *ad = arg;
  cddp_store_t *s = fx_open(ad->fx);
  for (int i = 0; i < ad->n; i++)
    if (cddp_store_add(s, "shared-ctr", 1, NULL) != CDDP_OK) abort();
  fx_close(ad->fx, s);
  return NULL;
}

static void suite_concurrent_add(fixture_t *fx) {
  enum { T = 4 };
  struct adder ad = {fx, 100};
  pthread_t th[T];
  for (int i = 0; i < T; i++) pthread_create(&th[i], NULL, adder_thread, &ad);
  for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
  cddp_store_t *s = fx_open(fx);
  int64_t r;
  CHECK_OK(cddp_store_add(s, "shared-ctr", 0, &r));
  CHECK_EQ(r, T * 100);
  fx_close(fx, s);
}

#define SUITE(kind, name)                 \
  TEST(kind##_##name) {                   \
    fixture_t fx;                         \
    fx_setup(&fx, #kind);                 \
    suite_##name(&fx);                    \
    fx_teardown(&fx);                     \
  }
#define ALL_SUITES(kind)                                                                   \
  SUITE(kind, set_get) SUITE(kind, get_timeout) SUITE(kind, add) SUITE(kind, compare_set)   \
  SUITE(kind, delete_num_keys) SUITE(kind, wait_timeout) SUITE(kind, wait_woken)           \
  SUITE(kind, prefix) SUITE(kind, concurrent_add)

ALL_SUITES(mem)
ALL_SUITES(tcp)
ALL_SUITES(file)

TEST(token_from_env) {
  char buf[64];
  unsetenv("CDDP_TOKEN");
  unsetenv("CDDP_TOKEN_FILE");
  CHECK_OK(cddp_token_from_env(buf, sizeof buf));
  CHECK(buf[0] == 0);
  setenv("CDDP_TOKEN", "abc", 1);
  CHECK_OK(cddp_token_from_env(buf, sizeof buf));
  CHECK(!strcmp(buf, "abc"));
  unsetenv("CDDP_TOKEN");
  char path[4200];
  cddp_test_path(path, sizeof path, "token");
  FILE *f = fopen(path, "w");
  fputs("from-file\n", f);
  fclose(f);
  setenv("CDDP_TOKEN_FILE", path, 1);
  CHECK_OK(cddp_token_from_env(buf, sizeof buf));
  CHECK(!strcmp(buf, "from-file"));
  CHECK_RESULT(cddp_token_from_env(buf, 5), CDDP_INVALID_ARG); /* never cut silently */
  CHECK(strstr(cddp_last_error(), "longer than 4 bytes") != NULL);
  f = fopen(path, "w"); /* empty (a newline alone): an error, not "no token" */
  fputs("\n", f);
  fclose(f);
  CHECK_RESULT(cddp_token_from_env(buf, sizeof buf), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "is empty") != NULL);
  unlink(path);
  CHECK(mkfifo(path, 0600) == 0); /* a FIFO nobody writes: one line at once, no hang */
  CHECK_RESULT(cddp_token_from_env(buf, sizeof buf), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "not a regular file") != NULL);
  unlink(path);
  CHECK_RESULT(cddp_token_from_env(buf, sizeof buf), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), path) != NULL);
}

TEST(set_timeout_and_close_null) {
  cddp_store_close(NULL);
  cddp_store_set_timeout(NULL, 5);
  cddp_store_t *s, *p;
  CHECK_OK(cddp_store_mem_create(&s));
  CHECK_OK(cddp_store_prefix_create(&p, s, "p/", 1));
  cddp_store_set_timeout(p, 0);
  void *v;
  /* a negative timeout means "the store's bound", now 0: returns at once */
  uint64_t t0 = cddp__now_ns();
  CHECK_RESULT(cddp_store_get(p, "none", &v, NULL, -1), CDDP_TIMEOUT);
  CHECK((cddp__now_ns() - t0) / 1e6 < 1000);
  cddp_store_close(p);
}

/* The file store across processes: forked ranks add to one counter and meet at a key. */
static void file_rank(int rank, int world, void *arg) {
  cddp_store_t *s;
  CHECK_OK(cddp_store_file_create(&s, (const char *)arg));
  int64_t r;
  for (int i = 0; i < 20; i++) CHECK_OK(cddp_store_add(s, "ctr", 1, &r));
  CHECK_OK(cddp_store_add(s, "arrived", 1, &r));
  if (r == world) CHECK_OK(cddp_store_set(s, "done", "1", 1));
  CHECK_OK(cddp_store_wait(s, (const char *[]){"done"}, 1, 20000));
  cddp_store_close(s);
}

TEST(file_processes_share_one_store) {
  fixture_t fx;
  fx_setup(&fx, "file");
  CHECK_EQ(cddp_test_fork_ranks(4, file_rank, fx.path, 60), 0);
  cddp_store_t *s = fx_open(&fx);
  expect_value(s, "ctr", "80", 2);
  cddp_store_close(s);
  /* a file that is not a store is refused with its name */
  FILE *f = fopen(fx.path, "w");
  fputs("hello", f);
  fclose(f);
  CHECK_RESULT(cddp_store_file_create(&s, fx.path), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), fx.path) != NULL);
  fx_teardown(&fx);
}

/* test_ckpt.c - checkpoints: safetensors round trip and strict parsing, save/load, corrupt
 * files named in errors, find_latest skipping broken ones, keep-K pruning, SIGKILL at random
 * instants during saves. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "test.h"
#include "cddp/ckpt.h"
#include "common/io.h"
#include "ddp/safetensors.h"

#define CHECK_HAS(s, sub)                                                          \
  do {                                                                             \
    if (!strstr((s), (sub))) TEST_FAIL("'%s' does not contain '%s'", (s), (sub)); \
  } while (0)

static char tmp_root[128];

/* A fresh directory for this test, in its own folder (test.h: removed when the test ends). */
static char *tmpdir(void) {
  cddp_test_path(tmp_root, sizeof tmp_root, "ckpt.XXXXXX");
  if (!mkdtemp(tmp_root)) TEST_FAIL("mkdtemp %s: %s", tmp_root, strerror(errno));
  return tmp_root;
}

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) TEST_FAIL("open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)n + 1);
  if (fread(b, 1, (size_t)n, f) != (size_t)n) TEST_FAIL("read %s", path);
  fclose(f);
  *len = (size_t)n;
  return b;
}

static void spit(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(b, 1, n, f) != n) TEST_FAIL("write %s", path);
  fclose(f);
}

/* The value every test tensor holds at index j of checkpoint `step`. */
static float val(int64_t step, int which, size_t j) {
  return (float)step + 0.25f * (float)(j % 97) + (float)which * 1000.0f;
}

typedef struct demo {
  float *buf[4];
  cddp_tensor_view_t w[2], s[2];
  cddp_meta_kv_t meta[2];
  char step_s[32];
} demo_t;

/* A payload of 4 tensors (rows x 1024 and 1024 floats, twice) filled from val(step). */
static void demo_init(demo_t *d, int64_t step, int rows) {
  size_t counts[4] = {(size_t)rows * 1024, 1024, (size_t)rows * 1024, 1024};
  for (int i = 0; i < 4; i++) {
    d->buf[i] = malloc(counts[i] * sizeof(float));
    for (size_t j = 0; j < counts[i]; j++) d->buf[i][j] = val(step, i, j);
  }
  d->w[0] = (cddp_tensor_view_t){"fc1.weight", 2, {rows, 1024}, d->buf[0]};
  d->w[1] = (cddp_tensor_view_t){"fc1.bias", 1, {1024}, d->buf[1]};
  d->s[0] = (cddp_tensor_view_t){"exp_avg.fc1.weight", 2, {rows, 1024}, d->buf[2]};
  d->s[1] = (cddp_tensor_view_t){"exp_avg.fc1.bias", 1, {1024}, d->buf[3]};
  snprintf(d->step_s, sizeof d->step_s, "%lld", (long long)step);
  d->meta[0] = (cddp_meta_kv_t){"trainer.step", d->step_s};
  d->meta[1] = (cddp_meta_kv_t){"sampler", "{\"epoch\": 3, \"consumed\": 1024}\n"};
}
static cddp_ckpt_payload_t demo_payload(demo_t *d) {
  return (cddp_ckpt_payload_t){d->w, 2, d->s, 2, d->meta, 2};
}
static void demo_free(demo_t *d) {
  for (int i = 0; i < 4; i++) free(d->buf[i]);
}

static void save_rows(const char *root, int64_t step, int keep, int rows) {
  demo_t d;
  demo_init(&d, step, rows);
  cddp_ckpt_payload_t p = demo_payload(&d);
  CHECK_OK(cddp_ckpt_save(root, step, &p, keep, NULL, 0));
  demo_free(&d);
}
static void save_step(const char *root, int64_t step, int keep) { save_rows(root, step, keep, 4); }

/* Loads dir and checks every value and the step metadata against val(step). */
static void check_content(const char *dir, int64_t step, int rows) {
  cddp_ckpt_t *c;
  CHECK_OK(cddp_ckpt_load(dir, &c));
  const char *names[4] = {"fc1.weight", "fc1.bias", "exp_avg.fc1.weight", "exp_avg.fc1.bias"};
  size_t counts[4] = {(size_t)rows * 1024, 1024, (size_t)rows * 1024, 1024};
  for (int i = 0; i < 4; i++) {
    float *x = malloc(counts[i] * sizeof(float));
    CHECK_OK(cddp_ckpt_tensor(c, i < 2 ? "model" : "state", names[i], x, counts[i]));
    for (size_t j = 0; j < counts[i]; j++)
      if (x[j] != val(step, i, j)) TEST_FAIL("%s: %s[%zu] = %g, expected %g", dir, names[i], j, x[j], val(step, i, j));
    free(x);
  }
  char want[32];
  snprintf(want, sizeof want, "%lld", (long long)step);
  CHECK(cddp_ckpt_meta(c, "trainer.step") && !strcmp(cddp_ckpt_meta(c, "trainer.step"), want));
  CHECK(!strcmp(cddp_ckpt_meta(c, "cddp.step"), want));
  cddp_ckpt_close(c);
}

/* Recomputes MANIFEST from the files as they are (to test what the header checks catch). */
static void rewrite_manifest(const char *dir, int64_t step) {
  char text[1024], path[512];
  int n = snprintf(text, sizeof text, "cddp-checkpoint 1\nstep %lld\n", (long long)step);
  const char *files[2] = {"model.safetensors", "state.safetensors"};
  for (int k = 0; k < 2; k++) {
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, files[k]);
    uint8_t *b = slurp(path, &len);
    n += snprintf(text + n, sizeof text - (size_t)n, "file %s %zu %08lx\n", files[k], len,
                  crc32(crc32(0, NULL, 0), b, (uInt)len));
    free(b);
  }
  n += snprintf(text + n, sizeof text - (size_t)n, "crc32 %08lx\n", crc32(crc32(0, NULL, 0), (const Bytef *)text, (uInt)n));
  snprintf(path, sizeof path, "%s/MANIFEST", dir);
  spit(path, text, (size_t)n);
}

/* Builds a safetensors file from a header string and n data bytes of zeros. */
static uint8_t *make_st(const char *json, size_t data, size_t *len) {
  size_t h = strlen(json);
  *len = 8 + h + data;
  uint8_t *b = calloc(1, *len);
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)h >> (8 * i));
  memcpy(b + 8, json, h);
  return b;
}

static void expect_bad_header(const char *json, size_t data, const char *problem) {
  size_t len;
  uint8_t *b = make_st(json, data, &len);
  cddp__st_file_t f;
  cddp_result_t r = cddp__st_parse("x.safetensors", b, len, &f);
  if (r == CDDP_OK) TEST_FAIL("header %s was accepted", json);
  CHECK_HAS(cddp_last_error(), "x.safetensors: bad header");
  CHECK_HAS(cddp_last_error(), problem);
  free(b);
}

TEST(safetensors_round_trip) {
  char *dir = tmpdir(), path[256];
  snprintf(path, sizeof path, "%s/t.safetensors", dir);
  float a[6] = {1, 2, 3, 4, 5, 6}, s = 42.5f;
  cddp_tensor_view_t t[4] = {{"a/b \"quoted\" \\ é", 2, {2, 3}, a}, {"scalar", 0, {0}, &s},
                             {"empty", 2, {0, 5}, NULL}, {"tail", 1, {2}, a + 4}};
  cddp_meta_kv_t m[2] = {{"note", "line1\nline2\t\"q\" \\ \x01 ünï"}, {"empty", ""}};
  CHECK_OK(cddp_safetensors_write(path, t, 4, m, 2));
  size_t len;
  uint8_t *b = slurp(path, &len);
  cddp__st_file_t f;
  CHECK_OK(cddp__st_parse("t.safetensors", b, len, &f));
  CHECK_EQ(f.header_len % 8, 0);
  CHECK_EQ(f.n, 4);
  CHECK_EQ(f.data_len, 4 * 9);
  CHECK(!strcmp(f.t[0].name, "a/b \"quoted\" \\ é"));
  CHECK_EQ(f.t[0].ndim, 2);
  CHECK_EQ(f.t[0].shape[1], 3);
  CHECK_EQ(f.t[1].ndim, 0);
  CHECK_EQ(f.t[1].count, 1);
  CHECK_EQ(f.t[2].count, 0);
  float got;
  memcpy(&got, f.data + cddp__st_find(&f, "scalar")->begin, 4);
  CHECK_EQ(got, 42.5f);
  memcpy(&got, f.data + cddp__st_find(&f, "tail")->begin + 4, 4);
  CHECK_EQ(got, 6.0f);
  CHECK(!strcmp(cddp__st_meta(&f, "note"), m[0].value));
  CHECK(!strcmp(cddp__st_meta(&f, "empty"), ""));
  CHECK(cddp__st_meta(&f, "absent") == NULL);
  cddp__st_free(&f);
  free(b);
  /* writer refusals: duplicate names, the reserved name, invalid UTF-8 */
  cddp_tensor_view_t dup[2] = {{"x", 1, {1}, a}, {"x", 1, {1}, a}};
  CHECK_RESULT(cddp_safetensors_write(path, dup, 2, NULL, 0), CDDP_INVALID_ARG);
  CHECK_HAS(cddp_last_error(), "'x' appears twice");
  cddp_tensor_view_t res[1] = {{"__metadata__", 1, {1}, a}};
  CHECK_RESULT(cddp_safetensors_write(path, res, 1, NULL, 0), CDDP_INVALID_ARG);
  cddp_tensor_view_t bad8[1] = {{"bad\xff", 1, {1}, a}};
  CHECK_RESULT(cddp_safetensors_write(path, bad8, 1, NULL, 0), CDDP_INVALID_ARG);
  CHECK_HAS(cddp_last_error(), "UTF-8");
  CHECK_RESULT(cddp_safetensors_write("/nonexistent-dir/x.safetensors", t, 1, NULL, 0), CDDP_SYSTEM);
  CHECK_HAS(cddp_last_error(), "cannot write /nonexistent-dir/x.safetensors: create");
}

TEST(safetensors_strict_parser) {
  const char *ok = "{\"__metadata__\":{\"k\":\"v\\u00e9\\ud83d\\ude00\"},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                   "\"a\":{\"shape\":[],\"data_offsets\":[0,4],\"dtype\":\"F32\"}}   ";
  size_t len;
  uint8_t *b = make_st(ok, 8, &len);
  cddp__st_file_t f;
  CHECK_OK(cddp__st_parse("ok.safetensors", b, len, &f));
  CHECK(!strcmp(cddp__st_meta(&f, "k"), "v\xc3\xa9\xf0\x9f\x98\x80"));
  cddp__st_free(&f);
  free(b);
  const char *T = "\"dtype\":\"F32\",\"shape\":[2]";
  char j[512];
  snprintf(j, sizeof j, "{\"a\":{%s,\"data_offsets\":[0,8]},\"b\":{%s,\"data_offsets\":[4,12]}}", T, T);
  expect_bad_header(j, 12, "overlap");
  snprintf(j, sizeof j, "{\"a\":{%s,\"data_offsets\":[0,8]},\"b\":{%s,\"data_offsets\":[12,20]}}", T, T);
  expect_bad_header(j, 20, "hole");
  snprintf(j, sizeof j, "{\"a\":{%s,\"data_offsets\":[0,12]}}", T);
  expect_bad_header(j, 12, "shape needs 8");
  snprintf(j, sizeof j, "{\"a\":{%s,\"data_offsets\":[0,8]}}", T);
  expect_bad_header(j, 16, "cover 8 bytes but the file holds 16");
  expect_bad_header(j, 4, "truncated");
  snprintf(j, sizeof j, "{\"a\":{%s,\"data_offsets\":[8,0]}}", T);
  expect_bad_header(j, 8, "end before they begin");
  expect_bad_header("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "dtype F16");
  snprintf(j, sizeof j, "{\"a\":{%s,\"data_offsets\":[0,8]},\"a\":{%s,\"data_offsets\":[8,16]}}", T, T);
  expect_bad_header(j, 16, "appears twice");
  expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "non-negative integer");
  expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "fraction");
  expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 8, "leading zero");
  expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "lacks data_offsets");
  expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, "unexpected or repeated key");
  expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999,99999999999,99999999999],\"data_offsets\":[0,8]}}", 8, "overflows");
  expect_bad_header("{\"__metadata__\":{\"k\":1}}", 0, "expected '\"'");
  expect_bad_header("{\"__metadata__\":{\"k\":\"\\x\"}}", 0, "bad escape");
  expect_bad_header("{\"__metadata__\":{\"k\":\"\\ud800\"}}", 0, "surrogate");
  expect_bad_header("{\"__metadata__\":{\"k\":\"a\nb\"}}", 0, "control character");
  expect_bad_header("{} x", 0, "trailing bytes");
  expect_bad_header(" {}", 0, "does not start with '{'");
  expect_bad_header("{\"k\":\"\xc3\x28\"}", 0, "UTF-8");
  expect_bad_header("{\"a\":{", 0, "found the end");
  expect_bad_header("{}", 4, "no tensors but 4 data bytes");
  /* header size field past the end of the file, and over the limit */
  uint8_t small[16] = {200, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  CHECK_RESULT(cddp__st_parse("s.safetensors", small, 10, &f), CDDP_INVALID_ARG);
  CHECK_HAS(cddp_last_error(), "runs past the end");
  uint8_t huge[16] = {0, 0, 0, 0, 1, 0, 0, 0, '{', '}'};
  CHECK_RESULT(cddp__st_parse("s.safetensors", huge, 10, &f), CDDP_INVALID_ARG);
  CHECK_HAS(cddp_last_error(), "over the 100000000-byte limit");
  CHECK_RESULT(cddp__st_parse("s.safetensors", small, 5, &f), CDDP_INVALID_ARG);
  CHECK_HAS(cddp_last_error(), "shorter than the 8-byte");
}

TEST(ckpt_round_trip) {
  char *root = tmpdir(), dir[512];
  demo_t d;
  demo_init(&d, 7, 3);
  cddp_ckpt_payload_t p = demo_payload(&d);
  CHECK_OK(cddp_ckpt_save(root, 7, &p, 0, dir, sizeof dir));
  char want[512];
  snprintf(want, sizeof want, "%s/step-000000007", root);
  CHECK(!strcmp(dir, want));
  CHECK_OK(cddp_ckpt_verify(dir));
  check_content(dir, 7, 3);
  cddp_ckpt_t *c;
  CHECK_OK(cddp_ckpt_load(dir, &c));
  CHECK(!strcmp(cddp_ckpt_meta(c, "sampler"), d.meta[1].value));
  CHECK(cddp_ckpt_meta(c, "nope") == NULL);
  float x[8];
  CHECK_RESULT(cddp_ckpt_tensor(c, "model", "fc1.bias", x, 8), CDDP_INVALID_ARG);
  CHECK_HAS(cddp_last_error(), "'fc1.bias' in model.safetensors holds 1024 floats, 8 expected");
  CHECK_RESULT(cddp_ckpt_tensor(c, "model", "fc2.bias", x, 8), CDDP_NOT_FOUND);
  CHECK_HAS(cddp_last_error(), "no tensor 'fc2.bias' in model.safetensors");
  CHECK_RESULT(cddp_ckpt_tensor(c, "optim", "fc1.bias", x, 8), CDDP_INVALID_ARG);
  cddp_ckpt_close(c);
  /* a trainer key that collides with cddp's own is refused, naming it */
  cddp_meta_kv_t clash[1] = {{"cddp.step", "1"}};
  p.meta = clash, p.n_meta = 1;
  CHECK_RESULT(cddp_ckpt_save(root, 8, &p, 0, NULL, 0), CDDP_INVALID_ARG);
  CHECK_HAS(cddp_last_error(), "'cddp.step' appears twice");
  /* the failed save left nothing behind */
  DIR *dd = opendir(root);
  struct dirent *e;
  int entries = 0;
  while ((e = readdir(dd))) entries += e->d_name[0] != '.' || (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."));
  closedir(dd);
  CHECK_EQ(entries, 1);
  /* a root that is a file */
  char file[512];
  snprintf(file, sizeof file, "%s/step-000000007/DONE", root);
  p.n_meta = 0;
  CHECK_RESULT(cddp_ckpt_save(file, 9, &p, 0, NULL, 0), CDDP_INVALID_ARG);
  CHECK_HAS(cddp_last_error(), "step-000000007/DONE is not a directory");
  demo_free(&d);
}

/* Saves a fresh checkpoint, damages it with fn, and checks verify and load name the problem. */
static void corrupt_case(const char *root, int64_t step, void (*fn)(const char *dir), const char *problem) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/step-%09lld", root, (long long)step);
  save_step(root, step, 0);
  CHECK_OK(cddp_ckpt_verify(dir));
  fn(dir);
  CHECK_RESULT(cddp_ckpt_verify(dir), CDDP_INVALID_ARG);
  CHECK_HAS(cddp_last_error(), dir);
  CHECK_HAS(cddp_last_error(), problem);
  cddp_ckpt_t *c = NULL;
  CHECK(cddp_ckpt_load(dir, &c) != CDDP_OK && c == NULL);
  CHECK_HAS(cddp_last_error(), problem);
}

static void truncate_model(const char *dir) {
  char p[600];
  snprintf(p, sizeof p, "%s/model.safetensors", dir);
  CHECK(truncate(p, 1000) == 0);
}
static void flip_state_byte(const char *dir) {
  char p[600];
  snprintf(p, sizeof p, "%s/state.safetensors", dir);
  size_t n;
  uint8_t *b = slurp(p, &n);
  b[n - 100] ^= 0x10;
  spit(p, b, n);
  free(b);
}
static void remove_done(const char *dir) {
  char p[600];
  snprintf(p, sizeof p, "%s/DONE", dir);
  CHECK(unlink(p) == 0);
}
static void garbage_header(const char *dir) {
  char p[600];
  snprintf(p, sizeof p, "%s/model.safetensors", dir);
  size_t n;
  uint8_t *b = slurp(p, &n);
  memcpy(b + 8, "{\"fc1.weight\" [[[", 17);
  spit(p, b, n);
  free(b);
  rewrite_manifest(dir, strtoll(strrchr(dir, '-') + 1, NULL, 10));
}
static void header_past_end(const char *dir) {
  char p[600];
  snprintf(p, sizeof p, "%s/model.safetensors", dir);
  size_t n;
  uint8_t *b = slurp(p, &n);
  b[4] = 1; /* header size + 2^32 */
  spit(p, b, n);
  free(b);
  rewrite_manifest(dir, strtoll(strrchr(dir, '-') + 1, NULL, 10));
}
static void overlap_offsets(const char *dir) {
  /* a well-formed file whose two tensors share bytes, same length as a valid one */
  char p[600];
  snprintf(p, sizeof p, "%s/state.safetensors", dir);
  const char *json = "{\"__metadata__\":{\"cddp.step\":\"5\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
  size_t len;
  uint8_t *b = make_st(json, 12, &len);
  spit(p, b, len);
  free(b);
  rewrite_manifest(dir, 5);
}
static void bad_manifest(const char *dir) {
  char p[600];
  snprintf(p, sizeof p, "%s/MANIFEST", dir);
  size_t n;
  uint8_t *b = slurp(p, &n);
  b[20] ^= 1;
  spit(p, b, n);
  free(b);
}

TEST(ckpt_corrupt_cases) {
  char *root = tmpdir();
  corrupt_case(root, 1, truncate_model, "model.safetensors: 1000 bytes, MANIFEST says");
  corrupt_case(root, 2, flip_state_byte, "state.safetensors: CRC-32");
  corrupt_case(root, 3, remove_done, "is incomplete (no DONE)");
  corrupt_case(root, 4, garbage_header, "model.safetensors: bad header");
  corrupt_case(root, 6, header_past_end, "model.safetensors: bad header: header size 4294967");
  corrupt_case(root, 5, overlap_offsets, "state.safetensors: bad header: tensor 'b': data_offsets [4, 12] overlap");
  corrupt_case(root, 7, bad_manifest, "MANIFEST: CRC-32");
  CHECK_RESULT(cddp_ckpt_verify("/nonexistent/step-000000001"), CDDP_NOT_FOUND);
  CHECK_HAS(cddp_last_error(), "/nonexistent/step-000000001 is missing");
  /* an explicit corrupt path fails to load, even when a good one sits beside it */
  save_step(root, 8, 0);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/step-000000002", root);
  cddp_ckpt_t *c;
  CHECK_RESULT(cddp_ckpt_load(dir, &c), CDDP_INVALID_ARG);
}

/* Runs find_latest with stderr captured; returns the captured text (static). */
static const char *find_latest_capture(const char *root, char *out, size_t cap, cddp_result_t *r) {
  static char text[4096];
  char path[512];
  snprintf(path, sizeof path, "%s.stderr", root);
  fflush(stderr);
  int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(fd, 2);
  *r = cddp_ckpt_find_latest(root, out, cap);
  fflush(stderr);
  dup2(saved, 2);
  close(saved), close(fd);
  size_t n;
  uint8_t *b = slurp(path, &n);
  n = n < sizeof text - 1 ? n : sizeof text - 1;
  memcpy(text, b, n);
  text[n] = '\0';
  free(b);
  unlink(path);
  return text;
}

TEST(ckpt_find_latest_skips_broken) {
  char *root = tmpdir(), out[512], want[512], p[600];
  cddp_result_t r;
  find_latest_capture(root, out, sizeof out, &r);
  CHECK_EQ(r, CDDP_NOT_FOUND);
  CHECK_HAS(cddp_last_error(), "no checkpoint under");
  CHECK_EQ(cddp_ckpt_find_newest(root, out, sizeof out), CDDP_NOT_FOUND);
  for (int s = 100; s <= 300; s += 100) save_step(root, s, 0);
  CHECK_OK(cddp_ckpt_find_latest(root, out, sizeof out));
  snprintf(want, sizeof want, "%s/step-000000300", root);
  CHECK(!strcmp(out, want));
  snprintf(p, sizeof p, "%s/step-000000300/DONE", root);
  CHECK(unlink(p) == 0);
  const char *err = find_latest_capture(root, out, sizeof out, &r);
  CHECK_OK(r);
  snprintf(want, sizeof want, "%s/step-000000200", root);
  CHECK(!strcmp(out, want));
  char msg[700];
  snprintf(msg, sizeof msg, "checkpoint %s/step-000000300 is incomplete (no DONE), using step-000000200", root);
  CHECK_HAS(err, msg);
  snprintf(p, sizeof p, "%s/step-000000200", root);
  flip_state_byte(p);
  err = find_latest_capture(root, out, sizeof out, &r);
  CHECK_OK(r);
  snprintf(want, sizeof want, "%s/step-000000100", root);
  CHECK(!strcmp(out, want));
  CHECK_HAS(err, "step-000000200 is corrupt: state.safetensors: CRC-32");
  CHECK_HAS(err, "using step-000000100");
  CHECK_OK(cddp_ckpt_find_newest(root, out, sizeof out)); /* broken or not: what verify ROOT checks */
  snprintf(want, sizeof want, "%s/step-000000300", root);
  CHECK(!strcmp(out, want));
  snprintf(p, sizeof p, "%s/step-000000100", root);
  truncate_model(p);
  err = find_latest_capture(root, out, sizeof out, &r);
  CHECK_EQ(r, CDDP_NOT_FOUND);
  CHECK_HAS(cddp_last_error(), "no complete checkpoint under");
  CHECK_HAS(cddp_last_error(), "3 broken");
  CHECK_HAS(err, "step-000000100 is corrupt: model.safetensors");
  /* a newer save recovers; non-checkpoint names are ignored */
  snprintf(p, sizeof p, "%s/step-abc", root);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/notes.txt", root);
  spit(p, "x", 1);
  save_step(root, 400, 0);
  CHECK_OK(cddp_ckpt_find_latest(root, out, sizeof out));
  snprintf(want, sizeof want, "%s/step-000000400", root);
  CHECK(!strcmp(out, want));
}

static int count_entries(const char *root, const char *prefix) {
  DIR *d = opendir(root);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) n += !strncmp(e->d_name, prefix, strlen(prefix));
  closedir(d);
  return n;
}

static int exists(const char *root, const char *name) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s", root, name);
  return access(p, F_OK) == 0;
}

TEST(ckpt_keep_prunes_and_replaces) {
  char *root = tmpdir(), p[600];
  for (int s = 1; s <= 5; s++) save_step(root, s, 2);
  CHECK_EQ(count_entries(root, "step-"), 2);
  CHECK(exists(root, "step-000000004") && exists(root, "step-000000005"));
  /* saving the same step again replaces it */
  demo_t d;
  demo_init(&d, 55, 4);
  d.meta[0].value = "5";
  cddp_ckpt_payload_t pl = demo_payload(&d);
  CHECK_OK(cddp_ckpt_save(root, 5, &pl, 2, NULL, 0));
  demo_free(&d);
  snprintf(p, sizeof p, "%s/step-000000005", root);
  cddp_ckpt_t *c;
  CHECK_OK(cddp_ckpt_load(p, &c));
  float x[1024];
  CHECK_OK(cddp_ckpt_tensor(c, "model", "fc1.bias", x, 1024));
  CHECK_EQ(x[0], val(55, 1, 0));
  cddp_ckpt_close(c);
  CHECK_EQ(count_entries(root, "step-"), 2);
  CHECK_EQ(count_entries(root, ".tmp-"), 0);
  /* an incomplete older one goes once enough newer ones exist; a newer one than the save stays */
  snprintf(p, sizeof p, "%s/step-000000003", root);
  mkdir(p, 0755);
  save_step(root, 9, 1);
  save_step(root, 8, 1);
  CHECK(exists(root, "step-000000009") && exists(root, "step-000000008"));
  CHECK_EQ(count_entries(root, "step-"), 2);
  /* keep 0 keeps all */
  save_step(root, 10, 0);
  save_step(root, 11, 0);
  CHECK_EQ(count_entries(root, "step-"), 4);
}

TEST(ckpt_stale_tmp_dirs_removed) {
  char *root = tmpdir(), p[600];
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, NULL, 0);
  snprintf(p, sizeof p, "%s/.tmp-step-000000003-%d", root, (int)pid);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/.tmp-step-000000003-%d/model.safetensors", root, (int)pid);
  spit(p, "partial", 7);
  /* a zombie (dead, not reaped yet: a writer whose agent was killed, before its new parent
   * reaps it) is dead too */
  pid_t zombie = fork();
  if (zombie == 0) _exit(0);
  for (int i = 0; i < 2000 && cddp__proc_state(zombie) != 'Z'; i++) usleep(1000);
  CHECK_EQ(cddp__proc_state(zombie), 'Z');
  snprintf(p, sizeof p, "%s/.tmp-del-step-000000002-%d", root, (int)zombie);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/.tmp-step-000000004-%d", root, (int)getppid()); /* alive: kept */
  mkdir(p, 0755);
  /* names with the writer's host: this host's dead pid goes, another host's directory goes only
   * once it has not changed for 10 minutes (a pid says nothing about another host) */
  char host[65] = "", alive_here[700], fresh_foreign[700], old_foreign[700];
  gethostname(host, sizeof host - 1);
  snprintf(alive_here, sizeof alive_here, "%s/.tmp-step-000000006@%s-%d", root, host, (int)getppid());
  mkdir(alive_here, 0755);
  snprintf(p, sizeof p, "%s/.tmp-step-000000006@%s-%d", root, host, (int)pid); /* dead here */
  mkdir(p, 0755);
  snprintf(fresh_foreign, sizeof fresh_foreign, "%s/.tmp-step-000000007@%s-x-%d", root, host, (int)pid);
  mkdir(fresh_foreign, 0755); /* dead pid on this host, but the host "<host>-x" is another */
  snprintf(old_foreign, sizeof old_foreign, "%s/.tmp-del-step-000000001@other-node-%d", root, (int)getpid());
  mkdir(old_foreign, 0755);
  struct timeval past[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
  CHECK(utimes(old_foreign, past) == 0);
  save_step(root, 5, 0);
  waitpid(zombie, NULL, 0);
  CHECK_EQ(count_entries(root, ".tmp-"), 3);
  CHECK(access(p, F_OK) != 0);
  CHECK(access(old_foreign, F_OK) != 0);
  CHECK(access(fresh_foreign, F_OK) == 0);
  CHECK(access(alive_here, F_OK) == 0);
  snprintf(p, sizeof p, "%s/.tmp-step-000000004-%d", root, (int)getppid());
  CHECK(access(p, F_OK) == 0);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* THE crash test: a child saves checkpoints (4 MiB each) in a loop, each round starting with a
 * re-save of the latest step (the replace path); it writes a byte to a pipe as each save
 * begins. The parent waits for the start of save j (1-3), sleeps a random 0-30 ms (the last
 * 10 rounds: 0 to 1.5 x the measured save time, so kills also land in the rename and pruning
 * at the end of a save) and SIGKILLs it. After every kill the newest step-* must verify, be
 * what find_latest picks, and load with content matching its step. */
TEST_TIMEOUT(ckpt_sigkill_during_saves, 120) {
  char *root = tmpdir(), out[512], want[512];
  const int rows = 512, rounds = 40;
  double t0 = now_ms();
  for (int s = 0; s < 3; s++) save_rows(root, s, 3, rows);
  double save_ms = (now_ms() - t0) / 3;
  int64_t latest = 2;
  unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
  int before_publish = 0, after_publish = 0;
  for (int round = 0; round < rounds; round++) {
    int pfd[2];
    CHECK(pipe(pfd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
      close(pfd[0]);
      for (int64_t s = latest;; s++) {
        demo_t d;
        demo_init(&d, s, rows);
        cddp_ckpt_payload_t p = demo_payload(&d);
        if (write(pfd[1], "s", 1) != 1) _exit(4);
        if (cddp_ckpt_save(root, s, &p, 3, NULL, 0) != CDDP_OK) {
          fprintf(stderr, "child save %lld: %s\n", (long long)s, cddp_last_error());
          _exit(3);
        }
        demo_free(&d);
      }
    }
    close(pfd[1]);
    int j = 1 + (int)(rand_r(&seed) % 3);
    for (int k = 0; k < j; k++) {
      char c;
      if (read(pfd[0], &c, 1) != 1) TEST_FAIL("round %d: the child died before save %d", round, k + 1);
    }
    double max_ms = round < rounds - 10 ? 30 : (save_ms * 1.5 > 30 ? save_ms * 1.5 : 30);
    long delay_us = (long)(rand_r(&seed) % (unsigned)(max_ms * 1000 + 1));
    struct timespec ts = {delay_us / 1000000, (delay_us % 1000000) * 1000};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    int started_n = j; /* saves the child began: a byte each, the rest still in the pipe */
    char drain[256];
    ssize_t got;
    while ((got = read(pfd[0], drain, sizeof drain)) > 0) started_n += (int)got;
    close(pfd[0]);
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)) TEST_FAIL("round %d: child ended with status %d", round, st);
    /* the newest step-* directory itself must be complete: nothing to skip */
    DIR *d = opendir(root);
    struct dirent *e;
    int64_t newest = -1;
    while ((e = readdir(d)))
      if (!strncmp(e->d_name, "step-", 5) && strtoll(e->d_name + 5, NULL, 10) > newest) newest = strtoll(e->d_name + 5, NULL, 10);
    closedir(d);
    CHECK_OK(cddp_ckpt_find_latest(root, out, sizeof out));
    snprintf(want, sizeof want, "%s/step-%09lld", root, (long long)newest);
    if (strcmp(out, want)) TEST_FAIL("round %d: find_latest gave %s, newest dir is %s", round, out, want);
    /* each save returned (durable) before the next began: the newest is the last one begun
     * or the one before it (the first save of a round re-saves `latest`) */
    int64_t last = latest + started_n - 1;
    if (newest != last && newest != (started_n > 1 ? last - 1 : latest))
      TEST_FAIL("round %d: newest step %lld, the save of step %lld was the last begun", round, (long long)newest, (long long)last);
    check_content(out, newest, rows);
    if (started_n > 1) newest == last ? after_publish++ : before_publish++;
    latest = newest;
  }
  fprintf(stderr, "# %d kills (save %.0f ms); reached step %lld; of the kills during a new step's save, %d came before and %d after its rename\n",
          rounds, save_ms, (long long)latest, before_publish, after_publish);
  /* the dead children's temporary directories are cleaned by the next save */
  save_rows(root, latest + 1, 3, rows);
  CHECK_EQ(count_entries(root, ".tmp-"), 0);
  CHECK(count_entries(root, "step-") <= 3);
}

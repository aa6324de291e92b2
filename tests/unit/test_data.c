/* test_data.c - Fashion-MNIST loading: the real files (counts, labels, normalisation, speed)
 * and broken ones (missing, wrong magic, sizes, short, trailing bytes, bad labels). */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "comm/flight.h"
#include "common/clock.h"
#include "test.h"
#include "trainer/data.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int have_fmnist(void) {
  return access(CDDP_FMNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) == 0;
}

static void check_split(const char *split, size_t n_expect, int per_class) {
  cddp_dataset_t d;
  double t0 = now_s();
  CHECK_OK(cddp__dataset_load_fmnist(&d, CDDP_FMNIST_DIR, split));
  double dt = now_s() - t0;
  fprintf(stderr, "# load fmnist %s: %zu images in %.3f s\n", split, d.n, dt);
  CHECK_EQ(d.n, n_expect);
  CHECK_EQ(d.c, 1);
  CHECK_EQ(d.h, 28);
  CHECK_EQ(d.w, 28);
  CHECK_EQ(d.n_classes, 10);
  int hist[10] = {0};
  for (size_t i = 0; i < d.n; i++) hist[d.y[i]]++;
  for (int k = 0; k < 10; k++) CHECK_EQ(hist[k], per_class);
  CHECK_EQ(d.y[0], 9); /* both splits start with an ankle boot */
  /* The normalisation constants are the set's own statistics: mean ~0, std ~1 on train. */
  double s = 0, s2 = 0;
  size_t total = d.n * 784;
  float lo = 1e9f, hi = -1e9f;
  for (size_t i = 0; i < total; i++) {
    s += d.x[i];
    s2 += (double)d.x[i] * d.x[i];
    lo = d.x[i] < lo ? d.x[i] : lo;
    hi = d.x[i] > hi ? d.x[i] : hi;
  }
  double mean = s / total, sd = sqrt(s2 / total - mean * mean);
  fprintf(stderr, "# %s: mean %.5f std %.5f min %.5f max %.5f\n", split, mean, sd, lo, hi);
  CHECK_NEAR(lo, (0.0f - 0.2860f) / 0.3530f, 1e-6);
  CHECK_NEAR(hi, (1.0f - 0.2860f) / 0.3530f, 1e-6);
  if (strcmp(split, "train") == 0) {
    CHECK_NEAR(mean, 0.0, 2e-3);
    CHECK_NEAR(sd, 1.0, 2e-3);
  }
  /* gather copies whole rows and their labels */
  uint32_t idx[3] = {5, 0, (uint32_t)d.n - 1};
  float *x = malloc(3 * 784 * sizeof(float));
  uint8_t y[3];
  cddp__dataset_gather(&d, idx, 3, x, y);
  for (int i = 0; i < 3; i++) {
    CHECK_EQ(y[i], d.y[idx[i]]);
    CHECK(memcmp(x + i * 784, d.x + (size_t)idx[i] * 784, 784 * sizeof(float)) == 0);
  }
  free(x);
  cddp__dataset_free(&d);
  CHECK(d.x == NULL && d.y == NULL && d.n == 0);
}

TEST(fmnist_train_loads) {
  if (!have_fmnist()) TEST_FAIL("Fashion-MNIST missing: apt-get install dataset-fashion-mnist");
  check_split("train", 60000, 6000);
}

TEST(fmnist_test_loads) {
  if (!have_fmnist()) TEST_FAIL("Fashion-MNIST missing: apt-get install dataset-fashion-mnist");
  check_split("test", 10000, 1000);
}

/* decompressing beats the flight page as it goes (one beat per 64 KiB of pixels): on a loaded
 * host it takes seconds while the peers wait, and the agent's watchdog took it for a hang */
TEST(loading_beats_the_watchdog) {
  if (!have_fmnist()) TEST_FAIL("Fashion-MNIST missing: apt-get install dataset-fashion-mnist");
  const cddp__flight_page_t *p = cddp__flight_page();
  CHECK(p != NULL);
  setenv("CDDP_DATA_CACHE", "off", 1); /* the decompression itself, not a cached copy */
  uint64_t before = __atomic_load_n(&p->beat, __ATOMIC_ACQUIRE);
  check_split("test", 10000, 1000); /* 7,840,000 bytes of pixels: 120 chunks */
  uint64_t beats = __atomic_load_n(&p->beat, __ATOMIC_ACQUIRE) - before;
  unsetenv("CDDP_DATA_CACHE");
  CHECK(beats >= 100);
}

/* the helper that beats for a call that cannot: beats every beat_ms, stops when told or at max_ms */
TEST(alive_helper_beats_until_stopped_or_its_limit) {
  const cddp__flight_page_t *p = cddp__flight_page();
  CHECK(p != NULL);
  uint64_t b0 = __atomic_load_n(&p->beat, __ATOMIC_ACQUIRE), t0 = cddp__now_ns();
  cddp__alive_t *a = cddp__alive_start(20, 60000);
  CHECK(a != NULL);
  usleep(300 * 1000);
  cddp__alive_stop(a);
  uint64_t b1 = __atomic_load_n(&p->beat, __ATOMIC_ACQUIRE), ms = (cddp__now_ns() - t0) / 1000000;
  fprintf(stderr, "# %llu beats in %llu ms at 20 ms\n", (unsigned long long)(b1 - b0), (unsigned long long)ms);
  CHECK(b1 - b0 >= 3 && b1 - b0 <= ms / 20 + 2);
  usleep(100 * 1000);
  CHECK_EQ(__atomic_load_n(&p->beat, __ATOMIC_ACQUIRE), b1); /* stopped: no more */
  a = cddp__alive_start(20, 100); /* a call stuck past max_ms is left to the watchdog */
  CHECK(a != NULL);
  usleep(400 * 1000);
  uint64_t b2 = __atomic_load_n(&p->beat, __ATOMIC_ACQUIRE);
  usleep(100 * 1000);
  CHECK_EQ(__atomic_load_n(&p->beat, __ATOMIC_ACQUIRE), b2);
  CHECK(b2 - b1 >= 1 && b2 - b1 <= 6);
  cddp__alive_stop(a);
}

/* ---- synthetic files: a temporary directory per test */

static char tmpdir[128];
static void make_tmpdir(void) { /* a new one at each call, in the test's own folder (test.h) */
  cddp_test_path(tmpdir, sizeof tmpdir, "data.XXXXXX");
  CHECK(mkdtemp(tmpdir) != NULL);
}

static void put32(unsigned char *b, uint32_t v) {
  b[0] = v >> 24, b[1] = v >> 16, b[2] = v >> 8, b[3] = v;
}

/* Writes name (gzip when gz, plain otherwise) with a header and payload bytes. */
static void write_file(const char *name, int gz, const uint32_t *hdr, int nhdr,
                       const unsigned char *payload, size_t len) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s%s", tmpdir, name, gz ? ".gz" : "");
  unsigned char h[16];
  for (int i = 0; i < nhdr; i++) put32(h + 4 * i, hdr[i]);
  if (gz) {
    gzFile f = gzopen(path, "wb");
    CHECK(f != NULL);
    CHECK(gzwrite(f, h, 4 * nhdr) == 4 * nhdr);
    if (len) CHECK(gzwrite(f, payload, (unsigned)len) == (int)len);
    CHECK(gzclose(f) == Z_OK);
  } else {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(h, 4, nhdr, f) == (size_t)nhdr);
    if (len) CHECK(fwrite(payload, 1, len, f) == len);
    CHECK(fclose(f) == 0);
  }
}

enum { NSYN = 7 };
static unsigned char pixels[NSYN * 784 + 10], labels[NSYN + 10];

/* A valid small split "train" (NSYN samples); then the caller breaks one thing. */
static void write_good(int gz) {
  uint32_t r = 12345;
  for (size_t i = 0; i < sizeof pixels; i++) { /* incompressible enough to corrupt mid-stream */
    r = r * 1103515245u + 12345u;
    pixels[i] = (unsigned char)(r >> 24);
  }
  for (int i = 0; i < NSYN + 10; i++) labels[i] = (unsigned char)(i % 10);
  uint32_t lh[2] = {0x801, NSYN}, ih[4] = {0x803, NSYN, 28, 28};
  write_file("train-labels-idx1-ubyte", gz, lh, 2, labels, NSYN);
  write_file("train-images-idx3-ubyte", gz, ih, 4, pixels, NSYN * 784);
}

/* Loads "train" from tmpdir expecting failure whose message contains all of want[]. */
static void expect_fail(const char *want1, const char *want2) {
  cddp_dataset_t d;
  cddp_result_t r = cddp__dataset_load_fmnist(&d, tmpdir, "train");
  const char *msg = cddp_last_error();
  fprintf(stderr, "# error: %s\n", msg);
  if (r == CDDP_OK) TEST_FAIL("load succeeded, expected an error with '%s'", want1);
  if (strchr(msg, '\n')) TEST_FAIL("error is not one line: %s", msg);
  if (want1 && !strstr(msg, want1)) TEST_FAIL("error '%s' lacks '%s'", msg, want1);
  if (want2 && !strstr(msg, want2)) TEST_FAIL("error '%s' lacks '%s'", msg, want2);
  CHECK(d.x == NULL && d.y == NULL);
}

TEST(synthetic_gz_and_plain_load_exact_values) {
  for (int gz = 0; gz <= 1; gz++) {
    make_tmpdir();
    write_good(gz);
    cddp_dataset_t d;
    CHECK_OK(cddp__dataset_load_fmnist(&d, tmpdir, "train"));
    CHECK_EQ(d.n, NSYN);
    for (int i = 0; i < NSYN * 784; i++) {
      float want = ((float)pixels[i] / 255.0f - 0.2860f) / 0.3530f;
      if (d.x[i] != want) TEST_FAIL("pixel %d: %.9g != %.9g", i, d.x[i], want);
    }
    for (int i = 0; i < NSYN; i++) CHECK_EQ(d.y[i], i % 10);
    cddp__dataset_free(&d);
  }
}

TEST(missing_directory_and_files_say_install) {
  cddp_dataset_t d;
  CHECK(cddp__dataset_load_fmnist(&d, "/nonexistent/fmnist", "train") != CDDP_OK);
  CHECK(strstr(cddp_last_error(), "/nonexistent/fmnist") != NULL);
  CHECK(strstr(cddp_last_error(), "install dataset-fashion-mnist") != NULL);
  make_tmpdir();
  expect_fail("train-labels-idx1-ubyte.gz not found", "install dataset-fashion-mnist");
  write_good(1);
  char path[256];
  snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", tmpdir);
  CHECK(unlink(path) == 0);
  expect_fail("train-images-idx3-ubyte.gz not found", "install dataset-fashion-mnist");
  CHECK(cddp__dataset_load_fmnist(&d, tmpdir, "validation") == CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "validation") != NULL);
}

TEST(wrong_magic_and_dims) {
  make_tmpdir();
  write_good(1);
  uint32_t bad[4] = {0x802, NSYN, 28, 28};
  write_file("train-images-idx3-ubyte", 1, bad, 4, pixels, NSYN * 784);
  expect_fail("train-images-idx3-ubyte.gz: wrong magic 0x00000802", "0x00000803");
  write_good(1);
  uint32_t lbad[2] = {0x803, NSYN};
  write_file("train-labels-idx1-ubyte", 1, lbad, 2, labels, NSYN);
  expect_fail("train-labels-idx1-ubyte.gz: wrong magic", "0x00000801");
  write_good(1);
  uint32_t dims[4] = {0x803, NSYN, 32, 24};
  write_file("train-images-idx3-ubyte", 1, dims, 4, pixels, NSYN * 784);
  expect_fail("images are 32x24, expected 28x28", NULL);
}

TEST(short_trailing_mismatch_and_labels) {
  make_tmpdir();
  for (int gz = 0; gz <= 1; gz++) {
    uint32_t ih[4] = {0x803, NSYN, 28, 28}, lh[2] = {0x801, NSYN};
    write_good(gz);
    write_file("train-images-idx3-ubyte", gz, ih, 4, pixels, NSYN * 784 - 100);
    expect_fail("short file", "5388 of 5488");
    write_good(gz);
    write_file("train-images-idx3-ubyte", gz, ih, 4, pixels, NSYN * 784 + 3);
    expect_fail("train-images-idx3-ubyte", "trailing bytes");
    write_good(gz);
    write_file("train-labels-idx1-ubyte", gz, lh, 2, labels, NSYN + 1);
    expect_fail("train-labels-idx1-ubyte", "trailing bytes");
    write_good(gz);
    write_file("train-labels-idx1-ubyte", gz, lh, 1, labels, 0); /* header cut */
    expect_fail("short file: the header has 4 of 8 bytes", NULL);
    write_good(gz);
    uint32_t lh6[2] = {0x801, NSYN - 1};
    write_file("train-labels-idx1-ubyte", gz, lh6, 2, labels, NSYN - 1);
    expect_fail("has 7 images but", "has 6 labels");
    write_good(gz);
    labels[3] = 10;
    write_file("train-labels-idx1-ubyte", gz, lh, 2, labels, NSYN);
    expect_fail("label 10 of sample 3 is out of range 0..9", NULL);
    make_tmpdir(); /* an empty folder for the next round: neither variant left */
  }
}

TEST(corrupt_gzip_is_reported) {
  make_tmpdir();
  write_good(1);
  char path[256];
  snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", tmpdir);
  FILE *f = fopen(path, "r+b");
  CHECK(f != NULL);
  CHECK(fseek(f, 0, SEEK_END) == 0);
  long size = ftell(f);
  CHECK(size > 2000);
  CHECK(fseek(f, size / 2, SEEK_SET) == 0);
  unsigned char junk[64];
  memset(junk, 0xA5, sizeof junk);
  CHECK(fwrite(junk, 1, sizeof junk, f) == sizeof junk);
  CHECK(fclose(f) == 0);
  expect_fail("train-images-idx3-ubyte.gz", NULL);
}

/* CDDP_DATA_CACHE: the second load maps the first one's bytes; a damaged or foreign entry
 * is ignored (and rewritten); "off" never maps; a directory others may write is not used. */
TEST(cache_maps_the_same_bytes_and_ignores_a_bad_entry) {
  if (!have_fmnist()) TEST_FAIL("Fashion-MNIST missing: apt-get install dataset-fashion-mnist");
  make_tmpdir();
  cddp_dataset_t ref, d;
  setenv("CDDP_DATA_CACHE", "off", 1);
  CHECK_OK(cddp__dataset_load_fmnist(&ref, CDDP_FMNIST_DIR, "test"));
  CHECK(ref.map == NULL);
  setenv("CDDP_DATA_CACHE", tmpdir, 1);
  CHECK(chmod(tmpdir, 0700) == 0);
  for (int round = 0; round < 4; round++) {
    /* 0: writes the entry; 1: maps it; 2: entry truncated -> loaded, rewritten; 3: maps again */
    CHECK_OK(cddp__dataset_load_fmnist(&d, CDDP_FMNIST_DIR, "test"));
    CHECK((d.map != NULL) == (round == 1 || round == 3));
    CHECK_EQ(d.n, ref.n);
    CHECK_EQ(d.n_classes, 10);
    CHECK(memcmp(d.x, ref.x, ref.n * 784 * sizeof(float)) == 0);
    CHECK(memcmp(d.y, ref.y, ref.n) == 0);
    cddp__dataset_free(&d);
    CHECK(d.x == NULL && d.map == NULL);
    if (round == 1) {
      char pattern[200]; /* every entry of the cache one byte short */
      snprintf(pattern, sizeof pattern, "%s/fmnist-t10k-*.bin", tmpdir);
      glob_t g;
      CHECK(glob(pattern, 0, NULL, &g) == 0);
      for (size_t i = 0; i < g.gl_pathc; i++) {
        struct stat st;
        CHECK(stat(g.gl_pathv[i], &st) == 0 && st.st_size > 0 && truncate(g.gl_pathv[i], st.st_size - 1) == 0);
      }
      globfree(&g);
    }
  }
  /* writing the entry beats the watchdog's page from a helper: on a busy disk the write and the
   * fsync of the train split's 188 MB took seconds, and a peer's watchdog judged rank 0 hung */
  const cddp__flight_page_t *p = cddp__flight_page();
  char img[256], lbl[256];
  struct stat si, sl;
  snprintf(img, sizeof img, "%s/t10k-images-idx3-ubyte.gz", CDDP_FMNIST_DIR);
  snprintf(lbl, sizeof lbl, "%s/t10k-labels-idx1-ubyte.gz", CDDP_FMNIST_DIR);
  CHECK(stat(img, &si) == 0 && stat(lbl, &sl) == 0);
  uint64_t before = __atomic_load_n(&p->beat, __ATOMIC_ACQUIRE);
  cddp__data_cache_save(&ref, "t10k", img, &si, lbl, &sl);
  CHECK(__atomic_load_n(&p->beat, __ATOMIC_ACQUIRE) > before);
  CHECK(chmod(tmpdir, 0777) == 0); /* others could plant an entry: not used */
  CHECK_OK(cddp__dataset_load_fmnist(&d, CDDP_FMNIST_DIR, "test"));
  CHECK(d.map == NULL);
  cddp__dataset_free(&d);
  cddp__dataset_free(&ref);
  unsetenv("CDDP_DATA_CACHE");
}

/* data.c - Fashion-MNIST IDX files (gzip or plain, read through zlib), validated and normalised;
 * a second load maps the decompressed set from the cache (data_cache.c). */
#include "trainer/data.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <zlib.h>

#include "cddp/comm.h"
#include "common/check.h"

#define IDX_MAGIC_IMAGES 0x00000803u /* unsigned byte, 3 dimensions */
#define IDX_MAGIC_LABELS 0x00000801u /* unsigned byte, 1 dimension */
#define FMNIST_SIDE 28
#define FMNIST_CLASSES 10
#define FMNIST_MEAN 0.2860f
#define FMNIST_STD 0.3530f
#define INSTALL_HINT "install dataset-fashion-mnist (apt-get install dataset-fashion-mnist)"

typedef struct idx_file {
  gzFile gz;
  char path[PATH_MAX];
  struct stat st;
} idx_file_t;

static uint32_t be32(const unsigned char *b) {
  return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

/* Opens dir/name.gz, or dir/name when only the uncompressed file is there. zlib reads
 * either transparently, so a plain file under the .gz name works too. */
static cddp_result_t idx_open(idx_file_t *f, const char *dir, const char *name) {
  struct stat st;
  f->gz = NULL;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return cddp__fail(CDDP_NOT_FOUND, "data set directory %s not found: " INSTALL_HINT, dir);
  snprintf(f->path, sizeof f->path, "%s/%s.gz", dir, name);
  if (stat(f->path, &st) != 0) {
    snprintf(f->path, sizeof f->path, "%s/%s", dir, name);
    if (stat(f->path, &st) != 0)
      return cddp__fail(CDDP_NOT_FOUND, "%s/%s.gz not found (nor %s): " INSTALL_HINT, dir,
                        name, f->path);
  }
  if (!S_ISREG(st.st_mode)) return cddp__fail(CDDP_INVALID_ARG, "%s: not a regular file", f->path);
  f->st = st;
  f->gz = gzopen(f->path, "rb");
  if (!f->gz) return cddp__fail_errno(CDDP_SYSTEM, "open %s", f->path);
  gzbuffer(f->gz, 1u << 18);
  return CDDP_OK;
}

static void idx_close(idx_file_t *f) {
  if (f->gz) gzclose(f->gz);
  f->gz = NULL;
}

/* zlib's message without the "path: " it puts in front. */
static const char *zmsg(const idx_file_t *f, const char *msg) {
  size_t n = strlen(f->path);
  if (strncmp(msg, f->path, n) == 0 && msg[n] == ':') msg += n + 1 + (msg[n + 1] == ' ');
  return msg;
}

/* Reads exactly len bytes; what = which part, for the message, whose whole size is
 * `whole` bytes of which `base` were read before this call. */
static cddp_result_t idx_read(idx_file_t *f, void *buf, size_t len, const char *what,
                              size_t base, size_t whole) {
  unsigned char *p = buf;
  size_t got = 0;
  while (got < len) {
    size_t want = CDDP_MIN(len - got, (size_t)1 << 30);
    int r = gzread(f->gz, p + got, (unsigned)want);
    if (r < 0) {
      int zerr;
      const char *msg = gzerror(f->gz, &zerr);
      return cddp__fail(CDDP_INVALID_ARG, "%s: corrupt gzip data (reading %s): %s", f->path,
                        what, zmsg(f, msg));
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  if (got < len)
    return cddp__fail(CDDP_INVALID_ARG, "%s: short file: %s has %zu of %zu bytes", f->path, what,
                      base + got, whole);
  return CDDP_OK;
}

/* After the payload: the file must end here (a read past it also checks the gzip CRC). */
static cddp_result_t idx_expect_end(idx_file_t *f, size_t payload) {
  unsigned char extra[64];
  int r = gzread(f->gz, extra, sizeof extra);
  if (r < 0) {
    int zerr;
    const char *msg = gzerror(f->gz, &zerr);
    return cddp__fail(CDDP_INVALID_ARG, "%s: corrupt gzip data at the end: %s", f->path,
                      zmsg(f, msg));
  }
  if (r > 0)
    return cddp__fail(CDDP_INVALID_ARG,
                      "%s: trailing bytes after the %zu bytes the header announces", f->path,
                      payload);
  return CDDP_OK;
}

static cddp_result_t read_header(idx_file_t *f, uint32_t magic, const char *kind, int ndims,
                                 uint32_t *dims) {
  unsigned char hdr[16];
  size_t len = 4 + 4 * (size_t)ndims;
  CDDP_CHECK(idx_read(f, hdr, len, "the header", 0, len));
  uint32_t m = be32(hdr);
  if (m != magic)
    return cddp__fail(CDDP_INVALID_ARG, "%s: wrong magic 0x%08x (an IDX %s file has 0x%08x)",
                      f->path, m, kind, magic);
  for (int i = 0; i < ndims; i++) dims[i] = be32(hdr + 4 + 4 * i);
  return CDDP_OK;
}

static cddp_result_t load_labels(cddp_dataset_t *d, idx_file_t *f) {
  uint32_t n;
  CDDP_CHECK(read_header(f, IDX_MAGIC_LABELS, "labels", 1, &n));
  if (n == 0) return cddp__fail(CDDP_INVALID_ARG, "%s: the header says 0 labels", f->path);
  d->y = malloc(n);
  if (!d->y) return cddp__fail(CDDP_SYSTEM, "%s: out of memory for %u labels", f->path, n);
  d->n = n;
  CDDP_CHECK(idx_read(f, d->y, n, "the labels", 0, n));
  CDDP_CHECK(idx_expect_end(f, 8 + (size_t)n));
  for (uint32_t i = 0; i < n; i++)
    if (d->y[i] >= FMNIST_CLASSES)
      return cddp__fail(CDDP_INVALID_ARG, "%s: label %u of sample %u is out of range 0..%d",
                        f->path, d->y[i], i, FMNIST_CLASSES - 1);
  return CDDP_OK;
}

static cddp_result_t load_images(cddp_dataset_t *d, idx_file_t *f, const char *labels_path) {
  uint32_t dims[3];
  CDDP_CHECK(read_header(f, IDX_MAGIC_IMAGES, "images", 3, dims));
  if (dims[1] != FMNIST_SIDE || dims[2] != FMNIST_SIDE)
    return cddp__fail(CDDP_INVALID_ARG, "%s: images are %ux%u, expected %dx%d", f->path, dims[1],
                      dims[2], FMNIST_SIDE, FMNIST_SIDE);
  if (dims[0] != d->n)
    return cddp__fail(CDDP_INVALID_ARG, "%s has %u images but %s has %zu labels", f->path,
                      dims[0], labels_path, d->n);
  const size_t row = (size_t)FMNIST_SIDE * FMNIST_SIDE, total = d->n * row;
  d->x = malloc(total * sizeof(float)); /* plain pages: THP measured slower, docs/data.md */
  if (!d->x) return cddp__fail(CDDP_SYSTEM, "%s: out of memory for %zu images", f->path, d->n);
  /* Same float32 operations as torchvision's ToTensor + Normalize: (p / 255 - mean) / std. */
  float lut[256];
  for (int p = 0; p < 256; p++) lut[p] = ((float)p / 255.0f - FMNIST_MEAN) / FMNIST_STD;
  /* Decompress in cache-sized chunks and expand each through the table. */
  enum { CHUNK = 1 << 16 };
  unsigned char *buf = malloc(CHUNK);
  if (!buf) return cddp__fail(CDDP_SYSTEM, "%s: out of memory", f->path);
  cddp_result_t ret = CDDP_OK;
  size_t done = 0;
  while (done < total) {
    size_t len = CDDP_MIN(total - done, (size_t)CHUNK);
    ret = idx_read(f, buf, len, "the pixel data", done, total);
    if (ret != CDDP_OK) break;
    float *out = d->x + done;
    for (size_t i = 0; i < len; i++) out[i] = lut[buf[i]];
    done += len;
    cddp_progress_alive(); /* decompressing is work: on a loaded host it takes seconds while the
                              peers wait at the next collective, and the watchdog must not judge it */
  }
  free(buf);
  if (ret == CDDP_OK) ret = idx_expect_end(f, 16 + total);
  return ret;
}

cddp_result_t cddp__dataset_load_fmnist(cddp_dataset_t *d, const char *dir, const char *split) {
  memset(d, 0, sizeof *d);
  const char *prefix;
  if (!split || strcmp(split, "train") == 0)
    prefix = "train";
  else if (strcmp(split, "test") == 0 || strcmp(split, "t10k") == 0)
    prefix = "t10k";
  else
    return cddp__fail(CDDP_INVALID_ARG, "data split '%s': expected train or test", split);
  if (!dir || !*dir) dir = CDDP_FMNIST_DIR;
  char name[64];
  idx_file_t lf = {0}, imf = {0};
  cddp_result_t ret;
  snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
  CDDP_CHECK_GOTO(idx_open(&lf, dir, name), ret, fail);
  snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
  CDDP_CHECK_GOTO(idx_open(&imf, dir, name), ret, fail);
  if (cddp__data_cache_load(d, prefix, imf.path, &imf.st, lf.path, &lf.st)) goto exit;
  CDDP_CHECK_GOTO(load_labels(d, &lf), ret, fail);
  CDDP_CHECK_GOTO(load_images(d, &imf, lf.path), ret, fail);
  d->c = 1;
  d->h = d->w = FMNIST_SIDE;
  d->n_classes = FMNIST_CLASSES;
  cddp__data_cache_save(d, prefix, imf.path, &imf.st, lf.path, &lf.st);
exit:
  idx_close(&imf);
  idx_close(&lf);
  return ret;
fail:
  cddp__dataset_free(d);
  goto exit;
}

void cddp__dataset_free(cddp_dataset_t *d) {
  if (!d) return;
  if (d->map) {
    munmap(d->map, d->map_len);
  } else {
    free(d->x);
    free(d->y);
  }
  memset(d, 0, sizeof *d);
}

void cddp__dataset_gather(const cddp_dataset_t *d, const uint32_t *idx, int n, float *x,
                         uint8_t *y) {
  const size_t row = (size_t)d->c * d->h * d->w;
  for (int i = 0; i < n; i++) {
    if (x) memcpy(x + (size_t)i * row, d->x + (size_t)idx[i] * row, row * sizeof(float));
    if (y) y[i] = d->y[idx[i]];
  }
}

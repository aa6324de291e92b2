/* data_cache.c - a decompressed data set kept on disk (CDDP_DATA_CACHE) and mapped read-only by
 * later loads: a replacement worker starts without unzipping, and the ranks of a host share the
 * pages. Keyed by the source files' paths, devices, inodes, sizes and mtimes; written to a
 * temporary file, fsynced and renamed (common/durable.c), so a reader sees a whole file or none. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/flight.h"
#include "common/check.h"
#include "common/durable.h"
#include "common/io.h"
#include "common/knobs.h"
#include "common/log.h"
#include "trainer/data.h"

#define CACHE_MAGIC "CDDPDS1\n" /* the layout and the normalisation (data.c's mean, std) */
#define HDR_BYTES 4096          /* header page; the floats start on the next one */
#define MIN_BYTES (4u << 20)    /* smaller sets load fast enough: not cached */
#define STALE_S 120             /* a .tmp this old is a writer that died: taken over */
#define BEAT_MS 500             /* the watchdog's pass; its shortest --hang-timeout is seconds */

typedef struct cache_hdr {
  char magic[8];
  uint64_t n;
  uint32_t c, h, w, n_classes;
  uint32_t key_len;
  char key[HDR_BYTES - 8 - 8 - 16 - 4];
} cache_hdr_t;

_Static_assert(sizeof(cache_hdr_t) == HDR_BYTES, "cache header is one page");

static uint64_t fnv1a(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

/* The cache directory, created 0700 and owned by us; 0 when caching is off or unsafe. */
static int cache_dir(char *dir, size_t size) {
  const char *v = cddp__knob_str(CDDP_KNOB_DATA_CACHE);
  if (!strcmp(v, "off") || !strcmp(v, "0")) return 0;
  if (*v) {
    snprintf(dir, size, "%s", v);
  } else {
    snprintf(dir, size, "%s/cddp-cache-%u", cddp__tmp_base(), (unsigned)geteuid());
  }
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    CDDP_INFO(CDDP_SUB_TRAIN, "data cache %s: cannot create it (%s): not cached", dir, strerror(errno));
    return 0;
  }
  struct stat st;
  if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022)) {
    CDDP_INFO(CDDP_SUB_TRAIN, "data cache %s: not a directory of ours that only we can write: not cached", dir);
    return 0;
  }
  return 1;
}

/* key: what the cache entry stands for; path: where it lives. 0 when not cacheable. */
static int entry(const char *split, const char *images, const struct stat *si, const char *labels,
                 const struct stat *sl, char *key, size_t key_size, char *path, size_t path_size) {
  char ri[PATH_MAX], rl[PATH_MAX], dir[PATH_MAX];
  if (!realpath(images, ri) || !realpath(labels, rl)) return 0;
  int n = snprintf(key, key_size, "%s|%s %llu %llu %lld %lld.%09ld|%s %llu %llu %lld %lld.%09ld", split, ri,
                   (unsigned long long)si->st_dev, (unsigned long long)si->st_ino, (long long)si->st_size,
                   (long long)si->st_mtim.tv_sec, si->st_mtim.tv_nsec, rl, (unsigned long long)sl->st_dev,
                   (unsigned long long)sl->st_ino, (long long)sl->st_size, (long long)sl->st_mtim.tv_sec,
                   sl->st_mtim.tv_nsec);
  if (n < 0 || (size_t)n >= key_size || !cache_dir(dir, sizeof dir)) return 0;
  n = snprintf(path, path_size, "%s/fmnist-%s-%016llx.bin", dir, split, (unsigned long long)fnv1a(key, strlen(key)));
  return n > 0 && (size_t)n < path_size;
}

static size_t entry_bytes(const cache_hdr_t *h) {
  return HDR_BYTES + (size_t)h->n * h->c * h->h * h->w * sizeof(float) + (size_t)h->n;
}

int cddp__data_cache_load(cddp_dataset_t *d, const char *split, const char *images, const struct stat *si,
                          const char *labels, const struct stat *sl) {
  char key[sizeof ((cache_hdr_t *)0)->key], path[PATH_MAX];
  if (!entry(split, images, si, labels, sl, key, sizeof key, path, sizeof path)) return 0;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return 0;
  cache_hdr_t h;
  struct stat st;
  void *map = MAP_FAILED;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
      pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h && !memcmp(h.magic, CACHE_MAGIC, 8) &&
      h.key_len == strlen(key) && !memcmp(h.key, key, h.key_len) && h.n > 0 && h.c == 1 && h.h == 28 &&
      h.w == 28 && (off_t)entry_bytes(&h) == st.st_size)
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    CDDP_INFO(CDDP_SUB_TRAIN, "data cache %s: unusable (other source, size or owner): loading %s", path, images);
    return 0;
  }
  memset(d, 0, sizeof *d);
  d->n = h.n, d->c = (int)h.c, d->h = (int)h.h, d->w = (int)h.w, d->n_classes = (int)h.n_classes;
  d->x = (float *)((char *)map + HDR_BYTES);
  d->y = (uint8_t *)(d->x + d->n * (size_t)(d->c * d->h * d->w));
  d->map = map, d->map_len = (size_t)st.st_size;
  CDDP_INFO(CDDP_SUB_TRAIN, "data: %s split mapped from the cache %s", split, path);
  return 1;
}

void cddp__data_cache_save(const cddp_dataset_t *d, const char *split, const char *images, const struct stat *si,
                           const char *labels, const struct stat *sl) {
  size_t floats = d->n * (size_t)(d->c * d->h * d->w) * sizeof(float);
  if (floats < MIN_BYTES) return;
  cache_hdr_t *h = calloc(1, sizeof *h);
  char path[PATH_MAX];
  if (!h || !entry(split, images, si, labels, sl, h->key, sizeof h->key, path, sizeof path)) {
    free(h);
    return;
  }
  memcpy(h->magic, CACHE_MAGIC, 8);
  h->n = d->n, h->c = (uint32_t)d->c, h->h = (uint32_t)d->h, h->w = (uint32_t)d->w;
  h->n_classes = (uint32_t)d->n_classes, h->key_len = (uint32_t)strlen(h->key);
  /* PATH.tmp is also the lock: one writer at a time; a dead writer's is taken over */
  cddp__durable_t f;
  if (cddp__durable_open_locked(&f, path, 0600, STALE_S) != CDDP_OK) { /* another rank is writing it, or read-only */
    free(h);
    return;
  }
  /* 188 MB written and fsynced in calls that cannot beat, seconds on a busy disk while the peers
   * wait at the next collective: a helper beats meanwhile, or the watchdog takes it for a hang */
  cddp__alive_t *alive = cddp__alive_start(BEAT_MS, STALE_S * 1000);
  cddp_result_t r = cddp__durable_write(&f, h, sizeof *h);
  if (r == CDDP_OK) r = cddp__durable_write(&f, d->x, floats);
  if (r == CDDP_OK) r = cddp__durable_write(&f, d->y, d->n);
  if (r == CDDP_OK) r = cddp__durable_commit(&f);
  else cddp__durable_abort(&f);
  cddp__alive_stop(alive);
  if (r != CDDP_OK) CDDP_INFO(CDDP_SUB_TRAIN, "data cache: %s: not cached", cddp_last_error());
  else CDDP_INFO(CDDP_SUB_TRAIN, "data: %s split cached in %s", split, path);
  free(h);
}

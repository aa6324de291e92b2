/* store_file.c - a store in one file shared by processes on a host: flock on PATH.lock, the
 * whole table rewritten durably (tmp file, fsync, rename, fsync the folder); get/wait poll
 * with short sleeps. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/durable.h"
#include "store/store_internal.h"
#include "store/wire.h"

/* File layout: "CDDPSTORE1\n", u32 count, then count records [u32 klen][u32 vlen][key][value],
 * integers little-endian. */
static const char file_magic[] = "CDDPSTORE1\n";
#define POLL_US 2000

typedef struct file_store {
  cddp_store_t base;
  pthread_mutex_t mu; /* flock is per open file: threads sharing this handle take mu too */
  int lockfd;
  char *path, *lockpath;
} file_store_t;

#define F(s) ((file_store_t *)(s))

static cddp_result_t lock(file_store_t *f, int how) {
  pthread_mutex_lock(&f->mu);
  while (flock(f->lockfd, how) != 0) {
    if (errno == EINTR) continue;
    pthread_mutex_unlock(&f->mu);
    return cddp__fail_errno(CDDP_SYSTEM, "store file: flock %s", f->lockpath);
  }
  return CDDP_OK;
}

static void unlock(file_store_t *f) {
  flock(f->lockfd, LOCK_UN);
  pthread_mutex_unlock(&f->mu);
}

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads the whole table into kv (empty when the file does not exist yet). Call locked. */
static cddp_result_t load(file_store_t *f, cddp__kv_t *kv) {
  cddp__kv_init(kv);
  FILE *fp = fopen(f->path, "rb");
  if (!fp) {
    if (errno == ENOENT) return CDDP_OK;
    return cddp__fail_errno(CDDP_SYSTEM, "store file: open %s", f->path);
  }
  cddp_result_t r = CDDP_OK;
  uint8_t *buf = NULL;
  struct stat st;
  if (fstat(fileno(fp), &st) != 0) {
    r = cddp__fail_errno(CDDP_SYSTEM, "store file: stat %s", f->path);
    goto out;
  }
  size_t n = (size_t)st.st_size;
  if (n == 0) goto out; /* created empty */
  if (!(buf = malloc(n)) || fread(buf, 1, n, fp) != n) {
    r = cddp__fail(CDDP_SYSTEM, "store file: cannot read %s (%zu bytes)", f->path, n);
    goto out;
  }
  size_t ml = sizeof file_magic - 1, off = ml + 4;
  if (n < off || memcmp(buf, file_magic, ml) != 0) {
    r = cddp__fail(CDDP_INVALID_ARG, "store file %s: not a cddp store file", f->path);
    goto out;
  }
  uint32_t count = rd32(buf + ml);
  for (uint32_t i = 0; i < count && r == CDDP_OK; i++) {
    if (n - off < 8) break;
    uint32_t kl = rd32(buf + off), vl = rd32(buf + off + 4);
    off += 8;
    if (kl > CDDP_STORE_MAX_KEY || vl > CDDP_STORE_MAX_VALUE || n - off < (size_t)kl + vl) {
      off = n + 1;
      break;
    }
    r = cddp__kv_set(kv, (const char *)buf + off, kl, buf + off + kl, vl, NULL);
    off += (size_t)kl + vl;
  }
  if (r == CDDP_OK && (off != n || kv->n != count))
    r = cddp__fail(CDDP_INVALID_ARG, "store file %s: truncated or corrupt", f->path);
out:
  free(buf);
  fclose(fp);
  if (r != CDDP_OK) cddp__kv_free(kv);
  return r;
}

static int put_entry(const cddp__kv_entry_t *e, void *arg) {
  cddp__wire_buf_t *b = arg;
  cddp__wire_u32(b, e->klen);
  cddp__wire_u32(b, (uint32_t)e->vlen);
  cddp__wire_raw(b, e->key, e->klen);
  cddp__wire_raw(b, e->val, e->vlen);
  return 0;
}

/* Replaces PATH with kv, durably (common/durable.c). Call locked (exclusive). */
static cddp_result_t save(file_store_t *f, const cddp__kv_t *kv) {
  cddp__wire_buf_t b = {0};
  cddp__wire_raw(&b, file_magic, sizeof file_magic - 1);
  cddp__wire_u32(&b, (uint32_t)kv->n);
  cddp__kv_each(kv, put_entry, &b);
  if (b.oom) {
    cddp__wire_buf_free(&b);
    return cddp__fail(CDDP_SYSTEM, "store file %s: out of memory", f->path);
  }
  cddp_result_t r = cddp__durable_save(f->path, 0666, b.p, b.len);
  if (r != CDDP_OK) r = cddp__fail(r, "store file: %s", cddp_last_error());
  cddp__wire_buf_free(&b);
  return r;
}

static cddp_result_t fs_set(cddp_store_t *s, const char *key, const void *val, size_t len) {
  cddp__kv_t kv;
  CDDP_CHECK(lock(F(s), LOCK_EX));
  cddp_result_t r = load(F(s), &kv);
  if (r == CDDP_OK) {
    r = cddp__kv_set(&kv, key, strlen(key), val, len, NULL);
    if (r == CDDP_OK) r = save(F(s), &kv);
    cddp__kv_free(&kv);
  }
  unlock(F(s));
  return r;
}

/* Polls until every key exists or the deadline passes. On success with val != NULL,
 * copies keys[0]'s value. *missing: index of the first missing key on TIMEOUT. */
static cddp_result_t poll_keys(file_store_t *f, const char *const *keys, size_t n, int t,
                               void **val, size_t *len, size_t *missing) {
  uint64_t deadline = cddp__deadline_ms(t);
  for (;;) {
    cddp__kv_t kv;
    CDDP_CHECK(lock(f, LOCK_SH));
    cddp_result_t r = load(f, &kv);
    unlock(f);
    CDDP_CHECK(r);
    size_t i = 0;
    while (i < n && cddp__kv_find(&kv, keys[i], strlen(keys[i]))) i++;
    if (i == n && val) {
      cddp__kv_entry_t *e = cddp__kv_find(&kv, keys[0], strlen(keys[0]));
      if (!(*val = cddp__memdup_nul(e->val, e->vlen)))
        r = cddp__fail(CDDP_SYSTEM, "store get %s: out of memory", keys[0]);
      else
        *len = e->vlen;
    }
    cddp__kv_free(&kv);
    if (i == n) return r;
    *missing = i;
    if (cddp__now_ns() >= deadline) return CDDP_TIMEOUT;
    usleep(POLL_US);
  }
}

static cddp_result_t fs_get(cddp_store_t *s, const char *key, void **val, size_t *len, int t) {
  size_t missing = 0;
  cddp_result_t r = poll_keys(F(s), &key, 1, t, val, len, &missing);
  if (r == CDDP_TIMEOUT) return cddp__fail(CDDP_TIMEOUT, "store get: key %s absent after %d ms", key, t);
  return r;
}

static cddp_result_t fs_wait(cddp_store_t *s, const char *const *keys, size_t n, int t) {
  size_t missing = 0;
  cddp_result_t r = poll_keys(F(s), keys, n, t, NULL, NULL, &missing);
  if (r == CDDP_TIMEOUT)
    return cddp__fail(CDDP_TIMEOUT, "store wait: key %s absent after %d ms", keys[missing], t);
  return r;
}

static cddp_result_t fs_add(cddp_store_t *s, const char *key, int64_t d, int64_t *res) {
  cddp__kv_t kv;
  CDDP_CHECK(lock(F(s), LOCK_EX));
  cddp_result_t r = load(F(s), &kv);
  if (r == CDDP_OK) {
    r = cddp__kv_add(&kv, key, strlen(key), d, res, NULL);
    if (r == CDDP_OK) r = save(F(s), &kv);
    cddp__kv_free(&kv);
  }
  unlock(F(s));
  return r;
}

static cddp_result_t fs_cas(cddp_store_t *s, const char *key, const void *e, size_t el,
                            const void *d, size_t dl, void **cur, size_t *cl) {
  cddp__kv_t kv;
  cddp__kv_entry_t *c = NULL;
  CDDP_CHECK(lock(F(s), LOCK_EX));
  cddp_result_t r = load(F(s), &kv);
  if (r == CDDP_OK) {
    size_t before_len = 0;
    cddp__kv_entry_t *old = cddp__kv_find(&kv, key, strlen(key));
    const uint8_t *before = old ? old->val : NULL;
    if (old) before_len = old->vlen;
    r = cddp__kv_compare_set(&kv, key, strlen(key), e, el, e != NULL, d, dl, &c, NULL);
    int changed = c && (c->val != before || c->vlen != before_len);
    if (r == CDDP_OK && changed) r = save(F(s), &kv);
    if (r == CDDP_OK && c) {
      if (!(*cur = cddp__memdup_nul(c->val, c->vlen)))
        r = cddp__fail(CDDP_SYSTEM, "store compare_set %s: out of memory", key);
      else
        *cl = c->vlen;
    }
    cddp__kv_free(&kv);
  }
  unlock(F(s));
  return r;
}

static cddp_result_t fs_del(cddp_store_t *s, const char *key, int *existed) {
  cddp__kv_t kv;
  CDDP_CHECK(lock(F(s), LOCK_EX));
  cddp_result_t r = load(F(s), &kv);
  if (r == CDDP_OK) {
    *existed = cddp__kv_del(&kv, key, strlen(key));
    if (*existed) r = save(F(s), &kv);
    cddp__kv_free(&kv);
  }
  unlock(F(s));
  return r;
}

static cddp_result_t fs_num_keys(cddp_store_t *s, int64_t *n) {
  cddp__kv_t kv;
  CDDP_CHECK(lock(F(s), LOCK_SH));
  cddp_result_t r = load(F(s), &kv);
  unlock(F(s));
  if (r == CDDP_OK) *n = (int64_t)kv.n;
  cddp__kv_free(&kv);
  return r;
}

static void fs_close(cddp_store_t *s) {
  close(F(s)->lockfd);
  pthread_mutex_destroy(&F(s)->mu);
  free(F(s)->path);
  free(F(s)->lockpath);
  free(s);
}

static const cddp_store_ops_t file_ops = {
    .name = "file", .set = fs_set, .get = fs_get, .add = fs_add, .compare_set = fs_cas,
    .wait = fs_wait, .del = fs_del, .num_keys = fs_num_keys, .close = fs_close,
};

cddp_result_t cddp_store_file_create(cddp_store_t **out, const char *path) {
  if (!out || !path || !*path) return cddp__fail(CDDP_INVALID_ARG, "store file: NULL or empty path");
  *out = NULL;
  file_store_t *f = calloc(1, sizeof *f);
  size_t ll = strlen(path) + 6;
  if (!f || !(f->path = strdup(path)) || !(f->lockpath = malloc(ll))) {
    if (f) free(f->path);
    free(f);
    return cddp__fail(CDDP_SYSTEM, "store file %s: out of memory", path);
  }
  snprintf(f->lockpath, ll, "%s.lock", path);
  f->lockfd = open(f->lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (f->lockfd < 0) {
    cddp_result_t r = cddp__fail_errno(CDDP_SYSTEM, "store file: open %s", f->lockpath);
    free(f->path);
    free(f->lockpath);
    free(f);
    return r;
  }
  cddp__store_init(&f->base, &file_ops);
  pthread_mutex_init(&f->mu, NULL);
  /* create the file when missing, and check an existing one is ours */
  cddp__kv_t kv;
  cddp_result_t r = lock(f, LOCK_EX);
  if (r == CDDP_OK) {
    r = load(f, &kv);
    if (r == CDDP_OK && access(path, F_OK) != 0) r = save(f, &kv);
    if (r == CDDP_OK) cddp__kv_free(&kv);
    unlock(f);
  }
  if (r != CDDP_OK) {
    fs_close(&f->base);
    return r;
  }
  *out = &f->base;
  return CDDP_OK;
}

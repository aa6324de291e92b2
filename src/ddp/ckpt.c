/* ckpt.c - checkpoints that survive a crash at any instant: built in a hidden temporary
 * directory, every file written durably (common/durable.c), renamed into place, the root fsynced;
 * read back only after DONE, the MANIFEST's sizes and CRC-32s and both headers check out. */
#include "cddp/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "cddp/comm.h"
#include "common/check.h"
#include "common/durable.h"
#include "common/io.h"
#include "ddp/safetensors.h"

#define MANIFEST_MAGIC "cddp-checkpoint"
#define MANIFEST_VERSION 1
#define MANIFEST_MAX 65536
#define STEP_FMT "step-%09" PRId64

static const char *const file_names[2] = {"model.safetensors", "state.safetensors"};

struct cddp_ckpt {
  char dir[PATH_MAX];
  int64_t step;
  uint8_t *buf[2];
  size_t len[2];
  cddp__st_file_t st[2];
};

/* ---- small file-system helpers; every error names the syscall and the path */

static cddp_result_t join(char *out, size_t cap, const char *a, const char *b) {
  int n = snprintf(out, cap, "%s/%s", a, b);
  if (n < 0 || (size_t)n >= cap) return cddp__fail(CDDP_INVALID_ARG, "path %s/%s is too long", a, b);
  return CDDP_OK;
}

/* mkdir -p; a directory it creates is made durable by fsyncing its parent. */
static cddp_result_t mkdir_p(const char *path) {
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
    return cddp__fail(CDDP_INVALID_ARG, "path %s is too long", path);
  for (char *s = buf + 1;; s++) {
    if (*s != '/' && *s != '\0') continue;
    char c = *s;
    *s = '\0';
    if (mkdir(buf, 0755) == 0) {
      char parent[PATH_MAX];
      snprintf(parent, sizeof parent, "%s", buf);
      char *slash = strrchr(parent, '/');
      if (slash == parent) parent[1] = '\0';
      else if (slash) *slash = '\0';
      else snprintf(parent, sizeof parent, ".");
      CDDP_CHECK(cddp__fsync_dir(parent));
    } else if (errno != EEXIST) {
      return cddp__fail_errno(CDDP_SYSTEM, "mkdir %s", buf);
    }
    if (c == '\0') break;
    *s = c;
  }
  struct stat st;
  if (stat(path, &st) != 0) return cddp__fail_errno(CDDP_SYSTEM, "stat %s", path);
  if (!S_ISDIR(st.st_mode)) return cddp__fail(CDDP_INVALID_ARG, "checkpoint root %s is not a directory", path);
  return CDDP_OK;
}

/* rm -r of a checkpoint or temporary directory (best effort; depth-bounded). */
static int rm_tree(const char *path, int depth) {
  DIR *d = opendir(path);
  if (!d) return errno == ENOENT ? 0 : -1;
  struct dirent *e;
  int rc = 0;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char sub[PATH_MAX];
    if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) >= (int)sizeof sub) { rc = -1; continue; }
    if (unlink(sub) != 0) {
      if ((errno == EISDIR || errno == EPERM) && depth > 0) rc |= rm_tree(sub, depth - 1);
      else rc = -1;
    }
  }
  closedir(d);
  if (rmdir(path) != 0 && errno != ENOENT) rc = -1;
  return rc;
}

/* "step-<digits>" -> its number. */
static int parse_step_name(const char *name, int64_t *step) {
  if (strncmp(name, "step-", 5) != 0) return 0;
  const char *s = name + 5;
  if (!*s || strlen(s) > 18) return 0;
  int64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return 0;
    v = v * 10 + (*s - '0');
  }
  *step = v;
  return 1;
}

static const char *base_name(const char *path) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') n--;
  const char *s = path + n;
  while (s > path && s[-1] != '/') s--;
  return s;
}

/* ---- MANIFEST: "cddp-checkpoint 1", "step N", "file NAME SIZE CRC" per file, then
 * "crc32 CRC" over every byte before that last line. */

typedef struct manifest {
  int64_t step;
  uint64_t size[2];
  uint32_t crc[2];
} manifest_t;

static size_t manifest_format(char *out, size_t cap, const manifest_t *m) {
  int n = snprintf(out, cap, "%s %d\nstep %" PRId64 "\n", MANIFEST_MAGIC, MANIFEST_VERSION, m->step);
  for (int i = 0; i < 2; i++)
    n += snprintf(out + n, cap - (size_t)n, "file %s %" PRIu64 " %08x\n", file_names[i], m->size[i], m->crc[i]);
  uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)out, (uInt)n);
  n += snprintf(out + n, cap - (size_t)n, "crc32 %08x\n", crc);
  return (size_t)n;
}

/* Parses text (NUL-terminated); on error fills why. */
static int manifest_parse(char *text, size_t len, manifest_t *m, char *why, size_t cap) {
  memset(m, 0, sizeof *m);
  if (len == 0 || text[len - 1] != '\n') return snprintf(why, cap, "corrupt: MANIFEST does not end with a newline (truncated?)"), 0;
  text[len - 1] = '\0';
  char *last = strrchr(text, '\n');
  text[len - 1] = '\n';
  size_t body = last ? (size_t)(last + 1 - text) : 0;
  unsigned want;
  int used = 0;
  if (sscanf(text + body, "crc32 %8x\n%n", &want, &used) != 1 || body + (size_t)used != len)
    return snprintf(why, cap, "corrupt: MANIFEST lacks its final crc32 line"), 0;
  uint32_t got = (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)text, (uInt)body);
  if (got != want) return snprintf(why, cap, "corrupt: MANIFEST: CRC-32 %08x, its crc32 line says %08x", got, want), 0;
  int version = -1, seen[2] = {0, 0};
  char *save = NULL, *line = strtok_r(text, "\n", &save);
  if (!line || sscanf(line, MANIFEST_MAGIC " %d%n", &version, &used) != 1 || line[used])
    return snprintf(why, cap, "corrupt: MANIFEST: first line is not '%s <version>'", MANIFEST_MAGIC), 0;
  if (version != MANIFEST_VERSION)
    return snprintf(why, cap, "unsupported: MANIFEST format version %d (this cddp reads %d)", version, MANIFEST_VERSION), 0;
  line = strtok_r(NULL, "\n", &save);
  if (!line || sscanf(line, "step %" SCNd64 "%n", &m->step, &used) != 1 || line[used] || m->step < 0)
    return snprintf(why, cap, "corrupt: MANIFEST: second line is not 'step <N>'"), 0;
  while ((line = strtok_r(NULL, "\n", &save)) && (size_t)(line - text) < body) {
    char name[64];
    uint64_t size;
    unsigned crc;
    if (sscanf(line, "file %63s %" SCNu64 " %8x%n", name, &size, &crc, &used) != 3 || line[used])
      return snprintf(why, cap, "corrupt: MANIFEST: bad line '%.80s'", line), 0;
    int k = !strcmp(name, file_names[0]) ? 0 : !strcmp(name, file_names[1]) ? 1 : -1;
    if (k < 0 || seen[k]++) return snprintf(why, cap, "corrupt: MANIFEST: unexpected file '%.64s'", name), 0;
    m->size[k] = size, m->crc[k] = crc;
  }
  for (int k = 0; k < 2; k++)
    if (!seen[k]) return snprintf(why, cap, "corrupt: MANIFEST does not list %s", file_names[k]), 0;
  return 1;
}

/* ---- verification: DONE, MANIFEST, sizes, CRCs, headers. Fills why ("incomplete (no DONE)",
 * "corrupt: model.safetensors: ...") and returns the result code; keeps the files in c when
 * c is not NULL. */
static cddp_result_t check_dir(const char *dir, char *why, size_t cap, struct cddp_ckpt *c) {
  char path[PATH_MAX];
  struct stat st;
  cddp_result_t ret = CDDP_OK;
  uint8_t *buf[2] = {NULL, NULL};
  cddp__st_file_t sf[2];
  int parsed = 0;
  memset(sf, 0, sizeof sf);
  if (stat(dir, &st) != 0) {
    int e = errno;
    snprintf(why, cap, e == ENOENT ? "missing (no such directory)" : "unreadable (stat: %s)", strerror(e));
    return e == ENOENT ? CDDP_NOT_FOUND : CDDP_SYSTEM;
  }
  if (!S_ISDIR(st.st_mode)) return snprintf(why, cap, "not a directory"), CDDP_INVALID_ARG;
  CDDP_CHECK(join(path, sizeof path, dir, "DONE"));
  if (stat(path, &st) != 0) {
    if (errno == ENOENT) return snprintf(why, cap, "incomplete (no DONE)"), CDDP_INVALID_ARG;
    return snprintf(why, cap, "unreadable (stat DONE: %s)", strerror(errno)), CDDP_SYSTEM;
  }
  CDDP_CHECK(join(path, sizeof path, dir, "MANIFEST"));
  manifest_t m;
  {
    FILE *f = fopen(path, "re");
    if (!f) {
      if (errno == ENOENT) return snprintf(why, cap, "corrupt: DONE but no MANIFEST"), CDDP_INVALID_ARG;
      return snprintf(why, cap, "unreadable (open MANIFEST: %s)", strerror(errno)), CDDP_SYSTEM;
    }
    char *text = malloc(MANIFEST_MAX + 1);
    size_t n = text ? fread(text, 1, MANIFEST_MAX + 1, f) : 0;
    int err = ferror(f);
    fclose(f);
    if (!text) return snprintf(why, cap, "out of memory"), CDDP_SYSTEM;
    text[CDDP_MIN(n, (size_t)MANIFEST_MAX)] = '\0';
    int ok = 0;
    if (err) snprintf(why, cap, "unreadable (read MANIFEST)");
    else if (n > MANIFEST_MAX) snprintf(why, cap, "corrupt: MANIFEST is over %d bytes", MANIFEST_MAX);
    else if (memchr(text, '\0', n)) snprintf(why, cap, "corrupt: MANIFEST holds a NUL byte");
    else ok = manifest_parse(text, n, &m, why, cap);
    free(text);
    if (!ok) return err ? CDDP_SYSTEM : CDDP_INVALID_ARG;
  }
  int64_t named;
  if (parse_step_name(base_name(dir), &named) && named != m.step)
    return snprintf(why, cap, "corrupt: MANIFEST says step %" PRId64 " in a directory named for step %" PRId64, m.step, named), CDDP_INVALID_ARG;
  for (int k = 0; k < 2; k++) {
    const char *fname = file_names[k];
    CDDP_CHECK_GOTO(join(path, sizeof path, dir, fname), ret, out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      int e = errno;
      snprintf(why, cap, e == ENOENT ? "corrupt: %s is missing" : "unreadable (open %s: %s)", fname, strerror(e));
      ret = e == ENOENT ? CDDP_INVALID_ARG : CDDP_SYSTEM;
      goto out;
    }
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != m.size[k]) {
      snprintf(why, cap, "corrupt: %s: %lld bytes, MANIFEST says %" PRIu64 "%s", fname, (long long)st.st_size,
               m.size[k], (uint64_t)st.st_size < m.size[k] ? " (truncated)" : "");
      close(fd);
      ret = CDDP_INVALID_ARG;
      goto out;
    }
    buf[k] = malloc(m.size[k] ? m.size[k] : 1);
    ssize_t r = buf[k] ? cddp__read_all(fd, buf[k], m.size[k]) : -1;
    size_t got = r > 0 ? (size_t)r : 0;
    int rerr = r < 0 ? errno : 0;
    close(fd);
    if (!buf[k] || got != m.size[k]) {
      snprintf(why, cap, "unreadable (read %s: %s)", fname, buf[k] ? strerror(rerr) : "out of memory");
      ret = CDDP_SYSTEM;
      goto out;
    }
    uint32_t crc = (uint32_t)crc32(0L, Z_NULL, 0);
    for (size_t at = 0; at < got; at += (size_t)1 << 30)
      crc = (uint32_t)crc32(crc, buf[k] + at, (uInt)CDDP_MIN(got - at, (size_t)1 << 30));
    if (crc != m.crc[k]) {
      snprintf(why, cap, "corrupt: %s: CRC-32 %08x, MANIFEST says %08x", fname, crc, m.crc[k]);
      ret = CDDP_INVALID_ARG;
      goto out;
    }
    if (cddp__st_parse(fname, buf[k], got, &sf[k]) != CDDP_OK) {
      snprintf(why, cap, "corrupt: %s", cddp_last_error());
      ret = CDDP_INVALID_ARG;
      goto out;
    }
    parsed = k + 1;
  }
  const char *ms = cddp__st_meta(&sf[1], "cddp.step");
  char want[32];
  snprintf(want, sizeof want, "%" PRId64, m.step);
  if (!ms || strcmp(ms, want) != 0) {
    snprintf(why, cap, "corrupt: state.safetensors: metadata cddp.step is %s, MANIFEST says %s", ms ? ms : "absent", want);
    ret = CDDP_INVALID_ARG;
    goto out;
  }
  if (c) {
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    c->step = m.step;
    for (int k = 0; k < 2; k++) c->buf[k] = buf[k], c->len[k] = m.size[k], c->st[k] = sf[k];
    return CDDP_OK;
  }
out:
  for (int k = 0; k < parsed; k++) cddp__st_free(&sf[k]);
  free(buf[0]), free(buf[1]);
  return ret;
}

cddp_result_t cddp_ckpt_verify(const char *dir) {
  char why[512];
  if (!dir || !*dir) return cddp__fail(CDDP_INVALID_ARG, "checkpoint verify: empty path");
  cddp_result_t r = check_dir(dir, why, sizeof why, NULL);
  if (r != CDDP_OK) return cddp__fail(r, "checkpoint %s is %s", dir, why);
  return CDDP_OK;
}

/* ---- save */

/* A temporary name's owner: "<what>@<host>-<pid>". The host is there because a checkpoint root
 * is often on a file system shared by several hosts (the job's rank 0 moves to another node
 * when its node is lost): a pid says whether a writer lives only on its own host. */
#define FOREIGN_STALE_S 600 /* another host's temporary unchanged this long: its writer is gone */

static const char *this_host(void) {
  static char host[65];
  if (!host[0] && (gethostname(host, sizeof host - 1) != 0 || !host[0])) strcpy(host, "localhost");
  return host;
}

/* "<root>/.tmp-<what>@<host>-<pid>" into buf; 0 when it does not fit. */
static int tmp_name(char *buf, size_t cap, const char *root, const char *what, int64_t step) {
  return snprintf(buf, cap, "%s/.tmp-%s" STEP_FMT "@%s-%ld", root, what, step, this_host(), (long)getpid()) <
         (int)cap;
}

/* Whether the .tmp- entry `name` in root was left by a writer that is gone: on this host, its
 * pid is dead (or a zombie, or this process: an earlier failed save of ours); on another host
 * (the name says which), it has not changed for FOREIGN_STALE_S. A name without "@host"
 * (written before hosts were named) is judged as this host's. */
static int stale_tmp(const char *root, const char *name) {
  const char *dash = strrchr(name, '-'), *at = strrchr(name, '@');
  char *end;
  long pid = strtol(dash + 1, &end, 10);
  if (*end || end == dash + 1 || pid <= 0) return 0;
  if (at && at < dash && (strlen(this_host()) != (size_t)(dash - at - 1) ||
                          strncmp(at + 1, this_host(), (size_t)(dash - at - 1)) != 0)) {
    char path[PATH_MAX];
    struct stat st;
    if (join(path, sizeof path, root, name) != CDDP_OK || lstat(path, &st) != 0) return 0;
    return time(NULL) - st.st_mtime > FOREIGN_STALE_S;
  }
  return pid == (long)getpid() || (kill((pid_t)pid, 0) != 0 && errno == ESRCH) ||
         cddp__proc_state((pid_t)pid) == 'Z';
}

/* Removes the .tmp-* directories stale_tmp judges left behind. One writer per root is assumed
 * (rank 0). A zombie is dead: a writer whose agent was killed is reparented, and its new parent
 * may reap it only seconds later (a container's pid 1 often does), while the job saves its
 * next checkpoints. */
static void clean_stale(const char *root) {
  DIR *d = opendir(root);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, ".tmp-", 5) != 0 || !stale_tmp(root, e->d_name)) continue;
    char path[PATH_MAX];
    if (join(path, sizeof path, root, e->d_name) != CDDP_OK) continue;
    CDDP_INFO(CDDP_SUB_TRAIN, "checkpoint: removing stale %s", path);
    rm_tree(path, 2);
  }
  closedir(d);
}

typedef struct step_dir {
  int64_t step;
  int complete; /* has DONE */
} step_dir_t;

static int cmp_step_desc(const void *a, const void *b) {
  int64_t x = ((const step_dir_t *)a)->step, y = ((const step_dir_t *)b)->step;
  return x > y ? -1 : x < y;
}

/* The step-* directories under root, newest first. *n = -1 and errno set when root is unreadable. */
static step_dir_t *list_steps(const char *root, int *n) {
  *n = 0;
  DIR *d = opendir(root);
  if (!d) { *n = -1; return NULL; }
  step_dir_t *v = NULL;
  int cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int64_t step;
    if (!parse_step_name(e->d_name, &step)) continue;
    if (*n == cap) {
      cap = cap ? cap * 2 : 16;
      step_dir_t *nv = realloc(v, (size_t)cap * sizeof *nv);
      if (!nv) break;
      v = nv;
    }
    char done[PATH_MAX];
    v[*n].step = step;
    v[*n].complete = snprintf(done, sizeof done, "%s/%s/DONE", root, e->d_name) < (int)sizeof done &&
                     access(done, F_OK) == 0;
    (*n)++;
  }
  closedir(d);
  if (*n > 1) qsort(v, (size_t)*n, sizeof *v, cmp_step_desc);
  return v;
}

/* Keeps the one just saved and the keep-1 newest complete ones below it; removes the other
 * complete ones below it and every incomplete one older than the oldest kept. A checkpoint
 * newer than the one just saved is left alone. Each goes by a rename to a .tmp- name first,
 * so a crash mid-removal never leaves a half-deleted step-* for find_latest to trip on. */
static void prune(const char *root, int64_t saved, int keep) {
  int n;
  step_dir_t *v = list_steps(root, &n);
  int kept = 1, removed = 0;
  int64_t oldest_kept = saved;
  for (int i = 0; i < n; i++) {
    if (v[i].step >= saved) {
      if (v[i].step > saved && v[i].complete)
        CDDP_WARN("checkpoint %s/" STEP_FMT " is newer than the one just saved (step %" PRId64 "); left in place",
                  root, v[i].step, saved);
      continue;
    }
    int drop;
    if (v[i].complete) {
      drop = kept >= keep;
      if (!drop) kept++, oldest_kept = v[i].step;
    } else {
      drop = v[i].step < oldest_kept && kept >= keep;
    }
    if (!drop) continue;
    char from[PATH_MAX], to[PATH_MAX];
    snprintf(from, sizeof from, "%s/" STEP_FMT, root, v[i].step);
    if (!tmp_name(to, sizeof to, root, "del-", v[i].step)) continue;
    if (rename(from, to) != 0) {
      CDDP_WARN("checkpoint: rename %s -> %s (pruning): %s", from, to, strerror(errno));
      continue;
    }
    if (rm_tree(to, 2) != 0) CDDP_WARN("checkpoint: could not remove all of %s (pruning)", to);
    removed++;
  }
  free(v);
  if (removed) cddp__fsync_dir(root); /* best effort: a lost removal only costs disk space */
}

/* Moves the finished tmp directory to final. A checkpoint already there (the same step saved
 * again) is swapped out atomically with RENAME_EXCHANGE, so step-N is complete at every
 * instant; where the file system lacks it, the old one is first renamed aside. */
static cddp_result_t publish(const char *root, const char *tmp, const char *final) {
  if (rename(tmp, final) == 0) return CDDP_OK;
  if (errno != EEXIST && errno != ENOTEMPTY) return cddp__fail_errno(CDDP_SYSTEM, "rename %s -> %s", tmp, final);
  if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
    CDDP_CHECK(cddp__fsync_dir(root));
    rm_tree(tmp, 2); /* now the old checkpoint */
    return CDDP_OK;
  }
  if (errno != EINVAL && errno != ENOSYS)
    return cddp__fail_errno(CDDP_SYSTEM, "renameat2 %s <-> %s (RENAME_EXCHANGE)", tmp, final);
  char old[PATH_MAX];
  if (snprintf(old, sizeof old, "%s.old", tmp) >= (int)sizeof old) return cddp__fail(CDDP_INVALID_ARG, "path %s.old is too long", tmp);
  if (rename(final, old) != 0) return cddp__fail_errno(CDDP_SYSTEM, "rename %s -> %s", final, old);
  if (rename(tmp, final) != 0) return cddp__fail_errno(CDDP_SYSTEM, "rename %s -> %s", tmp, final);
  CDDP_CHECK(cddp__fsync_dir(root));
  rm_tree(old, 2);
  return CDDP_OK;
}

cddp_result_t cddp_ckpt_save(const char *root, int64_t step, const cddp_ckpt_payload_t *p,
                             int keep, char *out_dir, size_t out_cap) {
  cddp_result_t ret = CDDP_OK;
  char tmp[PATH_MAX], final[PATH_MAX], path[PATH_MAX], text[1024];
  cddp_meta_kv_t *meta = NULL;
  int made_tmp = 0;
  if (!root || !*root || !p || step < 0 || p->n_weights < 0 || p->n_state < 0 || p->n_meta < 0)
    return cddp__fail(CDDP_INVALID_ARG, "checkpoint save: bad arguments (root %s, step %" PRId64 ")", root ? root : "(null)", step);
  CDDP_CHECK(mkdir_p(root));
  cddp_progress_alive(); /* a long save is work, not a hang (its peers may wait at the next collective) */
  clean_stale(root);
  if (!tmp_name(tmp, sizeof tmp, root, "", step) ||
      snprintf(final, sizeof final, "%s/" STEP_FMT, root, step) >= (int)sizeof final)
    return cddp__fail(CDDP_INVALID_ARG, "checkpoint root %s: path too long", root);
  rm_tree(tmp, 2);
  if (mkdir(tmp, 0755) != 0) return cddp__fail_errno(CDDP_SYSTEM, "mkdir %s", tmp);
  made_tmp = 1;

  manifest_t m = {.step = step};
  const cddp_meta_kv_t model_meta[] = {{"format", "pt"}};
  CDDP_CHECK_GOTO(join(path, sizeof path, tmp, file_names[0]), ret, fail);
  CDDP_CHECK_GOTO(cddp__st_write(path, p->weights, p->n_weights, model_meta, 1, &m.size[0], &m.crc[0]), ret, fail);

  char step_s[32];
  snprintf(step_s, sizeof step_s, "%" PRId64, step);
  meta = malloc(((size_t)p->n_meta + 2) * sizeof *meta);
  if (!meta) { ret = cddp__fail(CDDP_SYSTEM, "checkpoint save %s: out of memory", tmp); goto fail; }
  meta[0] = (cddp_meta_kv_t){"cddp.format", "1"};
  meta[1] = (cddp_meta_kv_t){"cddp.step", step_s};
  if (p->n_meta) memcpy(meta + 2, p->meta, (size_t)p->n_meta * sizeof *meta);
  CDDP_CHECK_GOTO(join(path, sizeof path, tmp, file_names[1]), ret, fail);
  CDDP_CHECK_GOTO(cddp__st_write(path, p->state, p->n_state, meta, p->n_meta + 2, &m.size[1], &m.crc[1]), ret, fail);

  size_t len = manifest_format(text, sizeof text, &m);
  CDDP_CHECK_GOTO(join(path, sizeof path, tmp, "MANIFEST"), ret, fail);
  CDDP_CHECK_GOTO(cddp__durable_save(path, 0644, text, len), ret, fail);
  len = (size_t)snprintf(text, sizeof text, "step %" PRId64 "\n", step);
  CDDP_CHECK_GOTO(join(path, sizeof path, tmp, "DONE"), ret, fail);
  CDDP_CHECK_GOTO(cddp__durable_save(path, 0644, text, len), ret, fail);
  CDDP_CHECK_GOTO(publish(root, tmp, final), ret, fail);
  made_tmp = 0;
  CDDP_CHECK_GOTO(cddp__fsync_dir(root), ret, fail);
  free(meta);
  meta = NULL;
  CDDP_INFO(CDDP_SUB_TRAIN, "checkpoint: saved %s (%" PRIu64 " + %" PRIu64 " bytes)", final, m.size[0], m.size[1]);
  if (keep > 0) prune(root, step, keep);
  if (out_dir && out_cap) snprintf(out_dir, out_cap, "%s", final);
  return CDDP_OK;
fail:
  if (made_tmp) {
    char saved[512];
    snprintf(saved, sizeof saved, "%s", cddp_last_error());
    rm_tree(tmp, 2);
    cddp__set_error_text(saved);
  }
  free(meta);
  return ret;
}

/* ---- find, load, read */

/* list_steps for the finders: an error names the root. */
static cddp_result_t find_steps(const char *root, step_dir_t **v, int *n) {
  *v = NULL;
  if (!root || !*root) return cddp__fail(CDDP_INVALID_ARG, "checkpoint find: empty root");
  *v = list_steps(root, n);
  if (*n >= 0) return CDDP_OK;
  if (errno == ENOENT) return cddp__fail(CDDP_NOT_FOUND, "no checkpoint under %s (no such directory)", root);
  return cddp__fail_errno(CDDP_SYSTEM, "opendir %s", root);
}

cddp_result_t cddp_ckpt_find_latest(const char *root, char *out_dir, size_t out_cap) {
  int n;
  step_dir_t *v;
  CDDP_CHECK(find_steps(root, &v, &n));
  char (*whys)[512] = n ? calloc((size_t)n, sizeof *whys) : NULL;
  char path[PATH_MAX];
  cddp_result_t ret = CDDP_NOT_FOUND;
  int found = -1;
  for (int i = 0; i < n && whys; i++) {
    snprintf(path, sizeof path, "%s/" STEP_FMT, root, v[i].step);
    if (check_dir(path, whys[i], sizeof whys[i], NULL) == CDDP_OK) { found = i; break; }
  }
  char name[64] = "";
  if (found >= 0) snprintf(name, sizeof name, STEP_FMT, v[found].step);
  for (int i = 0; i < (found >= 0 ? found : n) && whys; i++) {
    if (found >= 0)
      CDDP_WARN("checkpoint %s/" STEP_FMT " is %s, using %s", root, v[i].step, whys[i], name);
    else
      CDDP_WARN("checkpoint %s/" STEP_FMT " is %s, and there is no older one", root, v[i].step, whys[i]);
  }
  if (n > 0 && !whys) ret = cddp__fail(CDDP_SYSTEM, "checkpoint find under %s: out of memory", root);
  else if (found >= 0) {
    if (out_dir && out_cap) snprintf(out_dir, out_cap, "%s/%s", root, name);
    ret = CDDP_OK;
  } else if (n == 0) {
    ret = cddp__fail(CDDP_NOT_FOUND, "no checkpoint under %s", root);
  } else {
    ret = cddp__fail(CDDP_NOT_FOUND, "no complete checkpoint under %s (%d broken; the newest, " STEP_FMT ", is %s)",
                     root, n, v[0].step, whys[0]);
  }
  free(whys);
  free(v);
  return ret;
}

cddp_result_t cddp_ckpt_find_newest(const char *root, char *out_dir, size_t out_cap) {
  int n;
  step_dir_t *v;
  CDDP_CHECK(find_steps(root, &v, &n));
  cddp_result_t ret = n ? CDDP_OK : cddp__fail(CDDP_NOT_FOUND, "no checkpoint under %s", root);
  if (n && out_dir && out_cap) snprintf(out_dir, out_cap, "%s/" STEP_FMT, root, v[0].step);
  free(v);
  return ret;
}

cddp_result_t cddp_ckpt_load(const char *dir, cddp_ckpt_t **out) {
  char why[512];
  *out = NULL;
  if (!dir || !*dir) return cddp__fail(CDDP_INVALID_ARG, "checkpoint load: empty path");
  cddp_ckpt_t *c = calloc(1, sizeof *c);
  if (!c) return cddp__fail(CDDP_SYSTEM, "checkpoint load %s: out of memory", dir);
  cddp_result_t r = check_dir(dir, why, sizeof why, c);
  if (r != CDDP_OK) {
    free(c);
    return cddp__fail(r, "checkpoint %s is %s", dir, why);
  }
  *out = c;
  return CDDP_OK;
}

void cddp_ckpt_close(cddp_ckpt_t *c) {
  if (!c) return;
  for (int k = 0; k < 2; k++) cddp__st_free(&c->st[k]), free(c->buf[k]);
  free(c);
}

static int file_index(const char *file) {
  if (!file) return -1;
  for (int k = 0; k < 2; k++) {
    size_t n = strlen(file);
    if (!strcmp(file, file_names[k]) || (n == 5 && !strncmp(file, file_names[k], 5))) return k;
  }
  return -1;
}

cddp_result_t cddp_ckpt_tensor(const cddp_ckpt_t *c, const char *file, const char *name,
                               float *dst, size_t count) {
  int k = file_index(file);
  if (!c || k < 0 || !name)
    return cddp__fail(CDDP_INVALID_ARG, "checkpoint tensor: file must be \"model\" or \"state\" (got %s)", file ? file : "(null)");
  const cddp__st_tensor_t *t = cddp__st_find(&c->st[k], name);
  if (!t) return cddp__fail(CDDP_NOT_FOUND, "checkpoint %s: no tensor '%s' in %s", c->dir, name, file_names[k]);
  if (t->count != count)
    return cddp__fail(CDDP_INVALID_ARG, "checkpoint %s: tensor '%s' in %s holds %" PRIu64 " floats, %zu expected",
                      c->dir, name, file_names[k], t->count, count);
  if (count) memcpy(dst, c->st[k].data + t->begin, count * sizeof(float));
  return CDDP_OK;
}

const char *cddp_ckpt_meta(const cddp_ckpt_t *c, const char *key) {
  return c && key ? cddp__st_meta(&c->st[1], key) : NULL;
}

/* ---- info */

static void print_escaped(FILE *f, const char *s, size_t max) {
  size_t n = 0;
  for (; *s && n < max; s++, n++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '\n') fputs("\\n", f);
    else if (ch < 0x20) fprintf(f, "\\x%02x", ch);
    else fputc(ch, f);
  }
  if (*s) fprintf(f, "... (%zu bytes)", n + strlen(s));
}

cddp_result_t cddp_ckpt_print_info(const char *dir, FILE *f) {
  if (!dir || !*dir || !f) return cddp__fail(CDDP_INVALID_ARG, "checkpoint info: empty path");
  fprintf(f, "checkpoint %s\n", dir);
  DIR *d = opendir(dir);
  if (!d) return cddp__fail_errno(errno == ENOENT ? CDDP_NOT_FOUND : CDDP_SYSTEM, "opendir %s", dir);
  fprintf(f, "files:\n");
  struct dirent *e;
  while ((e = readdir(d))) {
    char path[PATH_MAX];
    struct stat st;
    if (e->d_name[0] == '.' || join(path, sizeof path, dir, e->d_name) != CDDP_OK) continue;
    if (lstat(path, &st) == 0) fprintf(f, "  %-20s %12lld bytes\n", e->d_name, (long long)st.st_size);
  }
  closedir(d);
  cddp_ckpt_t *c;
  cddp_result_t r = cddp_ckpt_load(dir, &c);
  if (r != CDDP_OK) {
    fprintf(f, "verify: FAILED: %s\n", cddp_last_error());
    return r;
  }
  fprintf(f, "step: %" PRId64 "\n", c->step);
  for (int k = 0; k < 2; k++) {
    const cddp__st_file_t *s = &c->st[k];
    uint64_t total = 0;
    for (int i = 0; i < s->n; i++) total += s->t[i].count;
    fprintf(f, "%s: %d tensors, %" PRIu64 " floats, header %" PRIu64 " bytes\n", file_names[k], s->n, total, s->header_len);
    for (int i = 0; i < s->n; i++) {
      const cddp__st_tensor_t *t = &s->t[i];
      const uint8_t *x = s->data + t->begin;
      double sum = 0;
      for (uint64_t j = 0; j < t->count; j++) {
        float v;
        memcpy(&v, x + 4 * j, sizeof v);
        sum += v;
      }
      fprintf(f, "  tensor %s %s F32 [", file_names[k], t->name);
      for (int dd = 0; dd < t->ndim; dd++) fprintf(f, "%s%" PRId64, dd ? ", " : "", t->shape[dd]);
      fprintf(f, "] sum=%.10e\n", sum);
    }
    for (int i = 0; i < s->n_meta; i++) {
      fprintf(f, "  meta %s ", file_names[k]);
      print_escaped(f, s->keys[i], 200);
      fputs(" = ", f);
      print_escaped(f, s->vals[i], 200);
      fputc('\n', f);
    }
  }
  fprintf(f, "verify: ok\n");
  cddp_ckpt_close(c);
  return CDDP_OK;
}

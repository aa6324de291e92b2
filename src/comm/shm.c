/* shm.c - the shared-memory transport: segment setup and teardown, zero-copy buffers, table. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/shm.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/knobs.h"

#define SHM_STAGGER 4096 /* room per slot for its 4 KiB-alias stagger */

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Offset (mod 4 KiB) of the idx-th buffer: spread so that no two buffers, and no buffer
 * and a page-aligned (or malloc's +16) user buffer, share an offset modulo 4 KiB. */
static size_t stagger(int idx) { return (size_t)(512 + 384 * (idx % 9)) % 4096; }

static uint64_t init_deadline(const cddp__comm_ctx_t *ctx) {
  return cddp__deadline_ms(ctx->cfg ? ctx->cfg->timeout_ms : 300000);
}

/* Creates (rank 0: creator) or opens a segment named in the store under key and maps it.
 * The creator publishes "name" under key. */
static cddp_result_t map_segment(shm_t *s, const char *key, size_t bytes, void **out,
                                 char *name, size_t name_size) {
  const cddp__comm_ctx_t *ctx = s->ctx;
  cddp_result_t ret = CDDP_OK;
  int fd = -1;
  *out = NULL;
  if (s->rank == 0) {
    static _Atomic unsigned counter;
    snprintf(name, name_size, "/cddp-%d-r%d-%u-%08x", (int)getpid(), ctx->round,
             atomic_fetch_add(&counter, 1), (unsigned)(cddp__now_ns() * 2654435761u));
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return cddp__fail_errno(CDDP_SYSTEM, "shm_open(%s)", name);
    if (ftruncate(fd, (off_t)bytes) != 0) {
      ret = cddp__fail_errno(CDDP_SYSTEM, "ftruncate(%s, %zu) (is /dev/shm big enough?)", name,
                             bytes);
      goto fail;
    }
    CDDP_CHECK_GOTO(cddp_store_set(ctx->store, key, name, strlen(name) + 1), ret, fail);
  } else {
    void *val = NULL;
    size_t len = 0;
    uint64_t deadline = init_deadline(ctx);
    for (;;) { /* short gets, so abort is seen */
      ret = cddp_store_get(ctx->store, key, &val, &len, 100);
      if (ret != CDDP_TIMEOUT) break;
      if (cddp__aborted(ctx)) return cddp__fail(CDDP_ABORTED, "shm: aborted while waiting for %s", key);
      CDDP_CHECK(cddp__shm_check_peer(s, 0)); /* a dead rank 0 never publishes it */
      if (cddp__now_ns() >= deadline) {
        char peer[128];
        return cddp__fail(CDDP_TIMEOUT, "shm: timed out waiting for %s to publish %s",
                          cddp__peer_name(ctx, 0, peer, sizeof peer), key);
      }
    }
    if (ret != CDDP_OK) return ret;
    snprintf(name, name_size, "%.*s", (int)len, (const char *)val);
    free(val);
    fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0) return cddp__fail_errno(CDDP_SYSTEM, "shm_open(%s) published by rank 0", name);
  }
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    ret = cddp__fail_errno(CDDP_SYSTEM, "mmap(%s, %zu bytes)", name, bytes);
    goto fail;
  }
  close(fd);
  *out = p;
  return CDDP_OK;
fail:
  if (fd >= 0) close(fd);
  if (s->rank == 0) shm_unlink(name);
  return ret;
}

static void shm_destroy(void *state) {
  shm_t *s = state;
  if (!s) return;
  for (int i = 0; i < SHM_MAX_ALLOCS; i++)
    if (s->allocs[i].used) munmap(s->allocs[i].map, s->allocs[i].map_len);
  if (s->hdr) {
    atomic_store(&s->ctl[s->rank].left.v, 1);
    cddp__shm_wake_all(s);
    munmap(s->hdr, s->seg_bytes);
  }
  cddp__shm_liveness_close(s);
  free(s->scratch);
  free(s);
}

/* Waits (sleeping, bounded, abortable) until every rank attached to the segment. */
static cddp_result_t wait_attached(shm_t *s) {
  uint64_t deadline = init_deadline(s->ctx);
  for (;;) {
    if (atomic_load(&s->hdr->attached.v) >= (uint32_t)s->world) return CDDP_OK;
    if (cddp__aborted(s->ctx)) return cddp__fail(CDDP_ABORTED, "shm init: aborted");
    for (int q = 0; q < s->world; q++)
      if (q != s->rank) CDDP_CHECK(cddp__shm_check_peer(s, q));
    if (cddp__now_ns() >= deadline)
      return cddp__fail(CDDP_TIMEOUT, "shm init: only %u of %d ranks attached to the segment",
                        atomic_load(&s->hdr->attached.v), s->world);
    usleep(200);
  }
}

static cddp_result_t shm_init(const cddp__comm_ctx_t *ctx, void **state) {
  cddp_result_t ret = CDDP_OK;
  char name[128] = "";
  *state = NULL;
  if (!ctx->all_local)
    return cddp__fail(CDDP_INVALID_USAGE, "shm transport needs every rank on one host");
  if (ctx->world > 64)
    return cddp__fail(CDDP_INVALID_USAGE, "shm transport supports at most 64 ranks, not %d",
                      ctx->world);
  shm_t *s = calloc(1, sizeof *s);
  if (!s) return cddp__fail(CDDP_SYSTEM, "out of memory");
  s->ctx = ctx;
  s->rank = ctx->rank;
  s->world = ctx->world;
  s->what = "init";
  s->spin_ns = (uint64_t)CDDP_MAX(0, cddp__knob_int(CDDP_KNOB_SPIN_US)) * 1000ull;
  /* Streaming stores used to start at 64 MiB; here regular stores win at every size up to
   * 256 MiB (zero copy 64 MiB: 11.4-12.1 GB/s vs 10.0-10.6, docs/shm.md): the 260 MiB L3
   * keeps the lines the caller reads next. A knob for hosts with little cache. */
  s->nt_bytes = (size_t)CDDP_MAX(0, cddp__knob_int(CDDP_KNOB_SHM_NT_BYTES));
  cddp__shm_liveness_open(s);

  size_t chunk = (size_t)CDDP_MAX(4096, cddp__knob_int(CDDP_KNOB_SHM_CHUNK_BYTES));
  size_t direct = (size_t)CDDP_MAX(0, cddp__knob_int(CDDP_KNOB_DIRECT_MAX_BYTES));
  size_t slot = round_up(CDDP_MAX(CDDP_MAX(chunk, direct), 4096), 4096);
  size_t hdr = round_up(sizeof(shm_hdr_t) + (size_t)ctx->world * sizeof(shm_ctl_t), 4096);
  size_t bytes = hdr + SHM_NSLOT * (size_t)ctx->world * (slot + SHM_SLOT_ROOM);
  void *p;
  CDDP_CHECK_GOTO(map_segment(s, "shm/seg", bytes, &p, name, sizeof name), ret, fail);
  s->hdr = p;
  s->seg_bytes = bytes;
  s->ctl = (shm_ctl_t *)((char *)s->hdr + sizeof(shm_hdr_t)); /* zeroed until rank 0 writes it */
  if (s->rank == 0) {
    s->hdr->world = (uint32_t)ctx->world;
    s->hdr->round = (uint32_t)ctx->round;
    s->hdr->slot_bytes = slot;
    s->hdr->chunk_bytes = chunk;
    s->hdr->direct_max = direct;
    s->hdr->seg_bytes = bytes;
    atomic_thread_fence(memory_order_release);
    __atomic_store_n(&s->hdr->magic, SHM_MAGIC, __ATOMIC_RELEASE);
  } else {
    /* rank 0 may die between publishing the name and writing the header (a worker killed
     * while a generation forms): its liveness is checked, or this rank would wait the timeout */
    uint64_t deadline = init_deadline(ctx);
    while (__atomic_load_n(&s->hdr->magic, __ATOMIC_ACQUIRE) != SHM_MAGIC) {
      if (cddp__aborted(ctx)) {
        ret = cddp__fail(CDDP_ABORTED, "shm init: aborted while segment %s waited for rank 0", name);
        goto fail;
      }
      if ((ret = cddp__shm_check_peer(s, 0)) != CDDP_OK) goto fail;
      if (cddp__now_ns() >= deadline) {
        ret = cddp__fail(CDDP_TIMEOUT, "shm init: segment %s never initialised by rank 0", name);
        goto fail;
      }
      usleep(100);
    }
    if (s->hdr->world != (uint32_t)ctx->world || s->hdr->seg_bytes != bytes) {
      ret = cddp__fail(CDDP_INVALID_USAGE,
                       "shm init: segment %s is for %u ranks / %" PRIu64 " bytes, this rank "
                       "expects %d / %zu (same CDDP_SHM_CHUNK_BYTES and "
                       "CDDP_DIRECT_MAX_BYTES on every rank?)",
                       name, s->hdr->world, s->hdr->seg_bytes, ctx->world, bytes);
      goto fail;
    }
  }
  s->slot_bytes = s->hdr->slot_bytes;
  s->chunk_bytes = s->hdr->chunk_bytes;
  s->direct_max = s->hdr->direct_max;
  for (int k = 0; k < SHM_NSLOT; k++)
    for (int q = 0; q < ctx->world; q++) {
      int idx = k * ctx->world + q;
      s->slot[k][q] = (char *)s->hdr + hdr + (size_t)idx * (slot + SHM_SLOT_ROOM);
    }
  atomic_fetch_add(&s->hdr->attached.v, 1);
  ret = wait_attached(s);
  shm_unlink(name); /* every rank mapped it: nothing is left behind, even on a crash */
  if (ret != CDDP_OK) goto fail;
  s->what = "init";
  CDDP_CHECK_GOTO(cddp__shm_cma_probe(s, init_deadline(ctx)), ret, fail);
  cddp__shm_tune_init(s);
  CDDP_INFO(CDDP_SUB_SHM,
            "shm: %d ranks, segment %zu KiB, direct (every rank reduces all) up to %zu B, "
            "ring above with %zu KiB chunks%s, spin %" PRIu64 " us then futex",
            ctx->world, bytes >> 10, s->direct_max, s->chunk_bytes >> 10,
            s->cma ? " (allreduce of ordinary buffers: process_vm_readv/writev)" : "",
            s->spin_ns / 1000);
  *state = s;
  return CDDP_OK;
fail:
  if (s->rank == 0 && name[0]) shm_unlink(name);
  shm_destroy(s);
  return ret;
}

static cddp_result_t shm_run(void *state, const cddp__coll_t *coll) {
  shm_t *s = state;
  cddp_result_t r = cddp__shm_run(s, coll);
  if (r != CDDP_OK) { /* tell the peers at once rather than let them time out */
    atomic_store(&s->ctl[s->rank].left.v, 1);
    cddp__shm_wake_all(s);
  }
  return r;
}

static void shm_wake(void *state) { cddp__shm_wake_all(state); }

static cddp_result_t barrier(shm_t *s) {
  cddp__coll_t b = {.kind = CDDP__BARRIER,
                    .deadline = init_deadline(s->ctx)};
  return shm_run(s, &b);
}

/* A segment of world buffers (one: a single buffer that every rank maps), mapped by every rank. */
static cddp_result_t alloc_segment(shm_t *s, size_t bytes, int one, void **ptr) {
  cddp_result_t ret = CDDP_OK;
  *ptr = NULL;
  int slot = -1;
  for (int i = 0; i < SHM_MAX_ALLOCS && slot < 0; i++)
    if (!s->allocs[i].used) slot = i;
  if (slot < 0)
    return cddp__fail(CDDP_INVALID_USAGE, "shm mem_alloc: more than %d live buffers",
                      SHM_MAX_ALLOCS);
  shm_alloc_t *a = &s->allocs[slot];
  int id = s->next_alloc_id++;
  size_t region = round_up(CDDP_MAX(bytes, 1), 4096) + SHM_STAGGER;
  size_t total = region * (size_t)(one ? 1 : s->world);
  char key[64], name[128] = "";
  snprintf(key, sizeof key, "shm/mem/%d", id);
  void *map;
  s->what = "mem_alloc";
  CDDP_CHECK(map_segment(s, key, total, &map, name, sizeof name));
  /* Every rank mapped it once the barrier passes: unlink, so a crash leaks nothing. */
  ret = barrier(s);
  if (s->rank == 0) shm_unlink(name);
  if (ret != CDDP_OK) {
    munmap(map, total);
    return ret;
  }
  *a = (shm_alloc_t){.used = 1, .one = one, .id = id, .bytes = bytes, .map = map, .map_len = total};
  for (int q = 0; q < s->world; q++)
    a->base[q] = (char *)map + (one ? 0 : (size_t)q * region) + stagger(2 * s->world + id * s->world + (one ? 0 : q));
  *ptr = a->base[s->rank];
  return CDDP_OK;
}

static cddp_result_t shm_mem_alloc(void *state, size_t bytes, void **ptr) { return alloc_segment(state, bytes, 0, ptr); }

static cddp_result_t shm_mem_alloc_one(void *state, size_t bytes, void **ptr) { return alloc_segment(state, bytes, 1, ptr); }

static cddp_result_t shm_mem_free(void *state, void *ptr) {
  shm_t *s = state;
  if (!ptr) return CDDP_OK;
  for (int i = 0; i < SHM_MAX_ALLOCS; i++) {
    shm_alloc_t *a = &s->allocs[i];
    if (a->used && a->base[s->rank] == ptr) {
      /* Collective: no peer may still be reading or writing it. */
      cddp_result_t ret = barrier(s);
      munmap(a->map, a->map_len);
      a->used = 0;
      return ret;
    }
  }
  return cddp__fail(CDDP_INVALID_ARG, "shm mem_free: %p was not returned by mem_alloc", ptr);
}

int cddp__shm_find_alloc(shm_t *s, const void *p, size_t len, uint64_t *off) {
  const char *c = p;
  for (int i = 0; i < SHM_MAX_ALLOCS; i++) {
    shm_alloc_t *a = &s->allocs[i];
    if (a->used && !a->one && c >= a->base[s->rank] && c + len <= a->base[s->rank] + a->bytes) {
      *off = (uint64_t)(c - a->base[s->rank]);
      return i;
    }
  }
  return -1;
}

const cddp__transport_t cddp__transport_shm = {
    .name = "shm",
    .init = shm_init,
    .run = shm_run,
    .wake = shm_wake,
    .destroy = shm_destroy,
    .mem_alloc = shm_mem_alloc,
    .mem_free = shm_mem_free,
    .mem_alloc_one = shm_mem_alloc_one,
};

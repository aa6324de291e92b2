/* shm_sync.c - step flags, spin-then-futex waits, abort/deadline/peer-liveness checks. */
#include <errno.h>
#include <stddef.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm/shm.h"
#include "common/check.h"
#include "common/clock.h"

#define SLEEP_SLICE_NS 20000000ull /* longest futex sleep before re-checking liveness */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts) {
  return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

static inline int reached(uint32_t v, uint32_t step) { return (int32_t)(v - step) >= 0; }

void cddp__shm_post(shm_t *s, _Atomic uint32_t *word, uint32_t step) {
  /* seq_cst store, then seq_cst load of sleepers: pairs with the waiter's increment of
   * sleepers followed by its re-check of word, so no wake-up is lost. */
  atomic_store_explicit(word, step, memory_order_seq_cst);
  shm_ctl_t *me = &s->ctl[s->rank];
  if (__builtin_expect(atomic_load_explicit(&me->sleepers.v, memory_order_seq_cst) != 0, 0)) {
    futex(&me->arrive, FUTEX_WAKE, INT_MAX, NULL);
    futex(&me->reduced.v, FUTEX_WAKE, INT_MAX, NULL);
  }
}

void cddp__shm_wake_all(shm_t *s) {
  for (int q = 0; q < s->world; q++) {
    futex(&s->ctl[q].arrive, FUTEX_WAKE, INT_MAX, NULL);
    futex(&s->ctl[q].reduced.v, FUTEX_WAKE, INT_MAX, NULL);
  }
}

void cddp__shm_liveness_open(shm_t *s) {
  for (int q = 0; q < s->world; q++) {
    s->pidfd[q] = -1;
#ifdef SYS_pidfd_open
    if (q != s->rank && s->ctx->peers[q].pid > 0 && s->ctx->peers[q].pid != getpid())
      s->pidfd[q] = (int)syscall(SYS_pidfd_open, s->ctx->peers[q].pid, 0);
#endif
  }
}

void cddp__shm_liveness_close(shm_t *s) {
  for (int q = 0; q < s->world; q++) {
    if (s->pidfd[q] >= 0) close(s->pidfd[q]);
    s->pidfd[q] = -1;
  }
}

static int peer_exited(shm_t *s, int q) {
  if (s->pidfd[q] >= 0) {
    struct pollfd p = {.fd = s->pidfd[q], .events = POLLIN};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP));
  }
  int pid = s->ctx->peers[q].pid;
  return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

cddp_result_t cddp__shm_check_peer(shm_t *s, int q) {
  char name[128];
  if (peer_exited(s, q))
    return cddp__fail(CDDP_REMOTE, "shm %s: %s exited (pid %d)", s->what,
                      cddp__peer_name(s->ctx, q, name, sizeof name), s->ctx->peers[q].pid);
  if (s->ctl && atomic_load_explicit(&s->ctl[q].left.v, memory_order_acquire)) /* no ctl: not mapped yet */
    return cddp__fail(CDDP_REMOTE, "shm %s: %s left the communicator (failed or aborted)",
                      s->what, cddp__peer_name(s->ctx, q, name, sizeof name));
  return CDDP_OK;
}

/* The slow path: sleep on the futex in slices, re-checking everything. */
static cddp_result_t wait_slow(shm_t *s, int q, _Atomic uint32_t *word, uint32_t step,
                               uint64_t deadline) {
  _Atomic uint32_t *sleepers = &s->ctl[q].sleepers.v;
  char name[128];
  for (;;) {
    if (cddp__aborted(s->ctx)) return cddp__fail(CDDP_ABORTED, "shm %s: aborted", s->what);
    cddp_result_t r = cddp__shm_check_peer(s, q);
    /* a peer that posted its last step and then left (destroy) is not a failure */
    if (reached(atomic_load_explicit(word, memory_order_seq_cst), step)) return CDDP_OK;
    if (r != CDDP_OK) return r;
    uint64_t now = cddp__now_ns();
    if (now >= deadline)
      return cddp__fail(CDDP_TIMEOUT, "shm %s: timed out after %d ms waiting for %s (step %u)",
                        s->what, s->ctx->cfg ? s->ctx->cfg->timeout_ms : -1,
                        cddp__peer_name(s->ctx, q, name, sizeof name), step);
    uint64_t ns = deadline - now < SLEEP_SLICE_NS ? deadline - now : SLEEP_SLICE_NS;
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    atomic_fetch_add_explicit(sleepers, 1, memory_order_seq_cst);
    uint32_t v = atomic_load_explicit(word, memory_order_seq_cst);
    if (!reached(v, step)) futex(word, FUTEX_WAIT, v, &ts);
    atomic_fetch_sub_explicit(sleepers, 1, memory_order_relaxed);
    if (reached(atomic_load_explicit(word, memory_order_acquire), step)) return CDDP_OK;
  }
}

cddp_result_t cddp__shm_wait(shm_t *s, int q, _Atomic uint32_t *word, uint32_t step,
                             uint64_t deadline) {
  if (reached(atomic_load_explicit(word, memory_order_acquire), step)) return CDDP_OK;
  uint64_t t0 = cddp__now_ns();
  for (unsigned i = 1;; i++) {
    cpu_relax();
    if (reached(atomic_load_explicit(word, memory_order_acquire), step)) return CDDP_OK;
    if ((i & 63) == 0 && cddp__now_ns() - t0 > s->spin_ns) break;
  }
  return wait_slow(s, q, word, step, deadline);
}

/* The desync check reads the peers' hashes on the 64-byte line that carries their arrive word. */
_Static_assert(offsetof(shm_ctl_t, desc.fp_hash) + sizeof(uint32_t) * 2 <= 64, "fp_hash off the arrive line");

/* The peer's call at step: the latest first step at or before it (a peer inside a longer
 * collective started it earlier); NULL when neither slot tells. */
static const cddp__fp_t *peer_call(const shm_t *s, int q, uint32_t step) {
  const shm_ctl_t *c = &s->ctl[q];
  const cddp__fp_t *best = NULL;
  for (int k = 0; k < 2; k++)
    if (c->fp[k].seq && reached(step, c->fp[k].tag) && (!best || reached(c->fp[k].tag, best->tag))) best = &c->fp[k];
  return best;
}

/* After every peer arrived at the first step of a collective: each must have posted the same
 * call at this same step (the hash is on the line the wait just read). */
static cddp_result_t check_calls(shm_t *s, uint32_t step) {
  const shm_ctl_t *me = &s->ctl[s->rank];
  uint32_t k = step & 1, h = me->desc.fp_hash[k];
  for (int i = 1; i < s->world; i++) {
    int q = (s->rank + i) % s->world;
    if (__builtin_expect(s->ctl[q].desc.fp_step[k] == step && s->ctl[q].desc.fp_hash[k] == h, 1)) continue;
    char name[128];
    return cddp__desync_fail(s->ctx->desync_store, &me->fp[k], peer_call(s, q, step),
                             cddp__peer_name(s->ctx, q, name, sizeof name));
  }
  return CDDP_OK;
}

cddp_result_t cddp__shm_arrive_all(shm_t *s, uint32_t step, uint64_t deadline) {
  shm_ctl_t *me = &s->ctl[s->rank];
  int check = s->fp_next.seq != 0;
  if (check) { /* the first arrival of a checked collective carries its call */
    uint32_t k = step & 1;
    me->fp[k] = s->fp_next;
    me->fp[k].tag = step;
    me->desc.fp_step[k] = step;
    me->desc.fp_hash[k] = cddp__fp_hash(&s->fp_next, step);
    s->fp_next.seq = 0;
  }
  cddp__shm_post(s, &me->arrive, step);
  for (int i = 1; i < s->world; i++) {
    int q = (s->rank + i) % s->world;
    CDDP_CHECK(cddp__shm_wait(s, q, &s->ctl[q].arrive, step, deadline));
  }
  return check ? check_calls(s, step) : CDDP_OK;
}

cddp_result_t cddp__shm_reduced_all(shm_t *s, uint32_t step, uint64_t deadline) {
  cddp__shm_post(s, &s->ctl[s->rank].reduced.v, step);
  for (int i = 1; i < s->world; i++) {
    int q = (s->rank + i) % s->world;
    CDDP_CHECK(cddp__shm_wait(s, q, &s->ctl[q].reduced.v, step, deadline));
  }
  return CDDP_OK;
}

/* prefetch.c - one background thread that gathers the next micro-batch into the slot forward
 * is not reading (prefetch.h). */
#include "trainer/prefetch.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/check.h"

static void *run(void *arg) {
  cddp_prefetch_t *p = arg;
  /* the lowest priority: woken by a request, it must not preempt the compute thread that woke
   * it (measured: the step then waited 2-5 ms for the core); it takes what a core leaves idle */
  setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->queued && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
    if (p->stop) break;
    p->queued = 0, p->busy = 1;
    pthread_mutex_unlock(&p->mu);
    p->task->ops->gather(p->task, p->slot, p->idx, p->n); /* the fields are ours while busy */
    pthread_mutex_lock(&p->mu);
    p->busy = 0;
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

cddp_result_t cddp__prefetch_start(cddp_prefetch_t *p, cddp_task_t *task, int max_n) {
  memset(p, 0, sizeof *p);
  p->task = task;
  if (!(p->idx = malloc((size_t)(max_n > 0 ? max_n : 1) * sizeof *p->idx)))
    return cddp__fail(CDDP_SYSTEM, "prefetch: out of memory");
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  int e = pthread_create(&p->thread, NULL, run, p);
  if (e != 0) {
    cddp__prefetch_stop(p);
    return cddp__fail(CDDP_SYSTEM, "prefetch: cannot start its thread (error %d)", e);
  }
  p->running = 1;
  return CDDP_OK;
}

int cddp__prefetch_request(cddp_prefetch_t *p, const uint64_t key[CDDP_PREFETCH_KEY], int slot,
                           const uint32_t *idx, int n) {
  pthread_mutex_lock(&p->mu);
  if (p->busy) { /* its fields are the thread's until it is done */
    pthread_mutex_unlock(&p->mu);
    return 0;
  }
  memcpy(p->key, key, sizeof p->key);
  memcpy(p->idx, idx, (size_t)n * sizeof *idx);
  p->slot = slot, p->n = n, p->valid = 1, p->queued = 1;
  pthread_mutex_unlock(&p->mu);
  pthread_cond_broadcast(&p->cv); /* unlocked: the thread wakes to a free mutex */
  return 1;
}

int cddp__prefetch_take(cddp_prefetch_t *p, const uint64_t key[CDDP_PREFETCH_KEY], int *busy_slot) {
  pthread_mutex_lock(&p->mu);
  /* a request not begun (no idle core) is dropped: the caller gathers it sooner itself */
  int done = p->valid && !p->queued && !p->busy && memcmp(p->key, key, sizeof p->key) == 0;
  p->queued = 0;
  int slot = done ? p->slot : -1;
  *busy_slot = p->busy ? p->slot : -1;
  p->valid = 0;
  p->takes++, p->hits += slot >= 0;
  pthread_mutex_unlock(&p->mu);
  return slot;
}

void cddp__prefetch_stop(cddp_prefetch_t *p) {
  if (p->running) {
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    p->running = 0;
  }
  if (p->idx) {
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->idx);
    p->idx = NULL;
  }
}

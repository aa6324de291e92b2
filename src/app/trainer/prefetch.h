/* prefetch.h - the next micro-batch gathered by a background thread while the current one
 * computes (data.prefetch). The trainer asks for a batch by its key (epoch, samples consumed,
 * micro-step, rank, world) and the slot to fill; at the next micro-step it takes the batch when
 * the key still matches (after a resize, a recovery or a resume it does not: the trainer
 * gathers on its own thread, as without prefetching). */
#ifndef CDDP_TRAINER_PREFETCH_H
#define CDDP_TRAINER_PREFETCH_H

#include <pthread.h>
#include <stdint.h>

#include "cddp/cddp.h"
#include "trainer/task.h"

#define CDDP_PREFETCH_KEY 5

typedef struct cddp_prefetch {
  cddp_task_t *task;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int running, stop;
  int queued, busy;  /* a request waits for the thread / the thread gathers it */
  int valid;         /* key, slot, idx, n describe the last request, still wanted */
  uint64_t key[CDDP_PREFETCH_KEY];
  int slot, n;
  uint32_t *idx;     /* [max_n] */
  uint64_t hits, takes; /* batches the thread had gathered, of those asked for */
} cddp_prefetch_t;

/* Starts the thread for micro-batches of up to max_n samples. */
cddp_result_t cddp__prefetch_start(cddp_prefetch_t *p, cddp_task_t *task, int max_n);
/* Asks for idx[0..n) in slot (the one forward is not reading), under key; skipped (returns 0)
 * while the thread still gathers an earlier batch. Neither call ever waits for the thread:
 * it helps where a core is free and delays nothing where none is. */
int cddp__prefetch_request(cddp_prefetch_t *p, const uint64_t key[CDDP_PREFETCH_KEY], int slot,
                           const uint32_t *idx, int n);
/* The slot holding the batch of key when the thread has gathered it; else -1 (the last
 * request was for another key, or is not done: one not begun is dropped), and *busy_slot is
 * the slot the thread is still writing (-1: none), which the caller must not fill. */
int cddp__prefetch_take(cddp_prefetch_t *p, const uint64_t key[CDDP_PREFETCH_KEY], int *busy_slot);
/* Stops and joins the thread (a no-op when it never started). */
void cddp__prefetch_stop(cddp_prefetch_t *p);

#endif /* CDDP_TRAINER_PREFETCH_H */

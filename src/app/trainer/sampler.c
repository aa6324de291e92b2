/* sampler.c - one permutation per (seed, epoch) by Fisher-Yates over splitmix64; global batches
 * are windows of it, split by position across ranks and micro-steps (docs/data.md). */
#include "trainer/sampler.h"

#include <stdlib.h>
#include <string.h>

#include "common/check.h"

/* splitmix64 (Steele, Lea, Flood 2014): state += golden gamma, then a 64-bit finaliser. */
static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The epoch's stream starts from seed ^ (epoch * C) with C an odd constant unrelated to the
 * gamma, so two epochs' streams are not shifted copies of one another. */
#define EPOCH_MUL 0xD1B54A32D192ED03ull

static void make_perm(cddp_sampler_t *s) {
  uint64_t st = s->seed ^ (s->epoch * EPOCH_MUL);
  uint32_t *p = s->perm;
  for (size_t i = 0; i < s->n; i++) p[i] = (uint32_t)i;
  /* Fisher-Yates from the top: j uniform in [0, i] by the high half of a 64x64 product
   * (bias < n / 2^64, no rejection, so the stream use is fixed: one draw per i). */
  for (size_t i = s->n; i > 1; i--) {
    uint64_t j = (uint64_t)(((unsigned __int128)splitmix64(&st) * i) >> 64);
    uint32_t t = p[i - 1];
    p[i - 1] = p[j];
    p[j] = t;
  }
  s->perm_epoch = s->epoch;
}

/* Samples an epoch hands out: all of them, or whole global batches only with drop_last. */
static uint64_t epoch_end(const cddp_sampler_t *s) {
  return s->drop_last ? (uint64_t)(s->n / (size_t)s->global_batch) * (uint64_t)s->global_batch
                      : (uint64_t)s->n;
}

cddp_result_t cddp__sampler_init(cddp_sampler_t *s, uint64_t seed, size_t n, int global_batch,
                                int drop_last) {
  memset(s, 0, sizeof *s);
  if (n == 0) return cddp__fail(CDDP_INVALID_ARG, "sampler: the data set is empty");
  if (n > UINT32_MAX)
    return cddp__fail(CDDP_INVALID_ARG, "sampler: %zu samples, at most %u supported", n,
                      UINT32_MAX);
  if (global_batch <= 0)
    return cddp__fail(CDDP_INVALID_ARG, "sampler: global_batch %d must be positive",
                      global_batch);
  if (drop_last && (size_t)global_batch > n)
    return cddp__fail(CDDP_INVALID_ARG,
                      "sampler: global_batch %d is larger than the data set (%zu samples) with "
                      "drop_last: an epoch would have no step",
                      global_batch, n);
  s->seed = seed;
  s->n = n;
  s->global_batch = global_batch;
  s->drop_last = drop_last ? 1 : 0;
  s->perm = malloc(n * sizeof(uint32_t));
  if (!s->perm) return cddp__fail(CDDP_SYSTEM, "sampler: out of memory for %zu indices", n);
  make_perm(s);
  return CDDP_OK;
}

void cddp__sampler_free(cddp_sampler_t *s) {
  if (!s) return;
  free(s->perm);
  memset(s, 0, sizeof *s);
}

int64_t cddp__sampler_steps_per_epoch(const cddp_sampler_t *s) {
  uint64_t gb = (uint64_t)s->global_batch;
  return (int64_t)(s->drop_last ? s->n / gb : (s->n + gb - 1) / gb);
}

cddp_result_t cddp__sampler_restore(cddp_sampler_t *s, uint64_t epoch, uint64_t consumed) {
  uint64_t end = epoch_end(s);
  if (consumed > end || (consumed != end && consumed % (uint64_t)s->global_batch != 0))
    return cddp__fail(CDDP_INVALID_ARG,
                      "sampler state: %llu samples consumed in epoch %llu: expected a multiple "
                      "of the global batch %d below %llu, or %llu (the epoch's end; %zu samples, "
                      "drop_last=%d): was the checkpoint made with another global batch or "
                      "data set?",
                      (unsigned long long)consumed, (unsigned long long)epoch, s->global_batch,
                      (unsigned long long)end, (unsigned long long)end, s->n, s->drop_last);
  /* A state at the epoch's very end is the next epoch's start. */
  if (consumed == end) epoch++, consumed = 0;
  s->epoch = epoch;
  s->consumed = consumed;
  if (s->perm_epoch != epoch) make_perm(s);
  return CDDP_OK;
}

int cddp__sampler_batch_size(const cddp_sampler_t *s) {
  uint64_t left = (uint64_t)s->n - s->consumed;
  return left < (uint64_t)s->global_batch ? (int)left : s->global_batch;
}

int cddp__sampler_micro(cddp_sampler_t *s, int rank, int world, int micro, int micro_batch,
                       uint32_t *idx) {
  if (micro_batch <= 0) return 0;
  if (s->perm_epoch != s->epoch) make_perm(s);
  const uint32_t *win = s->perm + s->consumed;
  int real = cddp__sampler_batch_size(s), count = 0;
  int64_t base = ((int64_t)micro * world + rank) * micro_batch;
  int valid = rank >= 0 && rank < world && micro >= 0;
  for (int k = 0; k < micro_batch; k++) {
    int64_t pos = base + k;
    if (valid && pos < real) {
      idx[k] = win[pos];
      count++;
    } else {
      idx[k] = win[0]; /* padding: a valid row to gather, given zero weight by the caller */
    }
  }
  return count;
}

int cddp__sampler_micro_next(const cddp_sampler_t *s, int rank, int world, int micro,
                             int micro_batch, uint32_t *idx) {
  cddp_sampler_t next = *s; /* shares perm: micro only reads it while the epoch is the same */
  next.consumed += (uint64_t)cddp__sampler_batch_size(s);
  if (next.consumed >= epoch_end(s) || next.perm_epoch != next.epoch) return -1;
  return cddp__sampler_micro(&next, rank, world, micro, micro_batch, idx);
}

int cddp__sampler_advance(cddp_sampler_t *s) {
  s->consumed += (uint64_t)cddp__sampler_batch_size(s);
  if (s->consumed < epoch_end(s)) return 0;
  s->epoch++;
  s->consumed = 0;
  make_perm(s);
  return 1;
}

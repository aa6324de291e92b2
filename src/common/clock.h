/* clock.h - monotonic time and deadlines. */
#ifndef CDDP_COMMON_CLOCK_H
#define CDDP_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t cddp__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A few ns instead of ~20, at the kernel tick's resolution (a few ms), never ahead of
 * cddp__now_ns: good enough for timeouts, not for timing. */
static inline uint64_t cddp__now_coarse_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Deadline timeout_ms from now; a negative timeout means "never". */
static inline uint64_t cddp__deadline_ms(int64_t timeout_ms) {
  return timeout_ms < 0 ? UINT64_MAX : cddp__now_ns() + (uint64_t)timeout_ms * 1000000ull;
}

/* Milliseconds left until deadline (0 when passed, INT32_MAX-ish for "never"). */
static inline int cddp__ms_left(uint64_t deadline) {
  if (deadline == UINT64_MAX) return 0x3fffffff;
  uint64_t now = cddp__now_ns();
  if (now >= deadline) return 0;
  uint64_t ms = (deadline - now + 999999ull) / 1000000ull;
  return ms > 0x3fffffff ? 0x3fffffff : (int)ms;
}

#endif /* CDDP_COMMON_CLOCK_H */

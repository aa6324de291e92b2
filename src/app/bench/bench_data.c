/* bench_data.c - `cddp bench` test data: rank-dependent small integers whose reductions are exact. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "bench/bench.h"
#include "comm/reduce.h"

static inline float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint16_t f32_to_bf16(float f) { /* round to nearest even; our values are exact */
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline double get(const void *buf, cddp_dtype_t dt, size_t i) {
  switch (dt) {
    case CDDP_F32: return ((const float *)buf)[i];
    case CDDP_F64: return ((const double *)buf)[i];
    case CDDP_BF16: return bf16_to_f32(((const uint16_t *)buf)[i]);
    case CDDP_F16: return cddp__f16_to_f32(((const uint16_t *)buf)[i]);
    case CDDP_I32: return ((const int32_t *)buf)[i];
    case CDDP_I64: return (double)((const int64_t *)buf)[i];
    default: return NAN;
  }
}

static inline void set(void *buf, cddp_dtype_t dt, size_t i, double v) {
  switch (dt) {
    case CDDP_F32: ((float *)buf)[i] = (float)v; break;
    case CDDP_F64: ((double *)buf)[i] = v; break;
    case CDDP_BF16: ((uint16_t *)buf)[i] = f32_to_bf16((float)v); break;
    case CDDP_F16: ((uint16_t *)buf)[i] = cddp__f32_to_f16((float)v); break;
    case CDDP_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case CDDP_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    default: break;
  }
}

static inline int value(int rank, size_t i, int mod) {
  return 1 + (int)((i + 3 * (size_t)rank) % (size_t)mod);
}

int cddp__bench_mod(cddp_dtype_t dt, int world) {
  int mod = 5;
  if (dt == CDDP_BF16 && world * mod > 256) mod = 256 / world; /* bf16 holds integers <= 256 exactly */
  if (dt == CDDP_F16 && world * mod > 2048) mod = 2048 / world; /* f16: <= 2048 */
  return mod < 1 ? 1 : mod;
}

void cddp__bench_fill(void *buf, size_t n, cddp_dtype_t dt, int rank, size_t first, int mod) {
  /* v(rank, first + j) has period mod in j: write one period, then copy it along */
  size_t esz = cddp_dtype_size(dt), period = n < (size_t)mod ? n : (size_t)mod;
  for (size_t j = 0; j < period; j++) set(buf, dt, j, value(rank, first + j, mod));
  for (size_t done = period; done < n;) {
    size_t k = done < n - done ? done : n - done; /* done is a whole number of periods */
    memcpy((char *)buf + done * esz, buf, k * esz);
    done += k;
  }
}

void cddp__bench_fill_value(void *buf, size_t n, cddp_dtype_t dt, double val) {
  if (val == 0) {
    memset(buf, 0, n * cddp_dtype_size(dt));
    return;
  }
  for (size_t j = 0; j < n; j++) set(buf, dt, j, val);
}

/* The exact reduction of v(0..world-1, i) for each residue i % mod (mod <= 256). */
static void expected(double *want, cddp_dtype_t dt, cddp_redop_t op, int world, int mod) {
  for (int k = 0; k < mod; k++) {
    double acc = value(0, (size_t)k, mod);
    for (int r = 1; r < world; r++) {
      double v = value(r, (size_t)k, mod);
      if (op == CDDP_MAX) acc = v > acc ? v : acc;
      else if (op == CDDP_MIN) acc = v < acc ? v : acc;
      else acc += v;
    }
    if (op == CDDP_AVG) acc = (dt == CDDP_I32 || dt == CDDP_I64) ? trunc(acc / world) : acc / world;
    want[k] = acc;
  }
}

size_t cddp__bench_check_reduced(const void *buf, size_t n, cddp_dtype_t dt, cddp_redop_t op,
                                 int world, size_t first, int mod) {
  double want[256];
  expected(want, dt, op, world, mod);
  /* AVG of floats is sum * (1/world) or sum / world: allow rounding, exact elsewhere */
  double tol = 0;
  if (op == CDDP_AVG) tol = dt == CDDP_F32 ? 1e-6 : dt == CDDP_F64 ? 1e-14 : dt == CDDP_BF16 ? 1e-2 : dt == CDDP_F16 ? 1e-3 : 0;
  size_t wrong = 0, k = first % (size_t)mod;
  for (size_t j = 0; j < n; j++) {
    double got = get(buf, dt, j), w = want[k];
    if (tol ? !(fabs(got - w) <= tol * fabs(w)) : got != w) wrong++;
    if (++k == (size_t)mod) k = 0;
  }
  return wrong;
}

size_t cddp__bench_check_rank(const void *buf, size_t n, cddp_dtype_t dt, int rank, size_t first,
                              int mod) {
  size_t wrong = 0;
  for (size_t j = 0; j < n; j++) wrong += get(buf, dt, j) != value(rank, first + j, mod);
  return wrong;
}

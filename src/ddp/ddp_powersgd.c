/* ddp_powersgd.c - PowerSGD's per-tensor maths: wire layout, Q's seed, Gram-Schmidt, and the
 * three steps around the two all-reduces (P = M Q; Q = M^T P; A = P Q^T). The GEMMs are BLAS's
 * when the program links one (cddp train does), else portable loops: libcddp itself needs no BLAS. */
#include "ddp/ddp_powersgd.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* weak: resolved when the program has a BLAS, NULL otherwise */
#pragma weak cblas_sgemm

int cddp__psgd_portable_gemm = 0;

/* C (M x N) = op(A) op(B), row-major, op = transpose when t*. The loops keep the long dimension
 * contiguous: the skinny side (N or K) is PowerSGD's rank. */
static void gemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C,
                 int ldc) {
  if (cblas_sgemm && !cddp__psgd_portable_gemm) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, lda,
                B, ldb, 0.0f, C, ldc);
    return;
  }
  for (int i = 0; i < M; i++) memset(C + (size_t)i * (size_t)ldc, 0, (size_t)N * sizeof *C);
  if (ta) { /* C += A[k][i] B[k][j]: row k of A and of B are contiguous */
    for (int k = 0; k < K; k++)
      for (int i = 0; i < M; i++) {
        float a = A[(size_t)k * (size_t)lda + (size_t)i];
        for (int j = 0; j < N; j++) C[(size_t)i * (size_t)ldc + (size_t)j] += a * B[(size_t)k * (size_t)ldb + (size_t)j];
      }
    return;
  }
  for (int i = 0; i < M; i++)
    for (int k = 0; k < K; k++) {
      float a = A[(size_t)i * (size_t)lda + (size_t)k];
      float *c = C + (size_t)i * (size_t)ldc;
      if (tb)
        for (int j = 0; j < N; j++) c[j] += a * B[(size_t)j * (size_t)ldb + (size_t)k];
      else
        for (int j = 0; j < N; j++) c[j] += a * B[(size_t)k * (size_t)ldb + (size_t)j];
    }
}

int cddp__psgd_lowrank(size_t rows, size_t cols, int rank) {
  return cols > 1 && (double)rank * (double)(rows + cols) < (double)rows * (double)cols;
}

size_t cddp__psgd_layout(cddp__psgd_mat_t *m, int count, int rank, size_t *q_floats) {
  size_t w = 0, q = 0, r = (size_t)rank;
  for (int i = 0; i < count; i++) {
    m[i].lowrank = cddp__psgd_lowrank(m[i].rows, m[i].cols, rank);
    m[i].woff = w;
    m[i].qoff = q;
    w += m[i].lowrank ? m[i].rows * r : m[i].rows * m[i].cols;
    if (m[i].lowrank) q += m[i].cols * r;
  }
  *q_floats = q;
  return w;
}

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void cddp__psgd_init_q(float *q, size_t len, uint64_t seed) {
  uint64_t s = seed;
  for (size_t i = 0; i < len; i++) {
    int64_t sum = 0; /* 12 uniforms of 24 bits: mean 6 x 2^24, variance 2^48 */
    for (int k = 0; k < 12; k++) sum += (int64_t)(splitmix(&s) >> 40);
    q[i] = (float)((double)(sum - 6 * (int64_t)(1 << 24)) / (double)(1 << 24));
  }
}

void cddp__psgd_orthogonalize(float *p, size_t rows, int rank, float eps) {
  size_t r = (size_t)rank;
  double before[256]; /* each column's norm as it came in (rank <= 256) */
  for (size_t i = 0; i < r; i++) {
    double nn = 0;
    for (size_t k = 0; k < rows; k++) nn += (double)p[k * r + i] * p[k * r + i];
    before[i] = sqrt(nn);
  }
  for (size_t i = 0; i < r; i++) {
    double nn = 0;
    for (size_t k = 0; k < rows; k++) nn += (double)p[k * r + i] * p[k * r + i];
    /* what the earlier columns left of a dependent column is rounding noise, not a direction:
     * normalised it would be far from orthogonal to them (P = M Q has more columns than M has
     * rank), so it becomes zero and its Q column with it */
    if (sqrt(nn) <= CDDP_PSGD_DEPENDENT * before[i]) {
      for (size_t k = 0; k < rows; k++) p[k * r + i] = 0.0f;
      continue;
    }
    float inv = (float)(1.0 / (sqrt(nn) + (double)eps));
    for (size_t k = 0; k < rows; k++) p[k * r + i] *= inv;
    for (size_t j = i + 1; j < r; j++) {
      double dot = 0;
      for (size_t k = 0; k < rows; k++) dot += (double)p[k * r + i] * p[k * r + j];
      float f = (float)dot;
      for (size_t k = 0; k < rows; k++) p[k * r + j] -= f * p[k * r + i];
    }
  }
}

static int all_zero(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (x[i] != 0.0f) return 0;
  return 1;
}

void cddp__psgd_compress(const cddp__psgd_mat_t *m, int count, int rank, float *grads, const float *residual,
                         float *qstate, float *pwire) {
  for (int i = 0; i < count; i++) {
    const cddp__psgd_mat_t *t = &m[i];
    float *g = grads + t->off;
    size_t len = t->rows * t->cols;
    if (!t->lowrank) {
      memcpy(pwire + t->woff, g, len * sizeof *g);
      continue;
    }
    const float *res = residual + t->off;
    for (size_t k = 0; k < len; k++) g[k] += res[k];
    float *q = qstate + t->qoff;
    if (all_zero(q, t->cols * (size_t)rank)) cddp__psgd_init_q(q, t->cols * (size_t)rank, 0x5eedull + t->off);
    gemm(0, 0, (int)t->rows, rank, (int)t->cols, g, (int)t->cols, q, rank, pwire + t->woff, rank);
  }
}

void cddp__psgd_project(const cddp__psgd_mat_t *m, int count, int rank, const float *grads, float *pwire,
                        float *qwire) {
  for (int i = 0; i < count; i++) {
    const cddp__psgd_mat_t *t = &m[i];
    if (!t->lowrank) continue;
    float *p = pwire + t->woff;
    cddp__psgd_orthogonalize(p, t->rows, rank, CDDP_PSGD_EPS);
    gemm(1, 0, (int)t->cols, rank, (int)t->rows, grads + t->off, (int)t->cols, p, rank, qwire + t->qoff, rank);
  }
}

void cddp__psgd_decode(const cddp__psgd_mat_t *m, int count, int rank, float *grads, float *residual,
                       float *qstate, const float *pwire, const float *qwire, int world, float lowrank_scale,
                       float raw_scale) {
  for (int i = 0; i < count; i++) {
    const cddp__psgd_mat_t *t = &m[i];
    float *g = grads + t->off;
    size_t len = t->rows * t->cols;
    if (!t->lowrank) {
      for (size_t k = 0; k < len; k++) g[k] = pwire[t->woff + k] * raw_scale;
      continue;
    }
    float *q = qstate + t->qoff, *res = residual + t->off;
    size_t qn = t->cols * (size_t)rank;
    for (size_t k = 0; k < qn; k++) q[k] = qwire[t->qoff + k] / (float)world;
    memcpy(res, g, len * sizeof *g); /* M */
    gemm(0, 1, (int)t->rows, (int)t->cols, rank, pwire + t->woff, rank, q, rank, g, (int)t->cols);
    for (size_t k = 0; k < len; k++) res[k] -= g[k];
    if (lowrank_scale != 1.0f)
      for (size_t k = 0; k < len; k++) g[k] *= lowrank_scale;
  }
}

/* ddp_powersgd.h - PowerSGD (Vogels et al. 2019; PyTorch's powerSGD_hook) for DDP buckets: each
 * gradient matrix M (a tensor as shape[0] rows x the rest as columns) plus its error-feedback
 * residual is sent as two thin factors, P = M Q (rows x rank) and Q = M^T P (cols x rank) with P
 * orthonormalised between the two all-reduces; the mean gradient is approximated by P Q^T and
 * what that misses of this rank's own M stays in its residual for the next step. Q is warm-started
 * from the previous step. 1-D tensors, and matrices too small to gain, travel raw in float32.
 * The orchestration (buckets, all-reduces, overlap) is ddp.c's. */
#ifndef CDDP_DDP_POWERSGD_H
#define CDDP_DDP_POWERSGD_H

#include <stddef.h>
#include <stdint.h>

/* Gram-Schmidt's guard: each column is divided by its norm + this, so a zero column stays
 * zero (PyTorch's orthogonalization_epsilon; its default 0 turns a zero column into NaN). */
#define CDDP_PSGD_EPS 1e-8f

/* A column that keeps at most this fraction of its norm after the earlier columns are taken
 * out of it is dependent on them (what is left is rounding noise) and becomes zero. Gram-Schmidt
 * in float32 leaves ~1e-6 of noise; real gradients' columns keep far more than 1e-4. */
#define CDDP_PSGD_DEPENDENT 1e-4

/* One tensor of the gradient buffer and its place on the wire. */
typedef struct cddp__psgd_mat {
  size_t off, rows, cols; /* floats [off, off + rows * cols) of the gradients, row-major */
  size_t woff;            /* in the P wire: its P (rows x rank), or its rows * cols raw floats */
  size_t qoff;            /* low rank only: its Q (cols x rank) in the Q wire and the Q state */
  int lowrank;            /* 1: sent as P and Q; 0: raw */
} cddp__psgd_mat_t;

/* 1 when rank (rows + cols) < rows cols: the factors are smaller than the matrix. */
int cddp__psgd_lowrank(size_t rows, size_t cols, int rank);
/* Fills woff, qoff and lowrank of m[0..count) (off, rows, cols given), tensor after tensor;
 * returns the P wire's floats and sets *q_floats to the Q wire's (= the Q state's). */
size_t cddp__psgd_layout(cddp__psgd_mat_t *m, int count, int rank, size_t *q_floats);
/* q[0..len) = pseudo-random values of mean 0 and variance 1 from seed (a sum of 12 uniforms,
 * integer arithmetic only: the same bits on every machine). */
void cddp__psgd_init_q(float *q, size_t len, uint64_t seed);
/* Orthonormalises the rank columns of p (rows x rank, row-major; rank <= 256) by Gram-Schmidt
 * in order, dot products in double; dependent columns (CDDP_PSGD_DEPENDENT) and zero ones
 * become zero. Deterministic: identical inputs give identical bits on every rank. */
void cddp__psgd_orthogonalize(float *p, size_t rows, int rank, float eps);

/* Step 1, per bucket, when backward has finished m[0..count): for low-rank tensors
 * M = grads + residual (kept in grads), P = M Q into pwire (a Q state that is all zeros, as
 * after a reset or in a checkpoint without it, starts again from its seed); raw tensors are
 * copied into pwire. */
void cddp__psgd_compress(const cddp__psgd_mat_t *m, int count, int rank, float *grads, const float *residual,
                         float *qstate, float *pwire);
/* Step 2, after the P all-reduce (sum): orthonormalises each P in pwire, then qwire Q = M^T P. */
void cddp__psgd_project(const cddp__psgd_mat_t *m, int count, int rank, const float *grads, float *pwire,
                        float *qwire);
/* Step 3, after the Q all-reduce (sum): qstate = Q / world (the warm start of the next step),
 * A = P qstate^T (the world's mean gradient, approximated), residual = M - A, grads = A x
 * lowrank_scale; raw tensors: grads = pwire's sum x raw_scale. */
void cddp__psgd_decode(const cddp__psgd_mat_t *m, int count, int rank, float *grads, float *residual,
                       float *qstate, const float *pwire, const float *qwire, int world, float lowrank_scale,
                       float raw_scale);

/* 1: the portable loops even when the program links a BLAS (tests compare the two). */
extern int cddp__psgd_portable_gemm;

#endif /* CDDP_DDP_POWERSGD_H */

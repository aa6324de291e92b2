/* layer_attn.c - causal multi-head self-attention over c_attn's q|k|v output: per (sample,
 * head) S = q k^T / sqrt(hs) (sgemm), a causal softmax (vector exp; AVX-512, AVX2 or SSE loops
 * from layer_attn_body.h, picked at run time), y = P v (sgemm); backward in four more sgemm and
 * one pass of softmax backward. */
#include <math.h>
#include <string.h>

#include "trainer/gemm.h"
#include "trainer/layers_gpt.h"
#include "trainer/vmath.h"

#define VBODY "trainer/layer_attn_body.h"
#include "trainer/vwidths.h"

static void softmax_rows(float *s, int i0, int i1, int T) {
  switch (cddp__cpu_isa()) {
    case 2: softmax_rows_avx512(s, i0, i1, T); break;
    case 1: softmax_rows_avx2(s, i0, i1, T); break;
    default: softmax_rows_sse(s, i0, i1, T); break;
  }
}
static void dsoftmax_rows(float *ds, const float *p, int T) {
  switch (cddp__cpu_isa()) {
    case 2: dsoftmax_rows_avx512(ds, p, T); break;
    case 1: dsoftmax_rows_avx2(ds, p, T); break;
    default: dsoftmax_rows_sse(ds, p, T); break;
  }
}

/* The causal mask makes the upper right of every T x T product zero: rows are taken in blocks
 * of ATTN_BLOCK, block [r0, r1) against columns [0, r1) only (T = 128: 3/4 of the FLOPs of the
 * full products). */
#ifndef ATTN_BLOCK
#define ATTN_BLOCK 64
#endif

void cddp__attn_forward(float *y, float *att, const float *qkv, int B, int T, int C, int n_head) {
  int hs = C / n_head, ld = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < n_head; h++) {
      const float *q = qkv + (size_t)b * T * ld + (size_t)h * hs, *k = q + C, *v = q + 2 * C;
      float *s = att + ((size_t)b * n_head + h) * T * T;
      float *yh = y + (size_t)b * T * C + (size_t)h * hs;
      for (int r0 = 0; r0 < T; r0 += ATTN_BLOCK) {
        int r1 = r0 + ATTN_BLOCK < T ? r0 + ATTN_BLOCK : T;
        cddp__gemm(CblasNoTrans, CblasTrans, r1 - r0, r1, hs, scale,
                    q + (size_t)r0 * ld, ld, k, ld, 0.0f, s + (size_t)r0 * T, T);
        softmax_rows(s, r0, r1, T);
        cddp__gemm(CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, 1.0f,
                    s + (size_t)r0 * T, T, v, ld, 0.0f, yh + (size_t)r0 * C, C);
      }
    }
}

void cddp__attn_backward(float *dqkv, const float *dy, const float *qkv, const float *att,
                         float *scratch, int B, int T, int C, int n_head) {
  int hs = C / n_head, ld = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < n_head; h++) {
      size_t off = (size_t)b * T * ld + (size_t)h * hs;
      const float *q = qkv + off, *k = q + C, *v = q + 2 * C;
      float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C, *ds = scratch;
      const float *p = att + ((size_t)b * n_head + h) * T * T;
      const float *dyh = dy + (size_t)b * T * C + (size_t)h * hs;
      /* dP = dy v^T (row block [r0, r1) against columns [0, r1)) */
      for (int r0 = 0; r0 < T; r0 += ATTN_BLOCK) {
        int r1 = r0 + ATTN_BLOCK < T ? r0 + ATTN_BLOCK : T;
        cddp__gemm(CblasNoTrans, CblasTrans, r1 - r0, r1, hs, 1.0f,
                    dyh + (size_t)r0 * C, C, v, ld, 0.0f, ds + (size_t)r0 * T, T);
      }
      /* dv = P^T dy: row block [c0, c1) of dv takes rows [c0, T) of P (the rest are zero) */
      for (int c0 = 0; c0 < T; c0 += ATTN_BLOCK) {
        int c1 = c0 + ATTN_BLOCK < T ? c0 + ATTN_BLOCK : T;
        cddp__gemm(CblasTrans, CblasNoTrans, c1 - c0, hs, T - c0, 1.0f,
                    p + (size_t)c0 * T + c0, T, dyh + (size_t)c0 * C, C, 0.0f,
                    dv + (size_t)c0 * ld, ld);
      }
      /* dS = P (dP - sum_j P dP), row by row over the causal part */
      dsoftmax_rows(ds, p, T);
      /* dq = dS k scale, dk = dS^T q scale, blocked as dP and dv */
      for (int r0 = 0; r0 < T; r0 += ATTN_BLOCK) {
        int r1 = r0 + ATTN_BLOCK < T ? r0 + ATTN_BLOCK : T;
        cddp__gemm(CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, scale,
                    ds + (size_t)r0 * T, T, k, ld, 0.0f, dq + (size_t)r0 * ld, ld);
        cddp__gemm(CblasTrans, CblasNoTrans, r1 - r0, hs, T - r0, scale,
                    ds + (size_t)r0 * T + r0, T, q + (size_t)r0 * ld, ld, 0.0f,
                    dk + (size_t)r0 * ld, ld);
      }
    }
}

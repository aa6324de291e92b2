/* gemm_bf16_fma_body.h - the bf16 product's region (gemm_bf16_kern.h) for one vector width,
 * included by gemm_bf16_fma.c through vwidths.h (VF, W, ATTR, NAME). Goto/BLIS blocking: for
 * each block of k, op(B) is packed in panels of NR columns and op(A) in panels of MR rows for
 * each MC rows, every value rounded to bf16 and kept as the fp32 it widens to (its 16 bits
 * shifted up), so that the inner loop is nothing but broadcasts and FMAs: a MR x NR tile of C
 * lives in 2 MR registers while k runs. The packs hold k in the contract's order, each pair's
 * odd k first. */
#define MRW (W == 16 ? 12 : 6) /* 2 MR accumulators + 2 of B + 1 of A: 27 of 32 zmm, 15 of 16 ymm/xmm */
#define NRW (2 * W)

/* Lanes [0, w) x kc values of k into panels of L lanes: panel q at dst + q * L * ks (ks = kc
 * rounded up to even), dst[q L ks + s L + i] = bf16(x(qL + i, s ^ 1)), zero past w or kc, where
 * x(i, k) = src[i * si + k * sk]. The loop that reads src contiguously is the inner one. */
ATTR static void NAME(pack, SFX)(float *dst, int L, const float *src, long si, long sk, int w, int kc) {
  int ks = (kc + 1) & ~1;
  for (int first = 0; first < w; first += L) {
    float *pd = dst + (size_t)(first / L) * L * ks;
    int nl = w - first < L ? w - first : L;
    if (si == 1) { /* lanes contiguous: a row of k at a time */
      for (int s = 0; s < ks; s++) {
        float *d = pd + (size_t)s * L;
        int k = s ^ 1;
        const float *row = src + (long)k * sk + first;
        for (int i = 0; i < L; i++) d[i] = k < kc && i < nl ? bf16_round(row[i]) : 0.0f;
      }
    } else { /* k contiguous: a lane at a time */
      for (int i = 0; i < L; i++) {
        const float *lane = src + (long)(first + i) * si;
        for (int s = 0; s < ks; s += 2) {
          pd[(size_t)s * L + i] = i < nl && s + 1 < kc ? bf16_round(lane[(long)(s + 1) * sk]) : 0.0f;
          pd[(size_t)(s + 1) * L + i] = i < nl ? bf16_round(lane[(long)s * sk]) : 0.0f;
        }
      }
    }
  }
}

/* C[mv, nv] tile = alpha * (A panel . B panel) + beta * C (beta 0: C is not read); ks values
 * of k, A's at a[s * MR + r], B's at b[s * NR + j]. */
ATTR static void NAME(tile, SFX)(const float *a, const float *b, int ks, float *c, int ldc, int mv,
                                 int nv, float alpha, float beta) {
  VF acc[MRW][2];
  for (int r = 0; r < MRW; r++) acc[r][0] = acc[r][1] = (VF){};
  for (int s = 0; s < ks; s++) {
    VF b0, b1;
    memcpy(&b0, b + (size_t)s * NRW, sizeof b0);
    memcpy(&b1, b + (size_t)s * NRW + W, sizeof b1);
#pragma GCC unroll 12
    for (int r = 0; r < MRW; r++) {
      VF av = (VF){} + a[(size_t)s * MRW + r]; /* a product of two bf16 is exact: FMA or not */
      acc[r][0] += av * b0;
      acc[r][1] += av * b1;
    }
  }
  for (int r = 0; r < mv; r++)
    for (int v = 0; v < 2 && nv > W * v; v++) {
      float *cp = c + (size_t)r * ldc + W * v;
      VF x = acc[r][v] * alpha;
#if W > 4 /* FMA in this width: beta * C + x in one rounding, as the contract wants (spelled
           * out: GCC contracts a * b + c only from -O2) */
      if (nv >= W * (v + 1)) {
        if (beta != 0.0f) {
          VF cv;
          memcpy(&cv, cp, sizeof cv);
#if W == 16
          x = (VF)_mm512_fmadd_ps(_mm512_set1_ps(beta), (__m512)cv, (__m512)x);
#else
          x = (VF)_mm256_fmadd_ps(_mm256_set1_ps(beta), (__m256)cv, (__m256)x);
#endif
        }
        memcpy(cp, &x, sizeof x);
        continue;
      }
#endif
      for (int i = 0; i < W && i < nv - W * v; i++) cp[i] = beta != 0.0f ? fmaf(beta, cp[i], x[i]) : x[i];
    }
}

ATTR static void NAME(region, SFX)(int m_lo, int m_hi, int n_lo, int n_hi, int K, float alpha,
                                   const float *A, long a_m, long a_k, const float *B, long b_k,
                                   long b_n, float beta, float *C, int ldc) {
  static __thread void *pack_a, *pack_b;
  static __thread size_t cap_a, cap_b;
  int N = n_hi - n_lo, n_panels = (N + NRW - 1) / NRW, kc_max = cddp__bf16_block_k(K);
  float *bp = cddp__bf16_grow(&pack_b, &cap_b, (size_t)n_panels * NRW * kc_max, sizeof *bp);
  float *ap = cddp__bf16_grow(&pack_a, &cap_a, (size_t)MC * kc_max, sizeof *ap);
  if (!bp || !ap) abort(); /* out of memory for a few hundred KiB: nothing sensible is left */
  for (int k0 = 0; k0 < K; k0 += kc_max) {
    int kc = K - k0 < kc_max ? K - k0 : kc_max, ks = (kc + 1) & ~1;
    float be = k0 == 0 ? beta : 1.0f;
    NAME(pack, SFX)(bp, NRW, B + k0 * b_k + n_lo * b_n, b_n, b_k, N, kc);
    for (int m0 = m_lo; m0 < m_hi; m0 += MC) {
      int mc = m_hi - m0 < MC ? m_hi - m0 : MC;
      NAME(pack, SFX)(ap, MRW, A + m0 * a_m + k0 * a_k, a_m, a_k, mc, kc);
      for (int j0 = 0; j0 < N; j0 += NRW)
        for (int i0 = 0; i0 < mc; i0 += MRW)
          NAME(tile, SFX)(ap + (size_t)i0 * ks, bp + (size_t)j0 * ks, ks,
                          C + (size_t)(m0 + i0) * ldc + n_lo + j0, ldc,
                          mc - i0 < MRW ? mc - i0 : MRW, N - j0 < NRW ? N - j0 : NRW, alpha, be);
    }
  }
}

#undef MRW
#undef NRW

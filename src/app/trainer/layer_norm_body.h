/* layer_norm_body.h - LayerNorm rows and column sums for one vector width, included by
 * layer_norm.c once per instruction set with VF, W, SFX and ATTR defined (as
 * layer_gelu_body.h). Rows whose width is not a multiple of W take the scalar loops' tail. */

ATTR static inline float NAME(hsum, SFX)(VF v) {
  float s = 0.0f;
  for (int l = 0; l < W; l++) s += v[l];
  return s;
}

ATTR static void NAME(ln_forward, SFX)(float *y, float *mean, float *rstd, const float *x,
                                       const float *w, const float *b, int n, int c) {
  for (int r = 0; r < n; r++) {
    const float *xr = x + (size_t)r * c;
    float *yr = y + (size_t)r * c;
    VF s, s2, v, wv, bv;
    memset(&s, 0, sizeof s), memset(&s2, 0, sizeof s2);
    int j = 0;
    for (; j + W <= c; j += W) memcpy(&v, xr + j, sizeof v), s += v;
    float m = NAME(hsum, SFX)(s);
    for (; j < c; j++) m += xr[j];
    m /= (float)c;
    j = 0;
    for (; j + W <= c; j += W) memcpy(&v, xr + j, sizeof v), v -= m, s2 += v * v;
    float var = NAME(hsum, SFX)(s2);
    for (; j < c; j++) var += (xr[j] - m) * (xr[j] - m);
    var /= (float)c;
    float rs = 1.0f / sqrtf(var + CDDP_LN_EPS);
    j = 0;
    for (; j + W <= c; j += W) {
      memcpy(&v, xr + j, sizeof v), memcpy(&wv, w + j, sizeof wv), memcpy(&bv, b + j, sizeof bv);
      v = (v - m) * rs * wv + bv;
      memcpy(yr + j, &v, sizeof v);
    }
    for (; j < c; j++) yr[j] = (xr[j] - m) * rs * w[j] + b[j];
    mean[r] = m, rstd[r] = rs;
  }
}

/* dx += rstd (g - mean(g) - xhat mean(g xhat)), g = dy w; dw += dy xhat, db += dy (the caller
 * zeroed dw, db for accumulate = 0) */
ATTR static void NAME(ln_backward, SFX)(float *dx, float *dw, float *db, const float *dy,
                                        const float *x, const float *w, const float *mean,
                                        const float *rstd, int n, int c) {
  for (int r = 0; r < n; r++) {
    const float *xr = x + (size_t)r * c, *dyr = dy + (size_t)r * c;
    float *dxr = dx + (size_t)r * c;
    float m = mean[r], rs = rstd[r];
    VF sg, sgx, xv, dv, wv, t;
    memset(&sg, 0, sizeof sg), memset(&sgx, 0, sizeof sgx);
    int j = 0;
    for (; j + W <= c; j += W) {
      memcpy(&xv, xr + j, sizeof xv), memcpy(&dv, dyr + j, sizeof dv), memcpy(&wv, w + j, sizeof wv);
      VF xh = (xv - m) * rs, g = dv * wv;
      sg += g, sgx += g * xh;
      memcpy(&t, dw + j, sizeof t), t += dv * xh, memcpy(dw + j, &t, sizeof t);
      memcpy(&t, db + j, sizeof t), t += dv, memcpy(db + j, &t, sizeof t);
    }
    float a = NAME(hsum, SFX)(sg), bx = NAME(hsum, SFX)(sgx);
    for (; j < c; j++) {
      float xh = (xr[j] - m) * rs, g = dyr[j] * w[j];
      a += g, bx += g * xh;
      dw[j] += dyr[j] * xh;
      db[j] += dyr[j];
    }
    a /= (float)c, bx /= (float)c;
    j = 0;
    for (; j + W <= c; j += W) {
      memcpy(&xv, xr + j, sizeof xv), memcpy(&dv, dyr + j, sizeof dv), memcpy(&wv, w + j, sizeof wv);
      VF xh = (xv - m) * rs;
      memcpy(&t, dxr + j, sizeof t);
      t += rs * (dv * wv - a - xh * bx);
      memcpy(dxr + j, &t, sizeof t);
    }
    for (; j < c; j++) {
      float xh = (xr[j] - m) * rs;
      dxr[j] += rs * (dyr[j] * w[j] - a - xh * bx);
    }
  }
}

/* acc[c] += column sums of x [n, c], 4 vectors of columns at a time held across the rows */
ATTR static void NAME(colsum, SFX)(float *acc, const float *x, int n, int c) {
  int j = 0;
  for (; j + 4 * W <= c; j += 4 * W) {
    VF a0, a1, a2, a3, v;
    memcpy(&a0, acc + j, sizeof v), memcpy(&a1, acc + j + W, sizeof v);
    memcpy(&a2, acc + j + 2 * W, sizeof v), memcpy(&a3, acc + j + 3 * W, sizeof v);
    for (int r = 0; r < n; r++) {
      const float *p = x + (size_t)r * c + j;
      memcpy(&v, p, sizeof v), a0 += v;
      memcpy(&v, p + W, sizeof v), a1 += v;
      memcpy(&v, p + 2 * W, sizeof v), a2 += v;
      memcpy(&v, p + 3 * W, sizeof v), a3 += v;
    }
    memcpy(acc + j, &a0, sizeof v), memcpy(acc + j + W, &a1, sizeof v);
    memcpy(acc + j + 2 * W, &a2, sizeof v), memcpy(acc + j + 3 * W, &a3, sizeof v);
  }
  for (; j < c; j++) {
    float a = acc[j];
    for (int r = 0; r < n; r++) a += x[(size_t)r * c + j];
    acc[j] = a;
  }
}

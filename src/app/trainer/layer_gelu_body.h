/* layer_gelu_body.h - the GELU loops for one vector width, included by layer_gelu.c once per
 * instruction set with VF (float vector type), W (its lanes), SFX (name suffix) and ATTR
 * (target attribute) defined. gelu(x) = x/2 (1 + tanh u) = x sigmoid(2u), u = K0 (x + K1 x^3). */
ATTR static void NAME(bias_gelu_rows, SFX)(float *y, float *x, const float *b, int n, int c) {
  for (int r = 0; r < n; r++) {
    float *xr = x + (size_t)r * c, *yr = y + (size_t)r * c;
    int j = 0;
    for (; j + W <= c; j += W) {
      VF v, bv;
      memcpy(&v, xr + j, sizeof v);
      if (b) {
        memcpy(&bv, b + j, sizeof bv);
        v += bv;
        memcpy(xr + j, &v, sizeof v);
      }
      VF u2 = -2.0f * K0 * (v + K1 * v * v * v);
      VF g = v / (1.0f + CDDP_VEXP(u2));
      memcpy(yr + j, &g, sizeof g);
    }
    for (; j < c; j++) {
      if (b) xr[j] += b[j];
      yr[j] = gelu1(xr[j]);
    }
  }
}

/* d/dx x s(2u) = s + x s (1 - s) 2 u', s = sigmoid(2u), u' = K0 (1 + 3 K1 x^2) */
ATTR static void NAME(gelu_backward, SFX)(float *d, const float *x, size_t count) {
  size_t i = 0;
  for (; i + W <= count; i += W) {
    VF v, dv;
    memcpy(&v, x + i, sizeof v);
    memcpy(&dv, d + i, sizeof dv);
    VF s = 1.0f / (1.0f + CDDP_VEXP(-2.0f * K0 * (v + K1 * v * v * v)));
    VF g = s + v * s * (1.0f - s) * (2.0f * K0) * (1.0f + (3.0f * K1) * v * v);
    dv *= g;
    memcpy(d + i, &dv, sizeof dv);
  }
  for (; i < count; i++) d[i] *= gelu1_grad(x[i]);
}

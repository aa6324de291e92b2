/* layer_attn_body.h - the attention's softmax rows for one vector width, included by
 * layer_attn.c once per instruction set with VF, W, SFX and ATTR defined (as
 * layer_gelu_body.h). */

/* Rows [i0, i1) of a causal T x T score matrix s: row i's s[0..i] become probabilities,
 * s[i+1..T) zero. */
ATTR static void NAME(softmax_rows, SFX)(float *s, int i0, int i1, int T) {
  for (int i = i0; i < i1; i++) {
    float *row = s + (size_t)i * T;
    int n = i + 1, j = 0;
    VF mv, v, sv;
    for (int l = 0; l < W; l++) mv[l] = -INFINITY;
    memset(&sv, 0, sizeof sv);
    for (; j + W <= n; j += W) {
      memcpy(&v, row + j, sizeof v);
      mv = (VF)(((__typeof__(v > v))(v > mv) & (__typeof__(v > v))v) |
                (~(__typeof__(v > v))(v > mv) & (__typeof__(v > v))mv));
    }
    float m = -INFINITY;
    for (int l = 0; l < W; l++) m = mv[l] > m ? mv[l] : m;
    for (; j < n; j++) m = row[j] > m ? row[j] : m;
    j = 0;
    for (; j + W <= n; j += W) {
      memcpy(&v, row + j, sizeof v);
      v = CDDP_VEXP(v - m);
      memcpy(row + j, &v, sizeof v);
      sv += v;
    }
    float sum = 0.0f;
    for (int l = 0; l < W; l++) sum += sv[l];
    for (; j < n; j++) sum += row[j] = expf(row[j] - m);
    float inv = 1.0f / sum;
    j = 0;
    for (; j + W <= n; j += W) {
      memcpy(&v, row + j, sizeof v);
      v *= inv;
      memcpy(row + j, &v, sizeof v);
    }
    for (; j < n; j++) row[j] *= inv;
    if (n < T) memset(row + n, 0, sizeof(float) * (size_t)(T - n));
  }
}

/* ds [T,T] holds dP; becomes dS = P (dP - rowsum(P dP)) over the causal part, zero above it. */
ATTR static void NAME(dsoftmax_rows, SFX)(float *ds, const float *p, int T) {
  for (int i = 0; i < T; i++) {
    const float *pr = p + (size_t)i * T;
    float *dr = ds + (size_t)i * T;
    int n = i + 1, j = 0;
    VF a, b, acc;
    memset(&acc, 0, sizeof acc);
    for (; j + W <= n; j += W) {
      memcpy(&a, pr + j, sizeof a);
      memcpy(&b, dr + j, sizeof b);
      acc += a * b;
    }
    float dot = 0.0f;
    for (int l = 0; l < W; l++) dot += acc[l];
    for (; j < n; j++) dot += pr[j] * dr[j];
    j = 0;
    for (; j + W <= n; j += W) {
      memcpy(&a, pr + j, sizeof a);
      memcpy(&b, dr + j, sizeof b);
      b = a * (b - dot);
      memcpy(dr + j, &b, sizeof b);
    }
    for (; j < n; j++) dr[j] = pr[j] * (dr[j] - dot);
    if (n < T) memset(dr + n, 0, sizeof(float) * (size_t)(T - n));
  }
}

/* layer_xent.c - softmax cross-entropy over logits, numerically stable (row maximum
 * subtracted), with argmax hits for accuracy. */
#include <math.h>

#include "trainer/layers.h"

double cddp__xent_forward(float *prob, const float *logits, const uint8_t *y, int n, int k,
                          int *n_correct) {
  double loss = 0.0;
  int hits = 0;
  for (int i = 0; i < n; i++) {
    const float *z = logits + (size_t)i * k;
    float *p = prob + (size_t)i * k;
    int best = 0;
    for (int j = 1; j < k; j++)
      if (z[j] > z[best]) best = j;
    float zmax = z[best];
    float target = y[i] < k ? z[y[i]] : 0.0f; /* read before prob may overwrite z */
    double sum = 0.0;
    for (int j = 0; j < k; j++) {
      float e = expf(z[j] - zmax);
      p[j] = e;
      sum += e;
    }
    float inv = (float)(1.0 / sum);
    for (int j = 0; j < k; j++) p[j] *= inv;
    if (y[i] >= k) {
      loss += NAN;
      continue;
    }
    /* -log softmax(z)[y] = log(sum exp(z - zmax)) - (z[y] - zmax) */
    loss += log(sum) - (double)(target - zmax);
    hits += best == y[i];
  }
  if (n_correct) *n_correct = hits;
  return loss;
}

void cddp__xent_backward(float *dlogits, const float *prob, const uint8_t *y, int n, int k,
                         float scale) {
  for (int i = 0; i < n; i++) {
    const float *p = prob + (size_t)i * k;
    float *d = dlogits + (size_t)i * k;
    for (int j = 0; j < k; j++) d[j] = scale * p[j];
    if (y[i] < k) d[y[i]] -= scale;
  }
}

/* linear_form.c - y = x W^T in the faster of its two forms, measured per shape (linear_form.h).
 * Why two forms: OpenBLAS packs the operand of the product that is long on both sides (W, and
 * under x W^T it packs W transposed, down rows often 4 KiB apart that alias in the caches).
 * On a Zen 4 core, n = 128: x W^T runs at 77-85 GFLOP/s, W x^T at 92-96 with its transpose;
 * for n = 2048 and in = 256 (the GPT) x W^T is the faster. So it is timed, not assumed. */
#include "trainer/linear_form.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/cpu.h"
#include "common/knobs.h"
#include "common/log.h"
#include "trainer/gemm.h"
#include "trainer/layers.h"
#include "trainer/zmm16.h"

#define TRIALS 3      /* timed runs of each form, interleaved; the fastest run counts */
#define WARM_CALLS 2  /* calls of a shape run direct before it is timed: the first ones fault
                       * in their buffers and OpenBLAS's, and would time that */
#define MAX_SHAPES 64 /* a model has a handful (train and eval batch sizes times the layers) */
#define TILE 16       /* the transpose's square: 16 rows of the scratch stay in L1 across it */
#define MIN_OUTPUTS 1024 /* fewer outputs than this: x W^T without a trial (see measure) */

typedef struct shape_form {
  int n, in, out;
  int calls;                /* before its measurement */
  cddp__linear_form_t form; /* AUTO until measured */
} shape_form_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static shape_form_t shapes[MAX_SHAPES];
static int n_shapes, knob_read;
static cddp__linear_form_t forced;

/* The scratch W x^T lands in, per thread, grown on demand and kept. */
static __thread float *scratch;
static __thread size_t scratch_cap;

static cddp__linear_form_t knob_form(void) {
  const char *v = cddp__knob_str(CDDP_KNOB_LINEAR_FORM);
  if (strcmp(v, "direct") == 0) return CDDP_LINEAR_FORM_DIRECT;
  if (strcmp(v, "transposed") == 0) return CDDP_LINEAR_FORM_TRANSPOSED;
  if (strcmp(v, "auto") != 0)
    CDDP_WARN("CDDP_LINEAR_FORM='%s' is not auto, direct or transposed; using auto", v);
  return CDDP_LINEAR_FORM_AUTO;
}

void cddp__linear_form_force(cddp__linear_form_t form) {
  pthread_mutex_lock(&mu);
  forced = form, knob_read = 1, n_shapes = 0;
  pthread_mutex_unlock(&mu);
}

/* The shape's entry, or NULL; under mu. */
static shape_form_t *find(int n, int in, int out) {
  for (int i = 0; i < n_shapes; i++)
    if (shapes[i].n == n && shapes[i].in == in && shapes[i].out == out) return &shapes[i];
  return NULL;
}

/* The shape's entry (a new one when there is room), under mu. */
static shape_form_t *entry(int n, int in, int out) {
  shape_form_t *e = find(n, in, out);
  if (e || n_shapes == MAX_SHAPES) return e;
  shapes[n_shapes] = (shape_form_t){n, in, out, 0, CDDP_LINEAR_FORM_AUTO};
  return &shapes[n_shapes++];
}

static void read_knob(void) {
  if (!knob_read) forced = knob_form(), knob_read = 1;
}

cddp__linear_form_t cddp__linear_form_of(int n, int in, int out) {
  pthread_mutex_lock(&mu);
  read_knob();
  cddp__linear_form_t f = forced;
  const shape_form_t *e = f == CDDP_LINEAR_FORM_AUTO ? find(n, in, out) : NULL;
  if (e) f = e->form;
  pthread_mutex_unlock(&mu);
  return f;
}

/* What this call runs: the forced or measured form, DIRECT while the shape warms up (or past
 * MAX_SHAPES shapes), AUTO when this call is the one to measure it. */
static cddp__linear_form_t this_call(int n, int in, int out) {
  pthread_mutex_lock(&mu);
  read_knob();
  cddp__linear_form_t f = forced;
  if (f == CDDP_LINEAR_FORM_AUTO) {
    shape_form_t *e = entry(n, in, out);
    if (!e) f = CDDP_LINEAR_FORM_DIRECT;
    else if (e->form != CDDP_LINEAR_FORM_AUTO) f = e->form;
    else if (e->calls++ < WARM_CALLS) f = CDDP_LINEAR_FORM_DIRECT;
  }
  pthread_mutex_unlock(&mu);
  return f;
}

static void remember(int n, int in, int out, cddp__linear_form_t form) {
  pthread_mutex_lock(&mu);
  shape_form_t *e = entry(n, in, out);
  if (e) e->form = form;
  pthread_mutex_unlock(&mu);
}

/* x W^T as the layers ran it before the choice existed: with a residual, or a bias and no
 * ReLU (the GPT), y is filled with (res +) bias and the product added with beta = 1, as
 * OpenBLAS's beta = 0 would zero y in a pass of its own; with a ReLU (the MLP), beta = 0 and
 * then bias and ReLU in one pass. Either way y = (res + bias) + acc or acc + bias, the sums
 * the transposed form makes. */
static void direct(float *y, const float *x, const float *w, const float *bias, const float *res,
                   int n, int in, int out, int relu) {
  if (res || (bias && !relu)) {
    for (int i = 0; i < n; i++) {
      float *yr = y + (size_t)i * out;
      const float *rr = res ? res + (size_t)i * out : NULL;
      if (rr && bias)
        for (int j = 0; j < out; j++) yr[j] = rr[j] + bias[j];
      else
        memcpy(yr, rr ? rr : bias, sizeof(float) * (size_t)out);
    }
    cddp__gemm(CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 1.0f, y, out);
    if (relu) cddp__relu_forward(y, y, (size_t)n * out);
    return;
  }
  cddp__gemm(CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
  if (bias) cddp__bias_rows(y, bias, n, out, relu);
  else if (relu) cddp__relu_forward(y, y, (size_t)n * out);
}

/* y[i,j] = (res[i,j] + bias[j]) + s[j,i], then ReLU: the transposed form's epilogue, in
 * squares of TILE x TILE (16 rows of s stay in L1 across one). */
static void epilogue(float *y, const float *s, const float *bias, const float *res, int n,
                     int out, int relu) {
  for (int j0 = 0; j0 < out; j0 += TILE) {
    int j1 = j0 + TILE < out ? j0 + TILE : out;
    for (int i0 = 0; i0 < n; i0 += TILE) {
      int i1 = i0 + TILE < n ? i0 + TILE : n;
      for (int i = i0; i < i1; i++) {
        float *yr = y + (size_t)i * out;
        const float *rr = res ? res + (size_t)i * out : NULL;
        for (int j = j0; j < j1; j++) {
          float v = s[(size_t)j * n + i];
          if (rr) v = (bias ? rr[j] + bias[j] : rr[j]) + v;
          else if (bias) v = v + bias[j];
          yr[j] = relu && !(v > 0.0f) ? 0.0f : v;
        }
      }
    }
  }
}

/* The same sums, each 16 x 16 square transposed in registers: ~20x the scalar loop's speed,
 * which decides whether the transposed form can win at all. */
AVX512_ATTR static void epilogue_avx512(float *y, const float *s, const float *bias,
                                        const float *res, int n, int out, int relu) {
  const __m512 zero = _mm512_setzero_ps();
  for (int j0 = 0; j0 < out; j0 += 16) {
    int nj = out - j0 < 16 ? out - j0 : 16;
    __mmask16 mj = cddp__lanes16(nj);
    __m512 b = bias ? _mm512_maskz_loadu_ps(mj, bias + j0) : zero;
    for (int i0 = 0; i0 < n; i0 += 16) {
      int ni = n - i0 < 16 ? n - i0 : 16;
      __m512i r[16];
      for (int t = 0; t < 16; t++)
        r[t] = t < nj ? _mm512_castps_si512(_mm512_maskz_loadu_ps(cddp__lanes16(ni), s + (size_t)(j0 + t) * n + i0))
                      : _mm512_setzero_si512();
      cddp__transpose16(r); /* r[i] lane t = s[j0 + t, i0 + i] */
      for (int i = 0; i < ni; i++) {
        size_t at = (size_t)(i0 + i) * out + j0;
        __m512 v = _mm512_castsi512_ps(r[i]);
        if (res) {
          __m512 rr = _mm512_maskz_loadu_ps(mj, res + at);
          v = _mm512_add_ps(bias ? _mm512_add_ps(rr, b) : rr, v);
        } else if (bias) {
          v = _mm512_add_ps(v, b);
        }
        if (relu) v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ), v);
        _mm512_mask_storeu_ps(y + at, mj, v);
      }
    }
  }
}

/* s[out,n] = W x^T into the scratch, then the epilogue; 0 when the scratch cannot grow. */
static int transposed(float *y, const float *x, const float *w, const float *bias,
                      const float *res, int n, int in, int out, int relu) {
  size_t need = (size_t)n * out;
  if (need > scratch_cap) {
    free(scratch);
    scratch = aligned_alloc(64, (need * sizeof(float) + 63) & ~(size_t)63);
    scratch_cap = scratch ? need : 0;
    if (!scratch) return 0;
  }
  cddp__gemm(CblasNoTrans, CblasTrans, out, n, in, 1.0f, w, in, x, in, 0.0f, scratch, n);
  if (cddp__cpu_has(CDDP_CPU_AVX512F)) epilogue_avx512(y, scratch, bias, res, n, out, relu);
  else epilogue(y, scratch, bias, res, n, out, relu);
  return 1;
}

static const char *const form_names[] = {"auto", "x W^T", "(W x^T)^T"};

/* Both forms TRIALS times, interleaved, on the call's own operands; the last run is x W^T, so
 * y is right. The transposed form is kept only when it was faster and gave the same bits as
 * x W^T here: OpenBLAS's SkylakeX kernels sum each element in the same order either way, its
 * Haswell and Prescott kernels do not (392-538 of 1,162 shapes differ there), and a choice
 * made by a clock must not change a run's bits. Below MIN_OUTPUTS outputs the comparison
 * proves too little (and there is nothing to gain): x W^T. */
static cddp__linear_form_t measure(float *y, const float *x, const float *w, const float *bias,
                                   const float *res, int n, int in, int out, int relu) {
  uint64_t best[3] = {UINT64_MAX, UINT64_MAX, UINT64_MAX};
  size_t count = (size_t)n * out;
  float *seen = count >= MIN_OUTPUTS ? malloc(count * sizeof *seen) : NULL; /* the transposed form's y */
  int have = 0;
  for (int t = 0; t < TRIALS; t++)
    for (int f = CDDP_LINEAR_FORM_TRANSPOSED; f >= CDDP_LINEAR_FORM_DIRECT; f--) {
      if (f == CDDP_LINEAR_FORM_TRANSPOSED && !seen) continue;
      uint64_t t0 = cddp__now_ns();
      if (f == CDDP_LINEAR_FORM_DIRECT) direct(y, x, w, bias, res, n, in, out, relu);
      else if (!transposed(y, x, w, bias, res, n, in, out, relu)) continue; /* no scratch */
      uint64_t dt = cddp__now_ns() - t0;
      if (dt < best[f]) best[f] = dt;
      if (f == CDDP_LINEAR_FORM_TRANSPOSED && t == TRIALS - 1) memcpy(seen, y, count * sizeof *seen), have = 1;
    }
  int same = have && memcmp(seen, y, count * sizeof *seen) == 0;
  free(seen);
  cddp__linear_form_t pick = same && best[CDDP_LINEAR_FORM_TRANSPOSED] < best[CDDP_LINEAR_FORM_DIRECT]
                                 ? CDDP_LINEAR_FORM_TRANSPOSED : CDDP_LINEAR_FORM_DIRECT;
  CDDP_INFO(CDDP_SUB_TRAIN, "linear %dx%d -> %d: %s %.3f ms, %s %.3f ms (best of %d)%s: %s", n, in, out,
            form_names[CDDP_LINEAR_FORM_DIRECT], best[CDDP_LINEAR_FORM_DIRECT] / 1e6,
            form_names[CDDP_LINEAR_FORM_TRANSPOSED],
            best[CDDP_LINEAR_FORM_TRANSPOSED] == UINT64_MAX ? -1.0 : best[CDDP_LINEAR_FORM_TRANSPOSED] / 1e6,
            TRIALS, !have ? ", too small to compare" : same ? ", the same bits" : ", different bits on this BLAS",
            form_names[pick]);
  return pick;
}

void cddp__linear_xwt(float *y, const float *x, const float *w, const float *bias,
                      const float *res, int n, int in, int out, int relu) {
  if (n <= 0 || out <= 0) return;
  cddp__linear_form_t f = this_call(n, in, out);
  if (f == CDDP_LINEAR_FORM_AUTO) {
    remember(n, in, out, measure(y, x, w, bias, res, n, in, out, relu));
    return;
  }
  if (f == CDDP_LINEAR_FORM_TRANSPOSED && transposed(y, x, w, bias, res, n, in, out, relu)) return;
  direct(y, x, w, bias, res, n, in, out, relu);
}

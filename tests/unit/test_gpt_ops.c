/* test_gpt_ops.c - gpt.c goes through its device table: a table that counts each call and
 * forwards it to the CPU table's entry trains a tiny GPT to the CPU table's bits (loss and
 * every gradient, recompute none and block), every entry the model needs is called through
 * it, and its memory comes from the table's alloc and all goes back to its release. */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "trainer/gpt.h"
#include "trainer/ops.h"

enum { E_ALLOC, E_RELEASE, E_TO_DEVICE, E_FILL_ZERO, E_LINEAR_XWT, E_WEIGHT_ROWS, E_BACKWARD_INPUT, E_XENT_BACKWARD,
       E_LN_FORWARD, E_LN_BACKWARD, E_COLSUM, E_BIAS_GELU, E_GELU_BACKWARD, E_ATTN_FORWARD, E_ATTN_BACKWARD,
       E_EMBED_FORWARD, E_EMBED_BACKWARD, E_HEAD_FORWARD, E_HEAD_BACKWARD, E_SOFTMAX_XENT, E_EVENT_CREATE,
       E_EVENT_DESTROY, E_TO_DEVICE_ASYNC, E_EVENT_WAIT, E_COUNT };
static const char *const entry_names[E_COUNT] = {
    "alloc", "release", "to_device", "fill_zero", "linear_xwt", "linear_backward_weight_rows",
    "linear_backward_input", "xent_backward", "layernorm_forward", "layernorm_backward", "colsum",
    "bias_gelu_forward", "gelu_backward", "attn_forward", "attn_backward", "embed_forward", "embed_backward",
    "head_forward", "head_backward", "softmax_xent", "event_create", "event_destroy", "to_device_async",
    "event_wait"};
static int calls[E_COUNT];

/* counted(E, entry, (params), (args)): a static forwarding to the CPU table's entry */
#define COUNTED(E, ret, entry, params, args) \
  static ret counted_##entry params {        \
    calls[E]++;                              \
    return cddp__ops_cpu.entry args;         \
  }
COUNTED(E_ALLOC, void *, alloc, (size_t b), (b))
COUNTED(E_RELEASE, void, release, (void *p), (p))
COUNTED(E_TO_DEVICE, void, to_device, (void *d, const void *s, size_t b), (d, s, b))
COUNTED(E_EVENT_CREATE, void *, event_create, (void), ())
COUNTED(E_EVENT_DESTROY, void, event_destroy, (void *e), (e))
COUNTED(E_TO_DEVICE_ASYNC, void, to_device_async, (void *d, const void *s, size_t b, void *e), (d, s, b, e))
COUNTED(E_EVENT_WAIT, void, event_wait, (void *e), (e))
COUNTED(E_FILL_ZERO, void, fill_zero, (void *p, size_t b), (p, b))
COUNTED(E_LINEAR_XWT, void, linear_xwt,
        (float *y, const float *x, const float *w, const float *b, const float *r, int n, int in, int out),
        (y, x, w, b, r, n, in, out))
COUNTED(E_WEIGHT_ROWS, void, linear_backward_weight_rows,
        (float *dw, const float *dy, const float *x, int n, int in, int out, int r0, int r1, int acc),
        (dw, dy, x, n, in, out, r0, r1, acc))
COUNTED(E_BACKWARD_INPUT, void, linear_backward_input,
        (float *dx, const float *dy, const float *w, const float *x, int n, int in, int out, int relu),
        (dx, dy, w, x, n, in, out, relu))
COUNTED(E_XENT_BACKWARD, void, xent_backward,
        (float *d, const float *p, const uint8_t *y, int n, int k, float s), (d, p, y, n, k, s))
COUNTED(E_LN_FORWARD, void, layernorm_forward,
        (float *y, float *mean, float *rstd, const float *x, const float *w, const float *b, int n, int c),
        (y, mean, rstd, x, w, b, n, c))
COUNTED(E_LN_BACKWARD, void, layernorm_backward,
        (float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, const float *mean,
         const float *rstd, int n, int c, int acc),
        (dx, dw, db, dy, x, w, mean, rstd, n, c, acc))
COUNTED(E_COLSUM, void, colsum, (float *a, const float *x, int n, int c, int acc), (a, x, n, c, acc))
COUNTED(E_BIAS_GELU, void, bias_gelu_forward, (float *y, float *x, const float *b, int n, int c), (y, x, b, n, c))
COUNTED(E_GELU_BACKWARD, void, gelu_backward, (float *d, const float *x, size_t count), (d, x, count))
COUNTED(E_ATTN_FORWARD, void, attn_forward, (float *y, float *att, const float *qkv, int B, int T, int C, int h),
        (y, att, qkv, B, T, C, h))
COUNTED(E_ATTN_BACKWARD, void, attn_backward,
        (float *dqkv, const float *dy, const float *qkv, const float *att, float *s, int B, int T, int C, int h),
        (dqkv, dy, qkv, att, s, B, T, C, h))
COUNTED(E_EMBED_FORWARD, void, embed_forward,
        (float *x, const uint8_t *tok, const float *wte, const float *wpe, int B, int T, int C),
        (x, tok, wte, wpe, B, T, C))
COUNTED(E_EMBED_BACKWARD, void, embed_backward,
        (float *dwte, float *dwpe, const float *dx, const uint8_t *tok, int B, int T, int C, int acc),
        (dwte, dwpe, dx, tok, B, T, C, acc))
COUNTED(E_HEAD_FORWARD, void, head_forward, (float *l, const float *h, const float *wte, int n, int C, int V),
        (l, h, wte, n, C, V))
COUNTED(E_HEAD_BACKWARD, void, head_backward,
        (float *dh, float *dwte, const float *dl, const float *h, const float *wte, int n, int C, int V, int acc),
        (dh, dwte, dl, h, wte, n, C, V, acc))
COUNTED(E_SOFTMAX_XENT, double, softmax_xent, (float *p, const float *z, const uint8_t *y, int n, int V),
        (p, z, y, n, V))

/* The CPU table with every entry gpt.c needs counted. Everything else is NULL, so a call to
 * an entry the test does not expect crashes rather than passes. */
static cddp_ops_t counting_table(void) {
  cddp_ops_t t = {.name = "counting"};
  t.alloc = counted_alloc, t.release = counted_release, t.to_device = counted_to_device;
  t.fill_zero = counted_fill_zero, t.linear_xwt = counted_linear_xwt;
  t.linear_backward_weight_rows = counted_linear_backward_weight_rows;
  t.linear_backward_input = counted_linear_backward_input, t.xent_backward = counted_xent_backward;
  t.layernorm_forward = counted_layernorm_forward, t.layernorm_backward = counted_layernorm_backward;
  t.colsum = counted_colsum, t.bias_gelu_forward = counted_bias_gelu_forward;
  t.gelu_backward = counted_gelu_backward, t.attn_forward = counted_attn_forward;
  t.attn_backward = counted_attn_backward, t.embed_forward = counted_embed_forward;
  t.embed_backward = counted_embed_backward, t.head_forward = counted_head_forward;
  t.head_backward = counted_head_backward, t.softmax_xent = counted_softmax_xent;
  t.event_create = counted_event_create, t.event_destroy = counted_event_destroy;
  t.to_device_async = counted_to_device_async, t.event_wait = counted_event_wait; /* the batch copies */
  return t;
}

enum { B = 3, T = 6 };

/* Two forward/backward passes (the second accumulating) on ops; loss sums and gradients out. */
static void run(const cddp_ops_t *ops, cddp_gpt_spec_t s, double loss[2], float **grads, size_t *np) {
  cddp_gpt_t *m;
  CHECK_OK(cddp__gpt_create_on(ops, &s, B, &m));
  *np = cddp__gpt_param_count(m);
  float *params = ops->alloc(*np * sizeof(float));
  *grads = ops->alloc(*np * sizeof(float));
  cddp__gpt_bind(m, params, *grads);
  cddp__gpt_init_params(m, 11);
  uint8_t tok[B * T], tgt[B * T];
  for (int i = 0; i < B * T; i++) tok[i] = (uint8_t)((i * 7 + 1) % s.vocab), tgt[i] = (uint8_t)((i * 5 + 3) % s.vocab);
  for (int k = 0; k < 2; k++) {
    /* the first pass copies its batch in place, the second through an input slot (the trainer's
     * overlapped copy: to_device_async + event_wait); the bits must not differ either way */
    loss[k] = k ? cddp__gpt_forward_slot(m, 1, tok, tgt, B, T - 1) : cddp__gpt_forward(m, tok, tgt, B, T);
    cddp__gpt_backward(m, 0.5f, k, NULL, NULL);
  }
  cddp__gpt_destroy(m);
  ops->release(params);
}

static void same_bits_through_the_table(int recompute) {
  cddp_gpt_spec_t s = {.n_layer = 2, .n_head = 2, .d_model = 16, .context = 8, .vocab = 13, .recompute = recompute};
  cddp_ops_t counting = counting_table();
  double want[2], got[2];
  float *gw, *gg;
  size_t np, np2;
  run(&cddp__ops_cpu, s, want, &gw, &np);
  memset(calls, 0, sizeof calls);
  run(&counting, s, got, &gg, &np2);
  CHECK_EQ(np, np2);
  CHECK(memcmp(want, got, sizeof want) == 0);
  CHECK(memcmp(gw, gg, np * sizeof(float)) == 0);
  for (int e = 0; e < E_COUNT; e++)
    if (calls[e] == 0) TEST_FAIL("recompute %d: the GPT never called %s through its table", recompute, entry_names[e]);
  CHECK_EQ(calls[E_ALLOC], calls[E_RELEASE] + 1); /* the gradients, still held */
  CHECK_EQ(calls[E_LINEAR_XWT], 2 * 4 * s.n_layer + (recompute == CDDP_GPT_RECOMPUTE_BLOCK ? 2 * 4 * (s.n_layer - 1) : 0));
  counting.release(gg);
  free(gw);
}

TEST(gpt_through_a_forwarding_table_gives_the_cpu_bits) {
  same_bits_through_the_table(CDDP_GPT_RECOMPUTE_NONE);
  same_bits_through_the_table(CDDP_GPT_RECOMPUTE_BLOCK);
}

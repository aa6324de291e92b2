/* model.h - models as plain functions over one flat parameter buffer and one flat gradient
 * buffer (llm.c style). Layers are laid out in forward order, so backward finishes the
 * buffer from its end towards its start: that is what lets DDP start a bucket's allreduce
 * while backward still runs (see ddp.h). Every buffer and layer call goes through a device
 * table (ops.h): OpenBLAS on the CPU, cuBLAS and our kernels on a GPU. */
#ifndef CDDP_TRAINER_MODEL_H
#define CDDP_TRAINER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/cddp.h"

#define CDDP_MODEL_MAX_LAYERS 8

/* GPT is not built by cddp__model_create: it lives in gpt.h (the trainer picks by kind). */
typedef enum cddp_model_kind { CDDP_MODEL_MLP = 0, CDDP_MODEL_CNN = 1, CDDP_MODEL_GPT = 2 } cddp_model_kind_t;

typedef struct cddp_model_spec {
  cddp_model_kind_t kind;
  int in_c, in_h, in_w;                  /* input image: 1x28x28 for Fashion-MNIST */
  int n_classes;                         /* 10 */
  int hidden[CDDP_MODEL_MAX_LAYERS];     /* MLP: hidden widths (784-h0-h1-...-10); CNN: fc widths */
  int n_hidden;
  int conv_channels[CDDP_MODEL_MAX_LAYERS]; /* CNN: conv3x3(pad 1)+ReLU+maxpool2 per entry */
  int n_conv;
  int kernel;                            /* CNN conv kernel size (odd; padding kernel/2) */
} cddp_model_spec_t;

/* One parameter tensor's place in the flat buffer (names as PyTorch's state_dict would
 * say them: "fc0.weight", "conv1.bias", ...). Weights are [out, in] row-major like torch. */
typedef struct cddp_param_info {
  char name[48];
  int ndim;
  int64_t shape[4];
  size_t offset; /* in floats */
  size_t count;
} cddp_param_info_t;

typedef struct cddp_model cddp_model_t;
struct cddp_ops;

/* Called by backward each time the gradients at [offset, param_count) are final (after each
 * layer's parameter gradients are written), with offsets decreasing. */
typedef void (*cddp_grad_ready_fn)(void *ctx, size_t offset);

/* Validates the spec (one clear cddp__fail line per bad field) and sizes the activations
 * for up to max_batch rows. */
cddp_result_t cddp__model_create(const cddp_model_spec_t *spec, int max_batch, cddp_model_t **out);
/* The same on the device of ops (cddp__ops_for): activations in its memory, every layer
 * through it; the buffers bound, x and y must be its memory too. A CNN on a table without
 * conv2d (CUDA today) is INVALID_ARG naming model.type. */
cddp_result_t cddp__model_create_on(const struct cddp_ops *ops, const cddp_model_spec_t *spec, int max_batch,
                                    cddp_model_t **out);
const struct cddp_ops *cddp__model_ops(const cddp_model_t *m);
void cddp__model_destroy(cddp_model_t *m);
size_t cddp__model_param_count(const cddp_model_t *m);
int cddp__model_n_params(const cddp_model_t *m);                  /* number of tensors */
const cddp_param_info_t *cddp__model_param(const cddp_model_t *m, int i);
/* FLOPs of one sample's forward + backward (for samples/s vs. GEMM peak reports). */
double cddp__model_flops_per_sample(const cddp_model_t *m);

/* The model computes over buffers the caller owns (DDP puts grads in shared memory), in the
 * memory of the model's device. */
void cddp__model_bind(cddp_model_t *m, float *params, float *grads);
/* PyTorch's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases,
 * from a deterministic generator seeded by seed. */
void cddp__model_init_params(cddp_model_t *m, uint64_t seed);

/* Forward of n rows of x ([n, in_c*in_h*in_w] floats), softmax cross-entropy against labels
 * y. Returns the SUM of the per-sample losses (the caller divides); *n_correct gets the
 * number of argmax hits when not NULL. n may be 0. */
double cddp__model_forward(cddp_model_t *m, const float *x, const uint8_t *y, int n, int *n_correct);
/* Backward of the last forward: grads (+)= grad_scale * d(sum loss)/d(params). accumulate=0
 * overwrites the gradient buffer, 1 adds to it. ready (may be NULL) is told as layers finish.
 * The input gradient of the first layer is not computed (nothing needs it). */
void cddp__model_backward(cddp_model_t *m, float grad_scale, int accumulate,
                         cddp_grad_ready_fn ready, void *ready_ctx);

#endif /* CDDP_TRAINER_MODEL_H */

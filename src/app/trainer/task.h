/* task.h - what the trainer trains: a data set and a model behind one small interface, so the
 * loop, DDP, checkpoints and recovery do not care whether it is an image classifier (MLP/CNN
 * on Fashion-MNIST) or a byte-level GPT on the King James Bible. */
#ifndef CDDP_TRAINER_TASK_H
#define CDDP_TRAINER_TASK_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/cddp.h"
#include "trainer/config.h"
#include "trainer/model.h"

typedef struct cddp_task cddp_task_t;

typedef struct cddp_task_ops {
  size_t (*param_count)(cddp_task_t *t);
  int (*n_params)(cddp_task_t *t); /* tensors */
  const cddp_param_info_t *(*param)(cddp_task_t *t, int i);
  void (*bind)(cddp_task_t *t, float *params, float *grads);
  void (*init_params)(cddp_task_t *t, uint64_t seed);
  /* Copies training samples idx[0..n) into input slot `slot` (0 or 1): one slot fills (the
   * prefetch thread, prefetch.h) while forward and backward read the other. */
  void (*gather)(cddp_task_t *t, int slot, const uint32_t *idx, int n);
  /* Loss SUM over the n samples gathered into slot (over every token for text); backward
   * reads the slot too. */
  double (*forward)(cddp_task_t *t, int slot, int n);
  void (*backward)(cddp_task_t *t, float grad_scale, int accumulate, cddp_grad_ready_fn ready, void *ctx);
  /* Evaluation samples [lo, hi): acc[0] += correct predictions, acc[1] += loss sum. */
  void (*eval)(cddp_task_t *t, size_t lo, size_t hi, double acc[2]);
  void (*destroy)(cddp_task_t *t);
} cddp_task_ops_t;

struct cddp_task {
  const cddp_task_ops_t *ops;
  const char *name;       /* "MLP", "CNN", "GPT" */
  size_t n_train, n_eval; /* samples (sequences for text) */
  int units;              /* loss terms per sample: 1, or T tokens */
  const char *unit;       /* "samples" or "tokens" */
  int has_accuracy;       /* eval's acc[0] means something */
};

struct cddp_ops;

/* Loads the data set and builds the model of cfg for micro-batches of up to micro samples on
 * the device of ops (trainer/ops.h): the model's buffers and the bound ones are its memory;
 * the input slots are host memory it copies from fastest (pinned on a GPU), copied in by
 * forward. Errors name the data file / package or the bad model field. */
cddp_result_t cddp__task_create(const cddp_train_config_t *cfg, int micro, const struct cddp_ops *ops,
                                cddp_task_t **out);
cddp_result_t cddp__task_image_create(const cddp_train_config_t *cfg, int micro, const struct cddp_ops *ops,
                                      cddp_task_t **out);
cddp_result_t cddp__task_gpt_create(const cddp_train_config_t *cfg, int micro, const struct cddp_ops *ops,
                                    cddp_task_t **out);

#endif /* CDDP_TRAINER_TASK_H */

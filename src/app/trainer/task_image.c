/* task_image.c - the image task: Fashion-MNIST (data.c) and the MLP / CNN (model.c). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/check.h"
#include "trainer/data.h"
#include "trainer/gemm.h"
#include "trainer/ops.h"
#include "trainer/task.h"

#define EVAL_BATCH 500

typedef struct image_task {
  cddp_task_t base;
  cddp_dataset_t train, test;
  cddp_model_t *model;
  const cddp_ops_t *ops; /* the model's device */
  float *x[2];   /* input slots (host memory the device copies from fastest) */
  uint8_t *y[2];
  float *dx;     /* off the CPU: the rows eval's forward reads, in the device's memory */
  uint8_t *dy;
  float *slot_x[2]; /* off the CPU: each input slot's rows on the device, copied on the copy stream */
  uint8_t *slot_y[2];
  void *copied[2];  /* the event recorded after a slot's copy */
} image_task_t;

/* Off the CPU the rows are copied to the device first; on it forward reads them in place. */
static double forward_rows(image_task_t *m, const float *x, const uint8_t *y, int n, int *correct) {
  if (m->dx) {
    size_t d = (size_t)m->train.c * m->train.h * m->train.w;
    m->ops->to_device(m->dx, x, (size_t)n * d * sizeof(float));
    m->ops->to_device(m->dy, y, (size_t)n);
    x = m->dx, y = m->dy;
  }
  return cddp__model_forward(m->model, x, y, n, correct);
}

static size_t param_count(cddp_task_t *t) { return cddp__model_param_count(((image_task_t *)t)->model); }
static int n_params(cddp_task_t *t) { return cddp__model_n_params(((image_task_t *)t)->model); }
static const cddp_param_info_t *param(cddp_task_t *t, int i) { return cddp__model_param(((image_task_t *)t)->model, i); }
static void bind(cddp_task_t *t, float *p, float *g) { cddp__model_bind(((image_task_t *)t)->model, p, g); }
static void init_params(cddp_task_t *t, uint64_t seed) { cddp__model_init_params(((image_task_t *)t)->model, seed); }

static void gather(cddp_task_t *t, int slot, const uint32_t *idx, int n) {
  image_task_t *m = (image_task_t *)t;
  cddp__dataset_gather(&m->train, idx, n, m->x[slot], m->y[slot]);
}

/* Off the CPU the slot's copy runs on the copy stream, beside the last micro-step's backward
 * (which reads the other slot's rows); the compute stream waits on its event, the host does
 * not. The loss's return is a host wait after it, so the slot may be gathered into again. */
static double forward(cddp_task_t *t, int slot, int n) {
  image_task_t *m = (image_task_t *)t;
  if (!m->dx) return cddp__model_forward(m->model, m->x[slot], m->y[slot], n, NULL);
  size_t d = (size_t)m->train.c * m->train.h * m->train.w;
  m->ops->to_device_async(m->slot_x[slot], m->x[slot], (size_t)n * d * sizeof(float), m->copied[slot]);
  m->ops->to_device_async(m->slot_y[slot], m->y[slot], (size_t)n, m->copied[slot]);
  m->ops->event_wait(m->copied[slot]);
  return cddp__model_forward(m->model, m->slot_x[slot], m->slot_y[slot], n, NULL);
}

static void backward(cddp_task_t *t, float scale, int accumulate, cddp_grad_ready_fn ready, void *ctx) {
  cddp__model_backward(((image_task_t *)t)->model, scale, accumulate, ready, ctx);
}

static void eval(cddp_task_t *t, size_t lo, size_t hi, double acc[2]) {
  image_task_t *m = (image_task_t *)t;
  size_t d = (size_t)m->test.c * m->test.h * m->test.w;
  for (size_t i = lo; i < hi; i += EVAL_BATCH) {
    int n = (int)CDDP_MIN((size_t)EVAL_BATCH, hi - i), correct = 0;
    acc[1] += forward_rows(m, m->test.x + i * d, m->test.y + i, n, &correct);
    acc[0] += correct;
  }
}

static void destroy(cddp_task_t *t) {
  image_task_t *m = (image_task_t *)t;
  cddp__model_destroy(m->model);
  cddp__dataset_free(&m->train);
  cddp__dataset_free(&m->test);
  for (int s = 0; s < 2 && m->ops; s++) m->ops->host_release(m->x[s]), m->ops->host_release(m->y[s]);
  if (m->dx) m->ops->release(m->dx);
  if (m->dy) m->ops->release(m->dy);
  for (int s = 0; s < 2; s++) {
    if (m->slot_x[s]) m->ops->release(m->slot_x[s]);
    if (m->slot_y[s]) m->ops->release(m->slot_y[s]);
    if (m->copied[s]) m->ops->event_destroy(m->copied[s]);
  }
  free(m);
}

static const cddp_task_ops_t image_ops = {param_count, n_params, param, bind, init_params,
                                          gather, forward, backward, eval, destroy};

typedef struct load_job {
  cddp_dataset_t *d;
  const char *dir;
  cddp_result_t r;
  char err[512];
} load_job_t;

/* The test set loads on its own thread while the training set loads: a replacement worker
 * (in-place recovery) has every core to itself while the survivors wait for it. */
static void *load_test(void *arg) {
  load_job_t *j = arg;
  j->r = cddp__dataset_load_fmnist(j->d, j->dir, "test");
  if (j->r != CDDP_OK) snprintf(j->err, sizeof j->err, "%s", cddp_last_error());
  return NULL;
}

cddp_result_t cddp__task_image_create(const cddp_train_config_t *c, int micro, const cddp_ops_t *ops,
                                      cddp_task_t **out) {
  image_task_t *m = calloc(1, sizeof *m);
  if (!m) return cddp__fail(CDDP_SYSTEM, "out of memory");
  m->ops = ops;
  m->base = (cddp_task_t){&image_ops, c->model.kind == CDDP_MODEL_CNN ? "CNN" : "MLP", 0, 0, 1, "samples", 1};
  load_job_t job = {&m->test, c->data_dir, CDDP_OK, ""};
  pthread_t th;
  int threaded = pthread_create(&th, NULL, load_test, &job) == 0;
  if (!threaded) load_test(&job);
  cddp_result_t r = cddp__dataset_load_fmnist(&m->train, c->data_dir, "train");
  if (threaded) pthread_join(th, NULL);
  if (r == CDDP_OK && job.r != CDDP_OK) r = cddp__fail(job.r, "%s", job.err);
  int rows = CDDP_MAX(micro, EVAL_BATCH);
  if (r == CDDP_OK) r = cddp__model_create_on(ops, &c->model, rows, &m->model);
  size_t d = (size_t)m->train.c * m->train.h * m->train.w;
  for (int s = 0; s < 2 && r == CDDP_OK; s++)
    if (!(m->x[s] = ops->host_alloc((size_t)micro * d * sizeof(float))) || !(m->y[s] = ops->host_alloc((size_t)micro)))
      r = cddp__fail(CDDP_SYSTEM, "out of memory");
  if (r == CDDP_OK && ops != &cddp__ops_cpu &&
      (!(m->dx = ops->alloc((size_t)rows * d * sizeof(float))) || !(m->dy = ops->alloc((size_t)rows))))
    r = cddp__fail(CDDP_SYSTEM, "out of %s memory for the input rows", ops->name);
  for (int s = 0; s < 2 && r == CDDP_OK && m->dx; s++)
    if (!(m->slot_x[s] = ops->alloc((size_t)micro * d * sizeof(float))) || !(m->slot_y[s] = ops->alloc((size_t)micro)) ||
        !(m->copied[s] = ops->event_create()))
      r = cddp__fail(CDDP_SYSTEM, "out of %s memory for the input slots", ops->name);
  if (r != CDDP_OK) {
    destroy(&m->base);
    return r;
  }
  m->base.n_train = m->train.n, m->base.n_eval = m->test.n;
  *out = &m->base;
  return CDDP_OK;
}

cddp_result_t cddp__task_create(const cddp_train_config_t *c, int micro, const cddp_ops_t *ops, cddp_task_t **out) {
  CDDP_CHECK(cddp__gemm_set_precision((cddp_precision_t)c->precision)); /* before any data loads */
  if (c->model.kind == CDDP_MODEL_GPT) return cddp__task_gpt_create(c, micro, ops, out);
  return cddp__task_image_create(c, micro, ops, out);
}

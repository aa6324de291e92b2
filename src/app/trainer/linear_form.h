/* linear_form.h - the fully connected layers' product y[n,out] = x[n,in] W[out,in]^T in the form
 * that runs faster for its shape on this machine: the product itself (x W^T), or the product
 * of the transposes (W x^T into a scratch, transposed into y while the bias is added). A
 * shape's third call times both; the transposed form is kept only when it was faster and gave
 * the same bits (OpenBLAS's AVX-512 kernels sum in the same order either way, its older ones
 * do not), so the choice never changes a run's bits (docs/model.md, "Which form"). */
#ifndef CDDP_TRAINER_LINEAR_FORM_H
#define CDDP_TRAINER_LINEAR_FORM_H

typedef enum cddp__linear_form {
  CDDP_LINEAR_FORM_AUTO = 0,   /* measured per shape on first use */
  CDDP_LINEAR_FORM_DIRECT,     /* x W^T */
  CDDP_LINEAR_FORM_TRANSPOSED, /* (W x^T)^T */
} cddp__linear_form_t;

/* y = bias + x W^T, or with res, y = (res + bias) + x W^T (a residual added as torch's
 * x + linear(y) does); then ReLU where relu != 0. bias and res may be NULL; res must not
 * overlap y. */
void cddp__linear_xwt(float *y, const float *x, const float *w, const float *bias,
                      const float *res, int n, int in, int out, int relu);

/* The form a shape runs in: what CDDP_LINEAR_FORM forces, else what its measurement chose
 * (AUTO while it has not run yet). */
cddp__linear_form_t cddp__linear_form_of(int n, int in, int out);

/* Tests: force a form for every later call (AUTO: measure again), forgetting past choices. */
void cddp__linear_form_force(cddp__linear_form_t form);

#endif /* CDDP_TRAINER_LINEAR_FORM_H */

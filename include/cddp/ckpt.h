/* ckpt.h - checkpoints that survive a crash at any instant.
 *
 * Layout: <root>/step-<%09ld>/ holding model.safetensors (weights), state.safetensors
 * (optimizer moments as tensors; step, sampler state, RNG seed, config hash ... in its
 * __metadata__), MANIFEST (size and CRC-32 of each file) and DONE (written last). A
 * checkpoint is built in <root>/.tmp-step-<N>-<pid>/ (each file fsynced), renamed into place,
 * and the root fsynced; older ones beyond `keep` are then removed. Docs: docs/checkpoint.md. */
#ifndef CDDP_CKPT_H
#define CDDP_CKPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cddp/cddp.h"

#ifdef __cplusplus
extern "C" {
#endif
/* what this header declares is libcddp's API: exported from libcddp.so, which hides the rest */
#pragma GCC visibility push(default)

typedef struct cddp_tensor_view {
  const char *name;
  int ndim;
  int64_t shape[4];
  const float *data; /* F32, count = product of shape */
} cddp_tensor_view_t;

typedef struct cddp_meta_kv {
  const char *key;
  const char *value;
} cddp_meta_kv_t;

typedef struct cddp_ckpt_payload {
  const cddp_tensor_view_t *weights; int n_weights; /* -> model.safetensors */
  const cddp_tensor_view_t *state; int n_state;     /* -> state.safetensors */
  const cddp_meta_kv_t *meta; int n_meta;           /* -> state.safetensors __metadata__ */
} cddp_ckpt_payload_t;

/* Writes one safetensors file (not atomic by itself; fsyncs it). */
cddp_result_t cddp_safetensors_write(const char *path, const cddp_tensor_view_t *t, int n,
                                     const cddp_meta_kv_t *meta, int n_meta);

/* Saves checkpoint `step` under root (created if needed), then keeps the newest `keep`
 * (keep <= 0: keep all). On return OK the checkpoint is durable. out_dir (may be NULL) gets
 * its path. */
cddp_result_t cddp_ckpt_save(const char *root, int64_t step, const cddp_ckpt_payload_t *p,
                             int keep, char *out_dir, size_t out_cap);

/* The newest complete, verified checkpoint under root: a broken one (no DONE, bad size or
 * CRC, unparsable) is reported with CDDP_WARN naming it and skipped. NOT_FOUND when none. */
cddp_result_t cddp_ckpt_find_latest(const char *root, char *out_dir, size_t out_cap);
/* The newest step-* directory under root whatever its state (verify it to know), without a
 * warning: what `cddp ckpt verify ROOT` checks. NOT_FOUND when there is none. */
cddp_result_t cddp_ckpt_find_newest(const char *root, char *out_dir, size_t out_cap);
/* Checks DONE, MANIFEST sizes and CRCs, and that both safetensors headers parse. The error
 * names the file and what is wrong. */
cddp_result_t cddp_ckpt_verify(const char *dir);

/* A loaded checkpoint (both files read into memory, verified first). */
typedef struct cddp_ckpt cddp_ckpt_t;
cddp_result_t cddp_ckpt_load(const char *dir, cddp_ckpt_t **out);
void cddp_ckpt_close(cddp_ckpt_t *c);
/* Copies tensor `name` of file "model" or "state" into dst, which holds count floats; an
 * absent name or a different element count is an error naming the tensor. */
cddp_result_t cddp_ckpt_tensor(const cddp_ckpt_t *c, const char *file, const char *name,
                               float *dst, size_t count);
/* A __metadata__ value of state.safetensors, or NULL. */
const char *cddp_ckpt_meta(const cddp_ckpt_t *c, const char *key);
/* Prints a human summary (files, tensors with shapes, metadata) to f, for `cddp ckpt info`. */
cddp_result_t cddp_ckpt_print_info(const char *dir, FILE *f);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif

#endif /* CDDP_CKPT_H */

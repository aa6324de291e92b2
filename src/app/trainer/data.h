/* data.h - data sets in memory: Fashion-MNIST from IDX files (gzip via zlib), validated, cached. */
#ifndef CDDP_TRAINER_DATA_H
#define CDDP_TRAINER_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/cddp.h"

#define CDDP_FMNIST_DIR "/usr/share/datasets/fashion-mnist"

typedef struct cddp_dataset {
  size_t n;          /* samples */
  int c, h, w;       /* 1, 28, 28 */
  float *x;          /* [n, c*h*w], pixels scaled to [0,1] then normalised (mean 0.2860, std 0.3530) */
  uint8_t *y;        /* [n] labels 0..n_classes-1 */
  int n_classes;
  void *map;         /* set when x and y live in a mapped cache file (data_cache.c): read-only */
  size_t map_len;
} cddp_dataset_t;

/* Loads `split` ("train" or "test") from dir (the package's files, *.gz or plain). Errors
 * name the file: missing ("install dataset-fashion-mnist"), wrong magic, wrong sizes, short,
 * labels out of range, images/labels count mismatch. */
cddp_result_t cddp__dataset_load_fmnist(cddp_dataset_t *d, const char *dir, const char *split);
void cddp__dataset_free(cddp_dataset_t *d);
/* Copies rows idx[0..n) into x (n*c*h*w floats) and y. */
void cddp__dataset_gather(const cddp_dataset_t *d, const uint32_t *idx, int n, float *x, uint8_t *y);

/* The decompressed-set cache (data_cache.c, CDDP_DATA_CACHE), keyed by both source files:
 * load maps an entry into d and returns 1, or returns 0; save writes one (errors: none, the
 * cache is only a speed-up). */
struct stat;
int cddp__data_cache_load(cddp_dataset_t *d, const char *split, const char *images, const struct stat *si,
                          const char *labels, const struct stat *sl);
void cddp__data_cache_save(const cddp_dataset_t *d, const char *split, const char *images, const struct stat *si,
                           const char *labels, const struct stat *sl);

#endif /* CDDP_TRAINER_DATA_H */

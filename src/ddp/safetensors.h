/* safetensors.h - internal: the safetensors writer and its strict, bounded reader (ckpt.c's
 * two file formats). Spec: 8-byte little-endian header size N, N bytes of JSON, packed data. */
#ifndef CDDP_DDP_SAFETENSORS_H
#define CDDP_DDP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/ckpt.h"

/* Reader limits: a file beyond them is rejected as malformed, never allocated for. */
#define CDDP__ST_MAX_HEADER 100000000u /* the Rust crate's MAX_HEADER_SIZE */
#define CDDP__ST_MAX_NAME 1024         /* bytes of a tensor name or metadata key */
#define CDDP__ST_MAX_VALUE 1048576     /* bytes of one metadata value */
#define CDDP__ST_MAX_TENSORS 100000
#define CDDP__ST_MAX_META 10000
#define CDDP__ST_MAX_DIMS 8

typedef struct cddp__st_tensor {
  char *name;
  int ndim;
  int64_t shape[CDDP__ST_MAX_DIMS];
  uint64_t count;      /* product of shape */
  uint64_t begin, end; /* data_offsets, relative to the start of the data section */
} cddp__st_tensor_t;

typedef struct cddp__st_file {
  const uint8_t *data; /* start of the data section inside the caller's buffer (borrowed) */
  uint64_t data_len;
  uint64_t header_len; /* N */
  cddp__st_tensor_t *t; /* in header order */
  int n;
  char **keys, **vals; /* __metadata__, in header order */
  int n_meta;
} cddp__st_file_t;

/* Parses and validates a whole file held in buf (dtype F32 only; offsets in range, sorted
 * contiguous cover of the data section, size = count * 4). `what` names the file in the
 * error: "<what>: bad header: ...". out borrows buf; release with cddp__st_free. */
cddp_result_t cddp__st_parse(const char *what, const uint8_t *buf, size_t len,
                             cddp__st_file_t *out);
void cddp__st_free(cddp__st_file_t *f);
const cddp__st_tensor_t *cddp__st_find(const cddp__st_file_t *f, const char *name);
const char *cddp__st_meta(const cddp__st_file_t *f, const char *key);

/* cddp_safetensors_write, also returning the file's size and CRC-32 (zlib crc32). */
cddp_result_t cddp__st_write(const char *path, const cddp_tensor_view_t *t, int n,
                             const cddp_meta_kv_t *meta, int n_meta, uint64_t *size,
                             uint32_t *crc);

#endif /* CDDP_DDP_SAFETENSORS_H */

/* data_text.h - byte-level text data for the GPT: the King James Bible as Debian's bible-kjv
 * prints it (`bible -f Gen1:1-Rev22:21`: 31,102 lines "Ge1:1 In the beginning ...", 4,404,412
 * bytes), split into train and validation by blocks of verses, handed out as sequences of
 * T + 1 bytes by index so that the sampler over sequence indices can serve them. */
#ifndef CDDP_TRAINER_DATA_TEXT_H
#define CDDP_TRAINER_DATA_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/cddp.h"

#define CDDP_KJV_PROGRAM "bible" /* from bible-kjv; its text is bible-kjv-text */
#define CDDP_KJV_RANGE "Gen1:1-Rev22:21"
/* Verses (lines) are grouped in blocks of 100; block k is validation when k % 20 == 19 (15 of
 * the Bible's 312 blocks: 1,500 verses, 4.8%, spread over the whole book), train otherwise.
 * Each split is its blocks' lines concatenated in order. */
#define CDDP_TEXT_BLOCK_LINES 100
#define CDDP_TEXT_VAL_EVERY 20

typedef struct cddp_text {
  uint8_t *bytes;  /* this split's text */
  size_t n_bytes;
  int T;           /* sequence length (the model's context) */
  size_t n_seq;    /* sequences: (n_bytes - 1) / T */
} cddp_text_t;

/* Runs `bible -f Gen1:1-Rev22:21` and returns its output (malloc'd) in *text. A missing
 * program or text names the Debian package to install. */
cddp_result_t cddp__text_read_kjv(uint8_t **text, size_t *n);
/* Splits text (lines ending in '\n'; a last line without one counts too) into train and val as
 * above, for sequences of T + 1 bytes. Copies; the caller frees text. */
cddp_result_t cddp__text_split(const uint8_t *text, size_t n, int T, cddp_text_t *train,
                              cddp_text_t *val);
/* Both: read the KJV and split it. */
cddp_result_t cddp__text_load_kjv(int T, cddp_text_t *train, cddp_text_t *val);
void cddp__text_free(cddp_text_t *t);
/* Sequence i is bytes [i*T, i*T + T]: tokens[k*T ..] = its first T bytes, targets the last T
 * (the same shifted by one). idx[k] < n_seq. */
void cddp__text_gather(const cddp_text_t *t, const uint32_t *idx, int n, uint8_t *tokens,
                      uint8_t *targets);

#endif /* CDDP_TRAINER_DATA_TEXT_H */

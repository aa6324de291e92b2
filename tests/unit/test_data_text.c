/* test_data_text.c - the KJV text (Debian's bible-kjv + bible-kjv-text): size, first and last
 * verses, the train/validation split by blocks of verses, sequences by index, determinism, and
 * the errors (a missing program names the package, T out of range, a split too small). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "trainer/data_text.h"

static size_t count_lines(const uint8_t *p, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; i++) c += p[i] == '\n';
  return c;
}

TEST(split_puts_every_twentieth_block_of_verses_in_validation) {
  /* 4,150 lines "NNNN\n" (the last without '\n'): blocks 19 and 39 (lines 1900-1999,
   * 3900-3999) are validation */
  size_t n = 0;
  uint8_t *text = malloc(4150 * 5);
  for (int i = 0; i < 4150; i++) n += (size_t)sprintf((char *)text + n, i < 4149 ? "%04d\n" : "%04d", i);
  cddp_text_t tr, va;
  CHECK_OK(cddp__text_split(text, n, 7, &tr, &va));
  CHECK_EQ(va.n_bytes, 200 * 5);
  CHECK_EQ(tr.n_bytes, n - 200 * 5);
  CHECK(memcmp(va.bytes, "1900\n1901\n", 10) == 0);
  CHECK(memcmp(va.bytes + 99 * 5, "1999\n3900\n", 10) == 0);
  CHECK(memcmp(tr.bytes + 1899 * 5, "1899\n2000\n", 10) == 0);
  CHECK(memcmp(tr.bytes + tr.n_bytes - 5, "\n4149", 5) == 0);
  CHECK_EQ(tr.n_seq, (tr.n_bytes - 1) / 7);
  CHECK_EQ(va.n_seq, (va.n_bytes - 1) / 7);
  CHECK_EQ(tr.T, 7);
  /* sequence i: bytes [7i, 7i + 7]; targets are the tokens shifted by one */
  uint32_t idx[3] = {0, 5, (uint32_t)tr.n_seq - 1};
  uint8_t tok[21], tgt[21];
  cddp__text_gather(&tr, idx, 3, tok, tgt);
  CHECK(memcmp(tok, "0000\n00", 7) == 0 && memcmp(tgt, "000\n000", 7) == 0);
  CHECK(memcmp(tok + 7, tr.bytes + 35, 7) == 0 && memcmp(tgt + 7, tr.bytes + 36, 7) == 0);
  CHECK(memcmp(tgt + 14, tr.bytes + (tr.n_seq - 1) * 7 + 1, 7) == 0);
  CHECK((tr.n_seq - 1) * 7 + 7 < tr.n_bytes); /* the last sequence's last target is in the text */
  cddp__text_free(&tr), cddp__text_free(&va);
  CHECK(tr.bytes == NULL && tr.n_seq == 0);
  /* errors: T, and a validation split too small (fewer than 2,000 lines: no validation block) */
  CHECK_RESULT(cddp__text_split(text, n, 0, &tr, &va), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "T = 0"));
  CHECK_RESULT(cddp__text_split(text, 1500 * 5, 8, &tr, &va), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "validation split has 0 bytes"));
  CHECK(tr.bytes == NULL && va.bytes == NULL);
  fprintf(stderr, "# %s\n", cddp_last_error());
  free(text);
}

TEST(kjv_has_all_verses_and_splits_deterministically) {
  uint8_t *text;
  size_t n;
  cddp_result_t r = cddp__text_read_kjv(&text, &n);
  if (r != CDDP_OK) TEST_FAIL("%s", cddp_last_error());
  CHECK_EQ(n, 4404412);
  CHECK_EQ(count_lines(text, n), 31102);
  const char *first = "Ge1:1 In the beginning God created the heaven and the earth.\n";
  const char *last = "Rev22:21 The grace of our Lord Jesus Christ be with you all. Amen.\n";
  CHECK(memcmp(text, first, strlen(first)) == 0);
  CHECK(memcmp(text + n - strlen(last), last, strlen(last)) == 0);
  cddp_text_t tr, va, tr2, va2;
  CHECK_OK(cddp__text_load_kjv(128, &tr, &va));
  CHECK_EQ(count_lines(va.bytes, va.n_bytes), 1500); /* blocks 19, 39, ..., 299 */
  CHECK_EQ(count_lines(tr.bytes, tr.n_bytes), 31102 - 1500);
  CHECK_EQ(tr.n_bytes + va.n_bytes, n);
  CHECK(memcmp(tr.bytes, first, strlen(first)) == 0);
  CHECK(memcmp(va.bytes, "Exo14:11 And they said unto Moses", 33) == 0); /* verse 1,901 */
  CHECK_EQ(tr.n_seq, (tr.n_bytes - 1) / 128);
  CHECK_EQ(va.n_seq, (va.n_bytes - 1) / 128);
  fprintf(stderr, "# kjv: %zu bytes; train %zu bytes = %zu sequences of 129, validation %zu bytes "
                  "= %zu sequences\n", n, tr.n_bytes, tr.n_seq, va.n_bytes, va.n_seq);
  CHECK_OK(cddp__text_load_kjv(128, &tr2, &va2));
  CHECK(tr2.n_bytes == tr.n_bytes && memcmp(tr.bytes, tr2.bytes, tr.n_bytes) == 0);
  CHECK(va2.n_bytes == va.n_bytes && memcmp(va.bytes, va2.bytes, va.n_bytes) == 0);
  free(text);
  cddp__text_free(&tr), cddp__text_free(&va), cddp__text_free(&tr2), cddp__text_free(&va2);
}

TEST(missing_bible_program_names_the_package) {
  setenv("PATH", "/nonexistent-dir", 1); /* this test runs in its own process */
  cddp_text_t tr, va;
  CHECK_RESULT(cddp__text_load_kjv(128, &tr, &va), CDDP_NOT_FOUND);
  CHECK(strstr(cddp_last_error(), "bible-kjv"));
  CHECK(tr.bytes == NULL && va.bytes == NULL);
  fprintf(stderr, "# %s\n", cddp_last_error());
}

/* nearest.c - edit distance and the nearest name, for one-line "did you mean" errors. */
#include <string.h>

#include "common/nearest.h"

int cddp__edit_distance(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  if (na > 63 || nb > 63) return 99;
  int row[64];
  for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= na; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= nb; j++) {
      int up = row[j];
      int best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[nb];
}

const char *cddp__nearest(const char *typed, const char *const *names, size_t n) {
  const char *best = NULL;
  int best_d = 99, limit = (int)strlen(typed) / 3;
  for (size_t i = 0; i < n; i++) {
    int d = cddp__edit_distance(typed, names[i]);
    if (d < best_d) best_d = d, best = names[i];
  }
  return best_d <= (limit < 2 ? 2 : limit) ? best : NULL;
}

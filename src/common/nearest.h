/* nearest.h - "did you mean": the closest of a list of names to one mistyped, by edit distance. */
#ifndef CDDP_COMMON_NEAREST_H
#define CDDP_COMMON_NEAREST_H

#include <stddef.h>

/* Levenshtein distance of two short strings (names); 99 when either is over 63 bytes. */
int cddp__edit_distance(const char *a, const char *b);
/* The name of names[0..n-1] nearest to typed, or NULL when none is within a third of its
 * length (at least 2 edits): close enough to be a typo, not a different word. */
const char *cddp__nearest(const char *typed, const char *const *names, size_t n);

#endif /* CDDP_COMMON_NEAREST_H */

/* hugepages.c - see hugepages.h. */
#include "common/hugepages.h"

#include <stdlib.h>
#include <sys/mman.h>

enum { HUGE_ALIGN = 2u << 20 };

void *cddp__huge_alloc(size_t bytes, int *advised) {
  size_t len = ((bytes ? bytes : 1) + HUGE_ALIGN - 1) & ~(size_t)(HUGE_ALIGN - 1);
  void *p = NULL;
  if (posix_memalign(&p, HUGE_ALIGN, len) != 0) return NULL;
  int ok = madvise(p, len, MADV_HUGEPAGE) == 0;
  if (advised) *advised = ok;
  return p;
}

/* hugepages.h - memory on transparent huge pages, for buffers read in strides wide enough that
 * 4 KiB pages miss the TLB (a GPT's activations packed for GEMM, a benchmark's big buffers). */
#ifndef CDDP_COMMON_HUGEPAGES_H
#define CDDP_COMMON_HUGEPAGES_H

#include <stddef.h>

/* bytes (rounded up to 2 MiB) starting on a 2 MiB boundary and advised MADV_HUGEPAGE before they
 * are first touched: what PyTorch's THP_MEM_ALLOC_ENABLE does, and what a large malloc gets
 * where THP is `always` (here it is `madvise`). Freed with free(). NULL when out of memory;
 * *advised (may be NULL) is 0 when the kernel refused the advice (4 KiB pages then). */
void *cddp__huge_alloc(size_t bytes, int *advised);

#endif /* CDDP_COMMON_HUGEPAGES_H */

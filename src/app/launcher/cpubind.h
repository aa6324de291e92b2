/* cpubind.h - which CPUs each local worker may run on (cddp run --cpu-bind). */
#ifndef CDDP_LAUNCHER_CPUBIND_H
#define CDDP_LAUNCHER_CPUBIND_H

#include <sched.h>
#include <stddef.h>

/* Worker `index` of `n` on this node gets the index-th of n equal, contiguous shares of the
 * CPUs in `allowed` (in CPU number order; the first allowed % n shares get one CPU more).
 * Returns the share's CPU count, or 0 when there are fewer allowed CPUs than workers (no
 * binding then: shares would overlap, and the kernel places oversubscribed workers better). */
int cddp__cpu_share(const cpu_set_t *allowed, int n, int index, cpu_set_t *out);

/* "0-3,8" for a set (for logs); returns buf. */
char *cddp__cpu_list(const cpu_set_t *set, char *buf, size_t size);

#endif /* CDDP_LAUNCHER_CPUBIND_H */

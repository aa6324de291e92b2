/* cpubind.c - splits the node's allowed CPUs between the local workers (cddp run --cpu-bind).
 *
 * Why bind: two ranks that meet through shared memory sleep on futexes and wake each other;
 * the kernel's wake-affine placement then tends to put both on ONE CPU and keep them there,
 * even with the other CPU idle. Measured here (2 ranks, 1 MiB allreduce): 190-220 us per
 * call when that happens, 51-60 us when they sit on different CPUs; unbound runs landed in
 * the slow placement in most launches. Open MPI binds to cores by default for the same
 * reason. */
#include <stdio.h>

#include "launcher/cpubind.h"

int cddp__cpu_share(const cpu_set_t *allowed, int n, int index, cpu_set_t *out) {
  CPU_ZERO(out);
  int total = CPU_COUNT(allowed);
  if (n <= 0 || index < 0 || index >= n || total < n) return 0;
  int base = total / n, extra = total % n;
  int first = index * base + (index < extra ? index : extra), count = base + (index < extra);
  for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE && seen < first + count; cpu++) {
    if (!CPU_ISSET(cpu, allowed)) continue;
    if (seen >= first) CPU_SET(cpu, out);
    seen++;
  }
  return count;
}

char *cddp__cpu_list(const cpu_set_t *set, char *buf, size_t size) {
  size_t o = 0;
  buf[0] = '\0';
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
    if (!CPU_ISSET(cpu, set)) continue;
    int last = cpu;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, set)) last++;
    int w = last > cpu ? snprintf(buf + o, size - o, "%s%d-%d", o ? "," : "", cpu, last)
                       : snprintf(buf + o, size - o, "%s%d", o ? "," : "", cpu);
    if (w < 0 || (size_t)w >= size - o) break;
    o += (size_t)w;
    cpu = last;
  }
  return buf;
}

/* hang.c - the agent's watchdog: reads its workers' flight pages and names the one that stalls
 * the others, in seconds instead of the collectives' CDDP_TIMEOUT_MS. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/check.h"
#include "common/io.h"
#include "launcher/hang.h"

void cddp__flight_file_path(const char *dir, int rank, char *buf, size_t size) {
  snprintf(buf, size, "%s/flight-rank%d.page", dir, rank);
}

cddp_result_t cddp__progress_open(cddp__progress_t *p, const char *path, uint64_t now_ns) {
  memset(p, 0, sizeof *p);
  p->since_ns = now_ns;
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return cddp__fail_errno(CDDP_SYSTEM, "cannot make the flight page %s", path);
  void *m = MAP_FAILED;
  if (ftruncate(fd, sizeof(cddp__flight_page_t)) == 0)
    m = mmap(NULL, sizeof(cddp__flight_page_t), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return cddp__fail_errno(CDDP_SYSTEM, "cannot map the flight page %s", path);
  p->page = m;
  return CDDP_OK;
}

void cddp__progress_close(cddp__progress_t *p) {
  if (p->page) munmap((void *)p->page, sizeof *p->page);
  p->page = NULL;
}

static int live(const cddp__progress_t *p) {
  return p->page && __atomic_load_n(&p->page->magic, __ATOMIC_ACQUIRE) == CDDP__FLIGHT_MAGIC;
}

int cddp__hang_find(cddp__progress_t *p, const pid_t *pid, int n, uint64_t now_ns, int timeout_ms,
                    uint64_t remote_since, char *why, size_t size) {
  for (int i = 0; i < n; i++) {
    if (!pid[i] || !live(&p[i])) continue;
    uint64_t seq = __atomic_load_n(&p[i].page->seq, __ATOMIC_ACQUIRE), done = __atomic_load_n(&p[i].page->done, __ATOMIC_ACQUIRE);
    uint64_t beat = __atomic_load_n(&p[i].page->beat, __ATOMIC_ACQUIRE);
    if (seq != p[i].seq || done != p[i].done || beat != p[i].beat)
      p[i].seq = seq, p[i].done = done, p[i].beat = beat, p[i].since_ns = now_ns;
  }
  uint64_t limit = (uint64_t)timeout_ms * 1000000ull;
  for (int i = 0; i < n; i++) {
    if (!pid[i] || !live(&p[i]) || p[i].seq == 0 || now_ns - p[i].since_ns < limit) continue;
    /* stopped first, whatever its page says: a stopped rank is the cause, never a bystander */
    const char *how = cddp__proc_stopped(pid[i]) ? "stopped (SIGSTOP or a debugger)" : NULL;
    /* collective numbers are each process's own (set-up runs differ by rank), so they are not
     * compared; what is: it is outside any collective while a peer waits, stalled, inside one */
    for (int j = 0; j < n && !how && p[i].done == p[i].seq; j++)
      if (j != i && pid[j] && live(&p[j]) && p[j].done < p[j].seq && now_ns - p[j].since_ns >= limit)
        how = "outside any collective while its local peers wait for it inside one";
    if (!how && p[i].done == p[i].seq && remote_since && now_ns > remote_since && now_ns - remote_since >= limit)
      how = "outside any collective while ranks on other nodes wait inside one";
    if (!how) continue;
    const cddp__flight_rec_t *r = &p[i].page->ring[(p[i].seq - 1) % CDDP__FLIGHT_RING];
    char coll[160];
    cddp__flight_describe(r, coll, sizeof coll);
    double idle = (double)(now_ns - p[i].since_ns) / 1e9;
    if (p[i].done < p[i].seq)
      snprintf(why, size, "hung: no progress for %.1f s, inside %s; %s", idle, coll, how);
    else
      snprintf(why, size, "hung: no progress for %.1f s since %s; %s", idle, coll, how);
    return i;
  }
  return -1;
}

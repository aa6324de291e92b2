/* ranks.c - per-rank timings: a rank that is slower than the others is named, not averaged away
 * (metrics came from rank 0 alone, so a slow rank was invisible). */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common/check.h"
#include "trainer/ranks.h"

void cddp__ranks_init(cddp__ranks_t *r, int every, int pct, int windows) {
  memset(r, 0, sizeof *r);
  r->every = every, r->pct = pct, r->windows = windows;
  r->slowest = r->straggler = -1;
}

void cddp__ranks_free(cddp__ranks_t *r) {
  free(r->all);
  free(r->over);
  r->all = NULL, r->over = NULL, r->world = 0;
}

void cddp__ranks_add(cddp__ranks_t *r, double compute_s, double data_s, double optim_s, double comm_s) {
  r->sum[0] += compute_s, r->sum[1] += data_s, r->sum[2] += optim_s, r->sum[3] += comm_s;
  r->steps++;
}

static double busy(const cddp__rank_times_t *t) { return t->compute_ms + t->data_ms + t->optim_ms; }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

cddp_result_t cddp__ranks_judge(cddp__ranks_t *r) {
  int world = r->world;
  r->fresh = 0;
  if (world < 1) return CDDP_OK;
  double *others = calloc((size_t)world, sizeof *others);
  if (!others) return cddp__fail(CDDP_SYSTEM, "out of memory judging per-rank timings");
  int lo = 0, hi = 0;
  for (int i = 1; i < world; i++) {
    if (busy(&r->all[i]) > busy(&r->all[hi])) hi = i;
    if (busy(&r->all[i]) < busy(&r->all[lo])) lo = i;
  }
  r->slowest = hi;
  r->spread = busy(&r->all[lo]) > 0 ? (busy(&r->all[hi]) - busy(&r->all[lo])) / busy(&r->all[lo]) : 0;
  for (int i = 0; i < world && world > 1; i++) {
    int k = 0;
    for (int j = 0; j < world; j++)
      if (j != i) others[k++] = busy(&r->all[j]);
    qsort(others, (size_t)k, sizeof *others, cmp_double);
    double median = k % 2 ? others[k / 2] : (others[k / 2 - 1] + others[k / 2]) / 2;
    double above = median > 0 ? (busy(&r->all[i]) / median - 1) * 100 : 0;
    r->over[i] = above > r->pct ? r->over[i] + 1 : 0;
    if (r->over[i] >= r->windows && r->straggler != i && (r->straggler < 0 || r->over[r->straggler] == 0))
      r->straggler = i, r->fresh = 1, r->calm = 0;
    if (i == r->straggler) r->straggler_pct = above;
  }
  /* it caught up only once it stayed under the line as long as it took to be named: one quiet
   * window on a noisy host neither clears it nor names it a second time */
  if (r->straggler >= 0) r->calm = r->over[r->straggler] == 0 ? r->calm + 1 : 0;
  if (r->straggler >= 0 && r->calm >= r->windows) r->straggler = -1;
  free(others);
  return CDDP_OK;
}

cddp_result_t cddp__ranks_gather(cddp__ranks_t *r, cddp_comm_t *comm) {
  int world = cddp_comm_world(comm);
  enum { F = 6 };
  struct rusage ru;
  double rss_mb = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : 0; /* KiB on Linux */
  double mine[F] = {r->sum[0], r->sum[1], r->sum[2], r->sum[3], (double)r->steps, rss_mb};
  double *got = calloc((size_t)world * F, sizeof *got);
  if (!got) return cddp__fail(CDDP_SYSTEM, "out of memory gathering per-rank timings");
  cddp_result_t ret = cddp_allgather(comm, mine, got, F, CDDP_F64);
  memset(r->sum, 0, sizeof r->sum), r->steps = 0;
  if (ret != CDDP_OK) goto exit;
  if (world != r->world) { /* a re-formed job: its ranks are others */
    cddp__ranks_free(r);
    r->all = calloc((size_t)world, sizeof *r->all), r->over = calloc((size_t)world, sizeof *r->over);
    if (!r->all || !r->over) {
      ret = cddp__fail(CDDP_SYSTEM, "out of memory for per-rank timings");
      goto exit;
    }
    r->world = world, r->straggler = -1, r->calm = 0;
  }
  for (int i = 0; i < world; i++) {
    const double *g = got + F * i;
    double n = g[4] > 0 ? g[4] : 1;
    r->all[i] = (cddp__rank_times_t){g[0] / n * 1e3, g[1] / n * 1e3, g[2] / n * 1e3, g[3] / n * 1e3, g[5]};
  }
  ret = cddp__ranks_judge(r);
exit:
  free(got);
  return ret;
}

/* worker_store.c - the torch workers' TCPStore on the job's store (job/worker_store.h). */
#include <stdlib.h>

#include "job/jobkeys.h"
#include "job/worker_store.h"
#include "store/store_internal.h"

cddp_result_t cddp__job_torch_store_start(cddp_store_server_t **out, const char *host, int port, const char *token,
                                          const char *run_id) {
  return cddp__store_server_start_torch(out, host, port, token, cddp__job_key_in(run_id, CDDP__JK_TORCH_ROUND, 0).s);
}

cddp_result_t cddp__job_torch_store_mark(cddp_store_t *store) {
  return cddp_store_set(store, cddp__job_key(CDDP__JK_TORCH_SERVED, 0, 0).s, CDDP__JOB_FLAG, CDDP__JOB_FLAG_LEN);
}

int cddp__job_torch_store_served(cddp_store_t *store) {
  void *v = NULL;
  size_t len = 0;
  cddp_result_t r = cddp_store_get(store, cddp__job_key(CDDP__JK_TORCH_SERVED, 0, 0).s, &v, &len, 0);
  free(v);
  if (r == CDDP_OK) return 1;
  return r == CDDP_TIMEOUT ? 0 : -1;
}

cddp_result_t cddp__job_torch_store_round(cddp_store_t *store, int round) {
  char v[24];
  size_t n = cddp__job_int_format(round, v, sizeof v);
  return cddp_store_set(store, cddp__job_key(CDDP__JK_TORCH_ROUND, 0, 0).s, v, n);
}

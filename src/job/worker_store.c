/* worker_store.c - the torch workers' TCPStore, served by the agent (job/worker_store.h). */
#include <string.h>

#include "job/worker_store.h"
#include "store/store_internal.h"

cddp_result_t cddp__job_worker_store_start(const char *store_host, cddp_store_server_t **out) {
  return cddp__store_server_start_torch(out, strchr(store_host, ':') ? "::" : NULL, 0, NULL);
}

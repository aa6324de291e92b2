/* store_pending.c - file and TCP stores not landed yet on this branch: they answer INVALID_USAGE. */
#include "common/check.h"
#include "store/store_internal.h"

cddp_result_t cddp_store_file_create(cddp_store_t **out, const char *path) {
  if (out) *out = NULL;
  return cddp__fail(CDDP_INVALID_USAGE, "store file %s: not built yet (store slice 3)", path);
}
cddp_result_t cddp_store_tcp_connect(cddp_store_t **out, const char *host, int port,
                                     const char *token, int timeout_ms) {
  if (out) *out = NULL;
  return cddp__fail(CDDP_INVALID_USAGE, "store tcp %s:%d: not built yet (store slice 2)", host, port);
}
cddp_result_t cddp_store_server_start(cddp_store_server_t **out, const char *host, int port,
                                      const char *token) {
  if (out) *out = NULL;
  return cddp__fail(CDDP_INVALID_USAGE, "store server port %d: not built yet (store slice 2)", port);
}
int cddp_store_server_port(const cddp_store_server_t *srv) { return -1; }
void cddp_store_server_stop(cddp_store_server_t *srv) {}

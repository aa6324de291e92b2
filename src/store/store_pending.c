/* store_pending.c - the file store, not landed yet on this branch: answers INVALID_USAGE. */
#include "common/check.h"
#include "store/store_internal.h"

cddp_result_t cddp_store_file_create(cddp_store_t **out, const char *path) {
  if (out) *out = NULL;
  return cddp__fail(CDDP_INVALID_USAGE, "store file %s: not built yet (store slice 3)", path);
}

/* world_internal.h - what a worker's world holds (cddp_world_t is opaque to callers; the
 * library and its unit tests, which build worlds over an in-memory store, see it here). */
#ifndef CDDP_WORLD_WORLD_INTERNAL_H
#define CDDP_WORLD_WORLD_INTERNAL_H

#include "cddp/world.h"

struct cddp__gen_watch;

struct cddp_world {
  cddp_env_t env;              /* env.gen: the generation comm belongs to */
  cddp_store_t *store;
  cddp_store_server_t *hosted; /* the store rank 0 hosts when no agent does */
  cddp_comm_t *comm;
  int rank, world;
  cddp_comm_config_t cfg;      /* what join was given, kept for the communicators recover builds */
  cddp_store_t *gen_view;      /* the store view the current communicator was built on */
  struct cddp__gen_watch *watch; /* aborts comm when a new generation is announced */
  int late;                    /* a first start whose communicator formed past the generation it
                                  was started in (see cddp_world_replacement) */
  int gone;                    /* see cddp_world_gone */
};

#endif /* CDDP_WORLD_WORLD_INTERNAL_H */

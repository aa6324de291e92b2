/* env.c - cddp_env_read / cddp_env_connect: who a worker is and where its job's store is. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cddp/env.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/sock.h"
#include "common/mpi_step.h"
#include "common/envp.h"
#include "common/launcher.h"
#include "common/slurm_step.h"

/* Integer variable: absent -> dflt; malformed or out of [lo, hi] -> INVALID_ARG naming it. */
static cddp_result_t env_int(const char *name, int dflt, long lo, long hi, int *out) {
  return cddp__envp_int(environ, name, dflt, lo, hi, out);
}

static void copy(char *dst, size_t size, const char *src) { snprintf(dst, size, "%s", src ? src : ""); }

/* The variable that named the master (for "cannot resolve host ... (from X)"), set by the
 * last cddp_env_read. */
static char master_from[64] = "MASTER_ADDR";

/* HOST:PORT or [V6]:PORT. */
static cddp_result_t check_rank(const char *rname, int rank, const char *wname, int world) {
  if (rank >= world) return cddp__fail(CDDP_INVALID_ARG, "%s=%d is not below %s=%d", rname, rank, wname, world);
  return CDDP_OK;
}

/* RANK / WORLD_SIZE / LOCAL_* / GROUP_* shared by the agent and torchrun forms. */
static cddp_result_t read_ranks(cddp_env_t *e) {
  CDDP_CHECK(env_int("WORLD_SIZE", 1, 1, 1 << 24, &e->world_size));
  CDDP_CHECK(env_int("RANK", 0, 0, 1 << 24, &e->rank));
  CDDP_CHECK(check_rank("RANK", e->rank, "WORLD_SIZE", e->world_size));
  CDDP_CHECK(env_int("LOCAL_WORLD_SIZE", 1, 1, 1 << 24, &e->local_world_size));
  CDDP_CHECK(env_int("LOCAL_RANK", 0, 0, 1 << 24, &e->local_rank));
  CDDP_CHECK(check_rank("LOCAL_RANK", e->local_rank, "LOCAL_WORLD_SIZE", e->local_world_size));
  CDDP_CHECK(env_int("GROUP_WORLD_SIZE", 1, 1, 1 << 24, &e->nnodes));
  CDDP_CHECK(env_int("GROUP_RANK", 0, 0, 1 << 24, &e->node_rank));
  return check_rank("GROUP_RANK", e->node_rank, "GROUP_WORLD_SIZE", e->nnodes);
}

/* MASTER_ADDR / MASTER_PORT, required when the world has more than one rank. */
static cddp_result_t read_master(cddp_env_t *e, const char *why) {
  const char *a = getenv("MASTER_ADDR");
  if (a && *a) copy(e->master_addr, sizeof e->master_addr, a);
  CDDP_CHECK(env_int("MASTER_PORT", 0, 1, 65535, &e->master_port));
  if (e->world_size > 1 && !e->master_port)
    return cddp__fail(CDDP_INVALID_ARG, "%s: MASTER_PORT is unset (rank 0 hosts the store there)", why);
  if (e->world_size > 1 && !(a && *a))
    return cddp__fail(CDDP_INVALID_ARG, "%s: MASTER_ADDR is unset (rank 0's host)", why);
  return CDDP_OK;
}

static cddp_result_t read_torchrun(cddp_env_t *e) {
  CDDP_CHECK(read_ranks(e));
  CDDP_CHECK(env_int("TORCHELASTIC_RESTART_COUNT", 0, 0, 1 << 30, &e->restart_count));
  CDDP_CHECK(env_int("TORCHELASTIC_MAX_RESTARTS", 0, 0, 1 << 30, &e->max_restarts));
  copy(e->run_id, sizeof e->run_id, getenv("TORCHELASTIC_RUN_ID") ? getenv("TORCHELASTIC_RUN_ID") : "torchrun");
  return read_master(e, "RANK and WORLD_SIZE are set");
}

static cddp_result_t read_slurm(cddp_env_t *e) {
  cddp__slurm_step_t st;
  CDDP_CHECK(cddp__slurm_step_read(environ, &st));
  e->rank = st.rank, e->world_size = st.world;
  e->local_rank = st.local_rank, e->local_world_size = st.local_world;
  e->node_rank = st.node_rank, e->nnodes = st.nnodes;
  e->master_port = st.master_port;
  copy(e->master_addr, sizeof e->master_addr, st.master_addr);
  copy(master_from, sizeof master_from, st.master_var);
  copy(e->run_id, sizeof e->run_id, st.run_id);
  return CDDP_OK;
}

static cddp_result_t read_mpi(cddp_env_t *e) {
  cddp__mpi_step_t st;
  CDDP_CHECK(cddp__mpi_step_read(environ, &st));
  e->rank = st.rank, e->world_size = st.world;
  e->local_rank = st.local_rank, e->local_world_size = st.local_world;
  e->node_rank = st.node_rank, e->nnodes = st.nnodes;
  e->master_port = st.master_port;
  copy(e->master_addr, sizeof e->master_addr, st.master_addr);
  copy(e->run_id, sizeof e->run_id, st.run_id);
  return CDDP_OK;
}

cddp_result_t cddp_env_read(cddp_env_t *env) {
  cddp_env_t e;
  memset(&e, 0, sizeof e);
  e.world_size = e.local_world_size = e.nnodes = 1;
  copy(e.master_addr, sizeof e.master_addr, "127.0.0.1");
  copy(e.run_id, sizeof e.run_id, "local");
  copy(master_from, sizeof master_from, "MASTER_ADDR");
  CDDP_CHECK(cddp_token_from_env(e.token, sizeof e.token));
  e.source = cddp__launcher_detect(environ);
  if (e.source == CDDP_ENV_AGENT) {
    const char *store = getenv("CDDP_STORE");
    CDDP_CHECK(read_ranks(&e));
    CDDP_CHECK(env_int("CDDP_ROUND", 0, 0, 1 << 30, &e.round));
    CDDP_CHECK(env_int("CDDP_RESTART_COUNT", 0, 0, 1 << 30, &e.restart_count));
    CDDP_CHECK(env_int("CDDP_MAX_RESTARTS", 0, 0, 1 << 30, &e.max_restarts));
    CDDP_CHECK(env_int("CDDP_GEN", 0, 0, 1 << 30, &e.gen));
    CDDP_CHECK(env_int("CDDP_REPLACEMENT", 0, 0, 1, &e.replacement));
    const char *mode = getenv("CDDP_RESTART_MODE");
    if (mode && *mode && strcmp(mode, "all") && strcmp(mode, "replace"))
      return cddp__fail(CDDP_INVALID_ARG, "CDDP_RESTART_MODE=%s is not all or replace", mode);
    e.replace_mode = mode && !strcmp(mode, "replace");
    copy(e.run_id, sizeof e.run_id, getenv("CDDP_RUN_ID") ? getenv("CDDP_RUN_ID") : "cddp");
    copy(master_from, sizeof master_from, "CDDP_STORE");
    CDDP_CHECK(cddp__envp_hostport("CDDP_STORE", store, e.master_addr, sizeof e.master_addr, &e.master_port));
  } else if (e.source == CDDP_ENV_TORCHRUN) {
    CDDP_CHECK(read_torchrun(&e));
  } else if (e.source == CDDP_ENV_SLURM) {
    CDDP_CHECK(read_slurm(&e));
  } else if (e.source == CDDP_ENV_MPI) {
    CDDP_CHECK(read_mpi(&e));
  }
  *env = e;
  cddp__log_set_rank(e.world_size > 1 || e.source != CDDP_ENV_NONE ? e.rank : -1);
  CDDP_INFO(CDDP_SUB_ENV, "rank %d of %d (local %d of %d, node %d of %d), run %s, store %s:%d, launcher %s", e.rank,
            e.world_size, e.local_rank, e.local_world_size, e.node_rank, e.nnodes, e.run_id, e.master_addr,
            e.master_port, cddp__launcher_name(e.source));
  return CDDP_OK;
}

cddp_result_t cddp_env_connect(const cddp_env_t *env, int timeout_ms, cddp_store_t **store,
                               cddp_store_server_t **hosted) {
  cddp_result_t ret = CDDP_OK;
  cddp_store_t *base = NULL;
  cddp_store_server_t *srv = NULL;
  char prefix[160], bound[64] = "", why[400];
  *store = NULL;
  if (hosted) *hosted = NULL;
  snprintf(prefix, sizeof prefix, "%s/", env->run_id);
  if (env->source == CDDP_ENV_NONE || env->world_size == 1) {
    if (env->source == CDDP_ENV_AGENT) goto connect; /* the agent's store, even for one rank */
    CDDP_CHECK(cddp_store_mem_create(&base));
    goto view;
  }
  /* every rank, rank 0 too (it reaches its own store on 127.0.0.1): a master name that does
   * not exist fails everywhere at once instead of leaving rank 0 waiting for the others */
  CDDP_CHECK(cddp__sock_host_resolves(env->master_addr, master_from));
  if (env->source != CDDP_ENV_AGENT && env->rank == 0) {
    if (!hosted)
      return cddp__fail(CDDP_INVALID_ARG, "rank 0 hosts the store here (no cddp run agent): pass a hosted pointer");
    /* on the master's own address, where the other ranks reach it (sock.h: else every interface) */
    if (cddp_store_server_start(&srv, cddp__sock_listen_addr_for(env->master_addr, bound, sizeof bound, why, sizeof why)
                                          ? bound : NULL, env->master_port, env->token) != CDDP_OK)
      return cddp__fail(CDDP_SYSTEM, "rank 0 cannot host the store on port %d: %s", env->master_port,
                        cddp_last_error());
  }
connect:;
  const char *host = srv ? (bound[0] ? bound : "127.0.0.1") : env->master_addr;
  ret = cddp_store_tcp_connect(&base, host, env->master_port, env->token, timeout_ms);
  if (ret != CDDP_OK) {
    cddp_store_server_stop(srv);
    return ret; /* the client named host:port */
  }
view:
  ret = cddp_store_prefix_create(store, base, prefix, 1);
  if (ret != CDDP_OK) {
    cddp_store_close(base);
    cddp_store_server_stop(srv);
    return ret;
  }
  if (hosted) *hosted = srv;
  return CDDP_OK;
}

void cddp_env_disconnect(cddp_store_t *store, cddp_store_server_t *hosted) {
  cddp_store_close(store);
  cddp_store_server_stop(hosted);
}

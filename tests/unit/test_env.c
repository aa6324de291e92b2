/* test_env.c - cddp_env_read: the agent contract, torchrun, Slurm (not the batch step), MPI, errors. */
#include <stdlib.h>
#include <string.h>

#include "cddp/env.h"
#include "test.h"

/* Each TEST runs in its own process, so clearing the environment is safe. */
static void env(const char *const *kv) {
  clearenv();
  for (; *kv; kv += 2) setenv(kv[0], kv[1], 1);
}
#define ENV(...) env((const char *const[]){__VA_ARGS__, NULL})

TEST(env_nothing_is_a_world_of_one) {
  clearenv();
  cddp_env_t e;
  CHECK_OK(cddp_env_read(&e));
  CHECK_EQ(e.source, CDDP_ENV_NONE);
  CHECK_EQ(e.world_size, 1);
  CHECK_EQ(e.rank, 0);
  cddp_store_t *s;
  CHECK_OK(cddp_env_connect(&e, 1000, &s, NULL));
  CHECK_OK(cddp_store_set(s, "k", "v", 1));
  int64_t n;
  CHECK_OK(cddp_store_num_keys(s, &n));
  CHECK_EQ(n, 1);
  cddp_env_disconnect(s, NULL);
}

TEST(env_agent_contract_first) {
  ENV("CDDP_STORE", "10.0.0.5:29400", "RANK", "3", "WORLD_SIZE", "4", "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "2",
      "GROUP_RANK", "1", "GROUP_WORLD_SIZE", "2", "CDDP_RUN_ID", "job9", "CDDP_ROUND", "2", "CDDP_RESTART_COUNT", "1",
      "CDDP_MAX_RESTARTS", "3", "CDDP_TOKEN", "sekrit", "SLURM_PROCID", "0", "SLURM_STEP_ID", "0",
      "OMPI_COMM_WORLD_RANK", "0");
  cddp_env_t e;
  CHECK_OK(cddp_env_read(&e));
  CHECK_EQ(e.source, CDDP_ENV_AGENT);
  CHECK_EQ(e.rank, 3);
  CHECK_EQ(e.world_size, 4);
  CHECK_EQ(e.local_rank, 1);
  CHECK_EQ(e.local_world_size, 2);
  CHECK_EQ(e.node_rank, 1);
  CHECK_EQ(e.nnodes, 2);
  CHECK_EQ(e.round, 2);
  CHECK_EQ(e.restart_count, 1);
  CHECK_EQ(e.max_restarts, 3);
  CHECK(!strcmp(e.run_id, "job9"));
  CHECK(!strcmp(e.master_addr, "10.0.0.5"));
  CHECK_EQ(e.master_port, 29400);
  CHECK(!strcmp(e.token, "sekrit"));
  ENV("CDDP_STORE", "[::1]:7", "RANK", "0", "WORLD_SIZE", "1");
  CHECK_OK(cddp_env_read(&e));
  CHECK(!strcmp(e.master_addr, "::1"));
  CHECK_EQ(e.master_port, 7);
  ENV("CDDP_STORE", "tcp://node7:29400", "RANK", "0", "WORLD_SIZE", "1"); /* the one parser netif.c reads too */
  CHECK_OK(cddp_env_read(&e));
  CHECK(!strcmp(e.master_addr, "node7"));
  CHECK_EQ(e.master_port, 29400);
}

TEST(env_bad_values_are_named) {
  cddp_env_t e;
  ENV("CDDP_STORE", "h:1", "RANK", "4", "WORLD_SIZE", "4");
  CHECK_RESULT(cddp_env_read(&e), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "RANK=4 is not below WORLD_SIZE=4"));
  ENV("CDDP_STORE", "nohostport", "RANK", "0", "WORLD_SIZE", "1");
  CHECK_RESULT(cddp_env_read(&e), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "CDDP_STORE=nohostport"));
  const char *bad[] = {"file:/tmp/x", "h:0", "h:65536", "[]:5", ":5", "h:5x", "tcp://", "h:"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ENV("CDDP_STORE", bad[i], "RANK", "0", "WORLD_SIZE", "1");
    CHECK_RESULT(cddp_env_read(&e), CDDP_INVALID_ARG);
    CHECK(strstr(cddp_last_error(), "is not HOST:PORT"));
  }
  ENV("RANK", "x", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "1");
  CHECK_RESULT(cddp_env_read(&e), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "RANK=x"));
  ENV("RANK", "1", "WORLD_SIZE", "2", "MASTER_ADDR", "h");
  CHECK_RESULT(cddp_env_read(&e), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "MASTER_PORT"));
}

TEST(env_torchrun_names) {
  ENV("RANK", "1", "WORLD_SIZE", "2", "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "2", "MASTER_ADDR", "127.0.0.1",
      "MASTER_PORT", "29500", "TORCHELASTIC_RUN_ID", "tr", "TORCHELASTIC_RESTART_COUNT", "2");
  cddp_env_t e;
  CHECK_OK(cddp_env_read(&e));
  CHECK_EQ(e.source, CDDP_ENV_TORCHRUN);
  CHECK_EQ(e.rank, 1);
  CHECK_EQ(e.world_size, 2);
  CHECK_EQ(e.master_port, 29500);
  CHECK_EQ(e.restart_count, 2);
  CHECK(!strcmp(e.run_id, "tr"));
}

TEST(env_slurm_task_and_batch_step) {
  ENV("SLURM_PROCID", "3", "SLURM_STEP_ID", "0", "SLURM_JOB_ID", "31", "SLURM_LOCALID", "1", "SLURM_NODEID", "1",
      "SLURM_STEP_NUM_NODES", "3", "SLURM_STEP_NUM_TASKS", "5", "SLURM_STEP_NODELIST", "node[1-3]",
      "SLURM_STEP_TASKS_PER_NODE", "2(x2),1", "SLURM_NODELIST", "node[1-4]", "SLURM_NTASKS", "9");
  cddp_env_t e;
  CHECK_OK(cddp_env_read(&e));
  CHECK_EQ(e.source, CDDP_ENV_SLURM);
  CHECK_EQ(e.rank, 3);
  CHECK_EQ(e.world_size, 5);
  CHECK_EQ(e.local_rank, 1);
  CHECK_EQ(e.local_world_size, 2);
  CHECK_EQ(e.node_rank, 1);
  CHECK_EQ(e.nnodes, 3);
  CHECK(!strcmp(e.master_addr, "node1"));
  CHECK(e.master_port >= 20000 && e.master_port <= 32767);
  CHECK(!strcmp(e.run_id, "slurm-31.0"));
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "4242", 1);
  CHECK_OK(cddp_env_read(&e));
  CHECK(!strcmp(e.master_addr, "127.0.0.1"));
  CHECK_EQ(e.master_port, 4242);
  /* the batch step: SLURM_PROCID without SLURM_STEP_ID is not a task */
  ENV("SLURM_PROCID", "0", "SLURM_LOCALID", "0", "SLURM_NODEID", "0", "SLURM_NTASKS", "6", "SLURM_JOB_ID", "40");
  CHECK_OK(cddp_env_read(&e));
  CHECK_EQ(e.source, CDDP_ENV_NONE);
  CHECK_EQ(e.world_size, 1);
}

/* A step on fewer nodes than its job: the step's node list and node count win over the
 * job's (SLURM_JOB_NODELIST, SLURM_NODELIST), which are only fallbacks, in that order. */
TEST(env_slurm_step_list_beats_job_list) {
  cddp_env_t e;
  ENV("SLURM_PROCID", "1", "SLURM_STEP_ID", "3", "SLURM_JOB_ID", "50", "SLURM_LOCALID", "0", "SLURM_NODEID", "1",
      "SLURM_STEP_NUM_NODES", "2", "SLURM_STEP_NUM_TASKS", "2", "SLURM_STEP_NODELIST", "node[2-3]",
      "SLURM_JOB_NODELIST", "node[1-3]", "SLURM_NODELIST", "node[1-3]", "SLURM_JOB_NUM_NODES", "3", "SLURM_NNODES", "3");
  CHECK_OK(cddp_env_read(&e));
  CHECK(!strcmp(e.master_addr, "node2"));
  CHECK_EQ(e.nnodes, 2);
  CHECK(!strcmp(e.run_id, "slurm-50.3"));
  unsetenv("SLURM_STEP_NODELIST");
  CHECK_OK(cddp_env_read(&e));
  CHECK(!strcmp(e.master_addr, "node1"));
  setenv("SLURM_JOB_NODELIST", "job[7-9]", 1);
  CHECK_OK(cddp_env_read(&e));
  CHECK(!strcmp(e.master_addr, "job7")); /* SLURM_JOB_NODELIST before SLURM_NODELIST */
  unsetenv("SLURM_STEP_NUM_NODES");
  setenv("SLURM_STEP_NUM_TASKS", "3", 1); /* one task per node of the job */
  CHECK_OK(cddp_env_read(&e));
  CHECK_EQ(e.nnodes, 3);
}

/* Two jobs (or two steps of one job) on one host, no MASTER_PORT: different store ports. */
TEST(env_slurm_port_from_job_and_step) {
  cddp_env_t a, b, c;
  ENV("SLURM_PROCID", "0", "SLURM_STEP_ID", "0", "SLURM_JOB_ID", "1000", "SLURM_LOCALID", "0", "SLURM_NODEID", "0",
      "SLURM_STEP_NUM_NODES", "1", "SLURM_STEP_NUM_TASKS", "2", "SLURM_STEP_NODELIST", "n1",
      "SLURM_STEP_TASKS_PER_NODE", "2");
  CHECK_OK(cddp_env_read(&a));
  setenv("SLURM_JOB_ID", "1001", 1);
  CHECK_OK(cddp_env_read(&b));
  setenv("SLURM_STEP_ID", "1", 1);
  CHECK_OK(cddp_env_read(&c));
  CHECK(a.master_port != b.master_port && b.master_port != c.master_port && a.master_port != c.master_port);
  CHECK_EQ(a.master_port, 20000 + (1000 * 64) % 12768); /* docs/launcher.md's formula */
  CHECK_EQ(c.master_port, 20000 + (1001 * 64 + 1) % 12768);
}

/* A master name that does not exist fails at connect at once, naming where it came from. */
TEST(env_slurm_unknown_master_fails_fast) {
  cddp_env_t e;
  ENV("SLURM_PROCID", "0", "SLURM_STEP_ID", "0", "SLURM_JOB_ID", "9", "SLURM_LOCALID", "0", "SLURM_NODEID", "0",
      "SLURM_STEP_NUM_NODES", "2", "SLURM_STEP_NUM_TASKS", "2", "SLURM_STEP_NODELIST", "cddp-no-such-host[8-9]");
  CHECK_OK(cddp_env_read(&e));
  cddp_store_t *s = NULL;
  cddp_store_server_t *srv = NULL;
  cddp_result_t r = cddp_env_connect(&e, 4000, &s, &srv);
  CHECK(s == NULL && srv == NULL);
  if (r == CDDP_NOT_FOUND) /* else the resolver is unreachable here (EAI_AGAIN): not decidable */
    CHECK(strstr(cddp_last_error(), "cannot resolve host 'cddp-no-such-host8' (from SLURM_STEP_NODELIST)"));
}

/* The same reader serves `cddp run --launcher slurm`: a step task without its node index, or
 * with a rank past the step's tasks, is named, never defaulted. */
TEST(env_slurm_step_errors_are_named) {
  cddp_env_t e;
  ENV("SLURM_PROCID", "0", "SLURM_STEP_ID", "0", "SLURM_JOB_ID", "7", "SLURM_LOCALID", "0",
      "SLURM_STEP_NUM_NODES", "2", "SLURM_STEP_NUM_TASKS", "2", "SLURM_STEP_NODELIST", "n[1-2]");
  CHECK_RESULT(cddp_env_read(&e), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "Slurm step without SLURM_NODEID"));
  setenv("SLURM_NODEID", "0", 1);
  setenv("SLURM_PROCID", "2", 1);
  CHECK_RESULT(cddp_env_read(&e), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "SLURM_PROCID=2 is not below SLURM_STEP_NUM_TASKS=2"));
  setenv("SLURM_PROCID", "1", 1);
  setenv("SLURM_NODEID", "1", 1);
  CHECK_OK(cddp_env_read(&e));
  CHECK_EQ(e.local_world_size, 1); /* one task per node needs no tasks-per-node list */
  CHECK(!strcmp(e.master_addr, "n1"));
}

TEST(env_mpi_names) {
  ENV("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2", "OMPI_COMM_WORLD_LOCAL_RANK", "1",
      "OMPI_COMM_WORLD_LOCAL_SIZE", "2", "OMPI_MCA_ess_base_jobid", "12345");
  cddp_env_t e;
  CHECK_OK(cddp_env_read(&e));
  CHECK_EQ(e.source, CDDP_ENV_MPI);
  CHECK_EQ(e.rank, 1);
  CHECK_EQ(e.world_size, 2);
  CHECK(!strcmp(e.master_addr, "127.0.0.1"));
  CHECK(e.master_port >= 20000);
  ENV("PMI_RANK", "0", "PMI_SIZE", "4", "MPI_LOCALNRANKS", "2");
  CHECK_RESULT(cddp_env_read(&e), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "MASTER_ADDR"));
}

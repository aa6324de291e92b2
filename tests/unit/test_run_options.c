/* test_run_options.c - `cddp run` flag parsing: spellings, env mirrors, precedence, XTuner, Slurm. */
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "launcher/options.h"
#include "test.h"

#define ARGV(...) ((char *[]){"run", __VA_ARGS__, NULL})
#define ENVP(...) ((char *[]){__VA_ARGS__, NULL})
#define ARGC(a) ((int)(sizeof(a) / sizeof(char *)) - 1)

static cddp_result_t parse(char **argv, char **envp, cddp_run_opts_t *o) {
  int argc = 0;
  while (argv[argc]) argc++;
  return cddp__run_parse(argc, argv, envp, o);
}

static void expect_error(char **argv, char **envp, cddp_result_t code, const char *a, const char *b) {
  cddp_run_opts_t o;
  CHECK_RESULT(parse(argv, envp, &o), code);
  const char *e = cddp_last_error();
  if ((a && !strstr(e, a)) || (b && !strstr(e, b))) TEST_FAIL("error '%s' lacks '%s' / '%s'", e, a, b ? b : "");
}

TEST(run_opts_both_spellings_and_equals) {
  cddp_run_opts_t o;
  CHECK_OK(parse(ARGV("--nproc_per_node", "3", "--nnodes=2", "--rdzv-endpoint", "10.0.0.1", "--rdzv_id=j7", "prog", "--nnodes", "9"),
                 ENVP(NULL), &o));
  CHECK_EQ(o.nproc_per_node, 3);
  CHECK_EQ(o.min_nodes, 2);
  CHECK_EQ(o.max_nodes, 2);
  CHECK(!strcmp(o.rdzv_host, "10.0.0.1"));
  CHECK_EQ(o.rdzv_port, 29400);
  CHECK(!strcmp(o.run_id, "j7"));
  CHECK_EQ(o.prog_index, 7); /* options after PROGRAM belong to PROGRAM */
  CHECK_EQ(o.backend, CDDP_RDZV_C10D);
  CHECK_EQ(o.standalone, 0);
}

TEST(run_opts_nnodes_range_and_auto) {
  cddp_run_opts_t o;
  CHECK_OK(parse(ARGV("--nnodes", "2:4", "--nproc-per-node", "auto", "--rdzv-endpoint", "[::1]:555", "p"), ENVP(NULL), &o));
  CHECK_EQ(o.min_nodes, 2);
  CHECK_EQ(o.max_nodes, 4);
  CHECK(o.nproc_per_node >= 1);
  CHECK(!strcmp(o.rdzv_host, "::1"));
  CHECK_EQ(o.rdzv_port, 555);
  expect_error(ARGV("--nnodes", "4:2", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--nnodes", "'4:2'");
  expect_error(ARGV("--nnodes", "0", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--nnodes", NULL);
}

TEST(run_opts_default_is_standalone) {
  cddp_run_opts_t o;
  CHECK_OK(parse(ARGV("true"), ENVP(NULL), &o));
  CHECK_EQ(o.standalone, 1);
  CHECK_EQ(o.nproc_per_node, 1);
  CHECK_EQ(o.rdzv_port, 0);
  CHECK(!strncmp(o.run_id, "standalone-", 11));
  CHECK_OK(parse(ARGV("--standalone", "--nnodes", "3", "true"), ENVP(NULL), &o));
  CHECK_EQ(o.max_nodes, 1);
}

TEST(run_opts_bad_nproc) {
  expect_error(ARGV("--nproc-per-node", "0", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--nproc-per-node", "'0'");
  expect_error(ARGV("--nproc-per-node", "-2", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--nproc-per-node", "'-2'");
  expect_error(ARGV("--nproc_per_node=abc", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--nproc_per_node", "'abc'");
  expect_error(ARGV("p"), ENVP("CDDP_NPROC_PER_NODE=x"), CDDP_INVALID_ARG, "CDDP_NPROC_PER_NODE", "'x'");
}

TEST(run_opts_usage_errors) {
  expect_error(ARGV("--bogus", "p"), ENVP(NULL), CDDP_INVALID_USAGE, "unknown flag '--bogus'", NULL);
  /* a typo: the nearest flag in one line, no usage under it (exit 2 all the same) */
  expect_error(ARGV("--nprocs-per-node", "2", "p"), ENVP(NULL), CDDP_INVALID_ARG,
               "unknown flag '--nprocs-per-node' (did you mean --nproc-per-node?", NULL);
  expect_error(ARGV("--max-restart=3", "p"), ENVP(NULL), CDDP_INVALID_ARG, "did you mean --max-restarts?", NULL);
  expect_error(ARGV("--nnodes", "2"), ENVP(NULL), CDDP_INVALID_USAGE, "missing PROGRAM", NULL);
  expect_error(ARGV("--nnodes"), ENVP(NULL), CDDP_INVALID_USAGE, "--nnodes needs a value", NULL);
  expect_error(ARGV("--standalone=1", "p"), ENVP(NULL), CDDP_INVALID_USAGE, "takes no value", NULL);
  cddp_run_opts_t o;
  CHECK_OK(parse(ARGV("--nnodes", "2", "--help"), ENVP(NULL), &o));
  CHECK_EQ(o.mode, CDDP_RUN_HELP);
  CHECK_OK(parse(ARGV("-h"), ENVP(NULL), &o));
  CHECK_EQ(o.mode, CDDP_RUN_HELP);
}

TEST(run_opts_env_mirrors_and_precedence) {
  cddp_run_opts_t o;
  /* CDDP_ beats PET_, flags beat both */
  CHECK_OK(parse(ARGV("p"), ENVP("PET_NPROC_PER_NODE=2", "CDDP_NPROC_PER_NODE=3", "PET_MAX_RESTARTS=4"), &o));
  CHECK_EQ(o.nproc_per_node, 3);
  CHECK_EQ(o.max_restarts, 4);
  CHECK_OK(parse(ARGV("--nproc-per-node", "5", "p"), ENVP("PET_NPROC_PER_NODE=2", "CDDP_NPROC_PER_NODE=3"), &o));
  CHECK_EQ(o.nproc_per_node, 5);
  CHECK_OK(parse(ARGV("p"), ENVP("CDDP_NNODES=2", "CDDP_RDZV_ENDPOINT=h:7", "CDDP_RDZV_TIMEOUT=1.5",
                                  "CDDP_GRACE_PERIOD=0.25", "CDDP_RDZV_LAST_CALL=0"), &o));
  CHECK_EQ(o.max_nodes, 2);
  CHECK_EQ(o.rdzv_port, 7);
  CHECK_EQ(o.rdzv_timeout_ms, 1500);
  CHECK_EQ(o.grace_ms, 250);
  CHECK_EQ(o.last_call_ms, 0);
  CHECK_OK(parse(ARGV("p"), ENVP("CDDP_STANDALONE=true", "CDDP_NNODES=2"), &o));
  CHECK_EQ(o.standalone, 1);
  expect_error(ARGV("p"), ENVP("CDDP_STANDALONE=maybe"), CDDP_INVALID_ARG, "CDDP_STANDALONE", NULL);
}

TEST(run_opts_static_and_node_rank) {
  cddp_run_opts_t o;
  CHECK_OK(parse(ARGV("--rdzv-backend", "static", "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.1.1.1",
                      "--master-port", "4000", "p"), ENVP(NULL), &o));
  CHECK_EQ(o.backend, CDDP_RDZV_STATIC);
  CHECK_EQ(o.node_rank, 1);
  CHECK(!strcmp(o.master_addr, "10.1.1.1"));
  CHECK_EQ(o.master_port, 4000);
  /* endpoint serves as the master when no --master-addr */
  CHECK_OK(parse(ARGV("--rdzv-backend=static", "--nnodes=2", "--node-rank=0", "--rdzv-endpoint=1.2.3.4:99", "p"), ENVP(NULL), &o));
  CHECK(!strcmp(o.master_addr, "1.2.3.4"));
  CHECK_EQ(o.master_port, 99);
  expect_error(ARGV("--rdzv-backend", "static", "--nnodes", "2", "--node-rank", "2", "p"), ENVP(NULL), CDDP_INVALID_ARG,
               "--node-rank 2 is not below", "--nnodes 2");
  expect_error(ARGV("--rdzv-backend", "static", "--nnodes", "2", "p"), ENVP(NULL), CDDP_INVALID_ARG, "needs --node-rank", NULL);
  expect_error(ARGV("--rdzv-backend", "static", "--nnodes", "1:2", "--node-rank", "0", "p"), ENVP(NULL), CDDP_INVALID_ARG, "range", NULL);
  expect_error(ARGV("--rdzv-backend", "etcd", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--rdzv-backend", "'etcd'");
  /* torchrun's default: no --rdzv-* flag and a fixed node count is static on the master */
  CHECK_OK(parse(ARGV("--nnodes", "2", "--nproc_per_node", "1", "--node_rank", "1", "--master_addr", "10.2.2.2",
                      "--master_port", "4100", "p"), ENVP(NULL), &o));
  CHECK_EQ(o.backend, CDDP_RDZV_STATIC);
  CHECK_EQ(o.node_rank, 1);
  CHECK(!strcmp(o.master_addr, "10.2.2.2"));
  CHECK_EQ(o.master_port, 4100);
  expect_error(ARGV("--nnodes", "2", "p"), ENVP(NULL), CDDP_INVALID_ARG, "needs --node-rank", NULL);
  /* an elastic range has no static form: it still needs the c10d store */
  expect_error(ARGV("--nnodes", "1:2", "p"), ENVP(NULL), CDDP_INVALID_ARG, "needs --rdzv-endpoint", NULL);
  expect_error(ARGV("--rdzv-backend", "c10d", "--nnodes", "2", "p"), ENVP(NULL), CDDP_INVALID_ARG, "needs --rdzv-endpoint", NULL);
  expect_error(ARGV("--nnodes", "2", "--rdzv-endpoint", "h:0", "p"), ENVP(NULL), CDDP_INVALID_ARG, "h:0", "only for one node");
}

TEST(run_opts_xtuner_variables) {
  cddp_run_opts_t o;
  CHECK_OK(parse(ARGV("p"), ENVP("NPROC_PER_NODE=2", "NNODES=2", "NODE_RANK=1", "ADDR=127.0.0.1", "PORT=29611"), &o));
  CHECK_EQ(o.backend, CDDP_RDZV_STATIC);
  CHECK_EQ(o.nproc_per_node, 2);
  CHECK_EQ(o.max_nodes, 2);
  CHECK_EQ(o.node_rank, 1);
  CHECK(!strcmp(o.master_addr, "127.0.0.1"));
  CHECK_EQ(o.master_port, 29611);
  expect_error(ARGV("p"), ENVP("NNODES=2", "NODE_RANK=2", "ADDR=h", "PORT=1"), CDDP_INVALID_ARG, "NODE_RANK=2 is not below",
               "NNODES=2");
  /* flags beat XTuner */
  CHECK_OK(parse(ARGV("--nproc-per-node", "1", "p"), ENVP("NPROC_PER_NODE=4"), &o));
  CHECK_EQ(o.nproc_per_node, 1);
  CHECK_EQ(o.standalone, 1);
  /* ADDR / PORT alone are not XTuner's form */
  CHECK_OK(parse(ARGV("p"), ENVP("ADDR=x", "PORT=1"), &o));
  CHECK_EQ(o.standalone, 1);
}

TEST(run_opts_log_dir_tee_redirects) {
  cddp_run_opts_t o;
  CHECK_OK(parse(ARGV("p"), ENVP(NULL), &o));
  CHECK_EQ(o.console[0], 3);
  CHECK_EQ(o.tmp_log_dir, 0);
  CHECK_OK(parse(ARGV("--log-dir", "/tmp/x", "p"), ENVP(NULL), &o));
  CHECK_EQ(o.console[0], 0);
  CHECK_OK(parse(ARGV("--log-dir", "/tmp/x", "--tee", "1", "p"), ENVP(NULL), &o));
  CHECK_EQ(o.console[0], 1);
  CHECK_OK(parse(ARGV("--log-dir", "/tmp/x", "-r", "2", "p"), ENVP(NULL), &o));
  CHECK_EQ(o.console[0], 1);
  CHECK_OK(parse(ARGV("--log-dir", "/tmp/x", "-t3", "p"), ENVP(NULL), &o));
  CHECK_EQ(o.console[0], 3);
  /* torchrun's per-rank maps: local rank 0 keeps stdout, 1 keeps both (absent = 0), 2 none */
  CHECK_OK(parse(ARGV("--nproc-per-node", "3", "--log-dir", "/tmp/x", "--tee", "0:1,1:3", "p"), ENVP(NULL), &o));
  CHECK_EQ(o.console[0], 1);
  CHECK_EQ(o.console[1], 3);
  CHECK_EQ(o.console[2], 0);
  /* --redirects without --log-dir: torchrun writes the files to a temporary folder */
  CHECK_OK(parse(ARGV("--nproc-per-node", "2", "--redirects", "1:2", "p"), ENVP(NULL), &o));
  CHECK_EQ(o.console[0], 3);
  CHECK_EQ(o.console[1], 1);
  CHECK_EQ(o.tmp_log_dir, 1);
  /* --local-ranks-filter: only those local ranks reach the console */
  CHECK_OK(parse(ARGV("--nproc-per-node", "3", "--local-ranks-filter", "0,2", "p"), ENVP(NULL), &o));
  CHECK(o.console[0] == 3 && o.console[1] == 0 && o.console[2] == 3);
  expect_error(ARGV("--nproc-per-node", "2", "--tee", "0:3,2:1", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--tee 0:3,2:1",
               "local rank 2");
  expect_error(ARGV("--tee", "0:7", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--tee", "0-3");
  expect_error(ARGV("--redirects", "x", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--redirects", "'x'");
  expect_error(ARGV("--local-ranks-filter", "1", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--local-ranks-filter 1",
               "runs 1 workers");
  expect_error(ARGV("--local-ranks-filter", "a", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--local-ranks-filter", "'a'");
}

/* torchrun's program rules and the other flags it has */
TEST(run_opts_torchrun_flags) {
  cddp_run_opts_t o;
  CHECK_OK(parse(ARGV("-m", "--python", "/usr/bin/python3", "--role", "trainer", "pkg.train", "--lr", "1"), ENVP(NULL), &o));
  CHECK_EQ(o.module, 1);
  CHECK(!strcmp(o.python, "/usr/bin/python3"));
  CHECK(!strcmp(o.role, "trainer"));
  CHECK_EQ(o.prog_index, 6);
  CHECK_OK(parse(ARGV("p.py"), ENVP("CDDP_PYTHON=/opt/py/bin/python"), &o));
  CHECK(!strcmp(o.python, "/opt/py/bin/python"));
  CHECK(!strcmp(o.role, "default"));
  CHECK_OK(parse(ARGV("--no-python", "--start-method", "spawn", "--monitor-interval", "0.1", "p.py"), ENVP(NULL), &o));
  CHECK_EQ(o.no_python, 1);
  expect_error(ARGV("--no-python", "-m", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--no-python and -m", NULL);
  expect_error(ARGV("--start-method", "thread", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--start-method", "'thread'");
  expect_error(ARGV("--role", "a b", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--role", NULL);
  expect_error(ARGV("--python", "", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--python", NULL);
}

TEST(run_opts_rdzv_conf) {
  cddp_run_opts_t o;
  CHECK_OK(parse(ARGV("--nnodes", "1:2", "--rdzv-endpoint", "h:1", "--rdzv-conf",
                      "join_timeout=12,last_call_timeout=0.5,close_timeout=3,read_timeout=7,is_host=false", "p"),
                 ENVP(NULL), &o));
  CHECK_EQ(o.rdzv_timeout_ms, 12000);
  CHECK_EQ(o.last_call_ms, 500);
  CHECK_EQ(o.close_ms, 3000);
  CHECK_EQ(o.read_ms, 7000);
  CHECK_EQ(o.is_host, 0);
  /* an explicit flag wins over the conf key */
  CHECK_OK(parse(ARGV("--nnodes", "2", "--rdzv-endpoint", "h", "--rdzv-timeout", "5", "--rdzv-conf", "join_timeout=12", "p"),
                 ENVP(NULL), &o));
  CHECK_EQ(o.rdzv_timeout_ms, 5000);
  CHECK_EQ(o.is_host, -1);
  CHECK_EQ(o.close_ms, o.grace_ms);
  expect_error(ARGV("--rdzv-conf", "join_timeout=x", "p"), ENVP(NULL), CDDP_INVALID_ARG, "join_timeout=x", "seconds");
  expect_error(ARGV("--rdzv-conf", "nodes=3", "p"), ENVP(NULL), CDDP_INVALID_ARG, "unknown key 'nodes'", "join_timeout");
  expect_error(ARGV("--rdzv-conf", "is_host=maybe", "p"), ENVP(NULL), CDDP_INVALID_ARG, "is_host=maybe", NULL);
  expect_error(ARGV("--rdzv-conf", "garbage", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--rdzv-conf", "KEY=VALUE");
}

/* --nproc-per-node gpu counts CUDA_VISIBLE_DEVICES (or /dev/nvidia<N>); none is one clear line */
TEST(run_opts_nproc_gpu_cpu_auto) {
  cddp_run_opts_t o;
  CHECK_OK(parse(ARGV("--nproc-per-node", "gpu", "p"), ENVP("CUDA_VISIBLE_DEVICES=0,3,5"), &o));
  CHECK_EQ(o.nproc_per_node, 3);
  CHECK(strstr(o.nproc_src, "CUDA_VISIBLE_DEVICES=0,3,5") != NULL);
  CHECK_OK(parse(ARGV("--nproc-per-node", "auto", "p"), ENVP("CUDA_VISIBLE_DEVICES=GPU-1a2b"), &o));
  CHECK_EQ(o.nproc_per_node, 1);
  expect_error(ARGV("--nproc-per-node", "gpu", "p"), ENVP("CUDA_VISIBLE_DEVICES="), CDDP_INVALID_ARG,
               "--nproc-per-node gpu: no GPU is visible", "give a number of workers, or cpu");
  expect_error(ARGV("--nproc-per-node", "gpu", "p"), ENVP("CUDA_VISIBLE_DEVICES=-1"), CDDP_INVALID_ARG, "no GPU", NULL);
  CHECK_OK(parse(ARGV("--nproc-per-node", "auto", "p"), ENVP("CUDA_VISIBLE_DEVICES="), &o));
  CHECK_EQ(o.nproc_per_node, (int)sysconf(_SC_NPROCESSORS_ONLN));
  CHECK(strstr(o.nproc_src, "no GPU") != NULL);
  CHECK_OK(parse(ARGV("--nproc-per-node", "cpu", "p"), ENVP(NULL), &o));
  CHECK_EQ(o.nproc_per_node, (int)sysconf(_SC_NPROCESSORS_ONLN));
  expect_error(ARGV("--nproc-per-node", "tpu", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--nproc-per-node", "gpu, cpu or auto");
}

/* torchrun --standalone is --rdzv-endpoint localhost:0; port 0 is refused for several nodes */
TEST(run_opts_endpoint_port_zero) {
  cddp_run_opts_t o;
  CHECK_OK(parse(ARGV("--rdzv-endpoint", "localhost:0", "--rdzv-id", "j", "p"), ENVP(NULL), &o));
  CHECK_EQ(o.standalone, 1);
  CHECK_EQ(o.rdzv_port, 0);
  CHECK(!strcmp(o.run_id, "j"));
  CHECK_OK(parse(ARGV("--standalone", "--rdzv-endpoint", "localhost:0", "p"), ENVP(NULL), &o));
  CHECK_EQ(o.standalone, 1);
  expect_error(ARGV("--nnodes", "2", "--rdzv-endpoint", "h:0", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--rdzv-endpoint h:0",
               "only for one node");
}

/* mpirun -np 4 cddp run PROGRAM: each process becomes MPI's rank */
TEST(run_opts_mpi_task) {
  cddp_run_opts_t o;
  CHECK_OK(parse(ARGV("p"), ENVP("OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_RANK=1",
                                 "OMPI_COMM_WORLD_LOCAL_SIZE=2", "OMPI_MCA_ess_base_jobid=77", "MASTER_ADDR=n1"), &o));
  CHECK_EQ(o.mode, CDDP_RUN_MPI_RANK);
  CHECK_EQ(o.rank, 3);
  CHECK_EQ(o.world_size, 4);
  CHECK_EQ(o.local_rank, 1);
  CHECK_EQ(o.local_world_size, 2);
  CHECK_EQ(o.node_rank, 1);
  CHECK(!strcmp(o.master_addr, "n1"));
  CHECK(o.master_port >= 20000 && o.master_port < 32768);
  CHECK(!strncmp(o.run_id, "mpi-", 4));
  /* one host: the master is this host */
  CHECK_OK(parse(ARGV("p"), ENVP("OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=0",
                                 "OMPI_COMM_WORLD_LOCAL_SIZE=2", "MASTER_PORT=23456"), &o));
  CHECK(!strcmp(o.master_addr, "127.0.0.1"));
  CHECK_EQ(o.master_port, 23456);
  /* an explicit rendezvous or --launcher local: the process is an agent as usual */
  CHECK_OK(parse(ARGV("--standalone", "p"), ENVP("OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2"), &o));
  CHECK_EQ(o.mode, CDDP_RUN_AGENT);
  CHECK_OK(parse(ARGV("--launcher", "local", "p"), ENVP("OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2"), &o));
  CHECK_EQ(o.mode, CDDP_RUN_AGENT);
  expect_error(ARGV("--launcher", "mpi", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--launcher mpi", "mpirun");
  expect_error(ARGV("p"), ENVP("OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_SIZE=2"),
               CDDP_INVALID_ARG, "MASTER_ADDR", NULL);
}

/* srun -N3 -n3: one task per node, the task is the node's agent */
TEST(run_opts_slurm_agent_per_node) {
  cddp_run_opts_t o;
  CHECK_OK(parse(ARGV("--nproc-per-node", "2", "p"),
                 ENVP("SLURM_PROCID=1", "SLURM_STEP_ID=0", "SLURM_JOB_ID=31", "SLURM_LOCALID=0", "SLURM_NODEID=1",
                      "SLURM_STEP_NUM_NODES=3", "SLURM_STEP_NUM_TASKS=3", "SLURM_STEP_NODELIST=node[1-3]",
                      "SLURM_NODELIST=node[1-4]", "SLURM_NNODES=4"), &o));
  CHECK_EQ(o.mode, CDDP_RUN_AGENT);
  CHECK_EQ(o.slurm, 1);
  CHECK_EQ(o.backend, CDDP_RDZV_STATIC);
  CHECK_EQ(o.max_nodes, 3); /* the step's nodes, not the job's */
  CHECK_EQ(o.node_rank, 1);
  CHECK(!strcmp(o.master_addr, "node1"));
  CHECK(o.master_port >= 20000 && o.master_port <= 32767);
  CHECK(!strcmp(o.run_id, "slurm-31.0"));
  /* MASTER_ADDR overrides the first host; --master-port beats the derived port */
  CHECK_OK(parse(ARGV("--master-port", "4444", "p"),
                 ENVP("SLURM_PROCID=0", "SLURM_STEP_ID=2", "SLURM_JOB_ID=31", "SLURM_LOCALID=0", "SLURM_NODEID=0",
                      "SLURM_STEP_NUM_NODES=2", "SLURM_STEP_NUM_TASKS=2", "SLURM_STEP_NODELIST=node[1-2]",
                      "MASTER_ADDR=127.0.0.1"), &o));
  CHECK(!strcmp(o.master_addr, "127.0.0.1"));
  CHECK_EQ(o.master_port, 4444);
  CHECK(!strcmp(o.run_id, "slurm-31.2"));
}

/* srun -N3: --nnodes MIN:MAX in replace mode; the step's node list kept for the store's candidates */
TEST(run_opts_slurm_agent_range_replace) {
  cddp_run_opts_t o;
#define STEP3 "SLURM_PROCID=2", "SLURM_STEP_ID=0", "SLURM_JOB_ID=31", "SLURM_LOCALID=0", "SLURM_NODEID=2", \
              "SLURM_STEP_NUM_NODES=3", "SLURM_STEP_NUM_TASKS=3", "SLURM_STEP_NODELIST=node[1-3]"
  CHECK_OK(parse(ARGV("--nnodes", "2:3", "--restart-mode", "replace", "p"), ENVP(STEP3), &o));
  CHECK_EQ(o.backend, CDDP_RDZV_STATIC);
  CHECK_EQ(o.min_nodes, 2);
  CHECK_EQ(o.max_nodes, 3);
  CHECK_EQ(o.static_nodes, 3); /* the round waits for the step's nodes */
  CHECK_EQ(o.node_rank, 2);
  CHECK(!strcmp(o.store_nodes, "node[1-3]"));
  CHECK_OK(parse(ARGV("--restart-mode", "replace", "p"), ENVP(STEP3), &o));
  CHECK_EQ(o.min_nodes, 3);
  CHECK_EQ(o.static_nodes, 3);
  /* MASTER_ADDR names the store: no other candidates */
  CHECK_OK(parse(ARGV("--restart-mode", "replace", "p"), ENVP(STEP3, "MASTER_ADDR=10.0.0.1"), &o));
  CHECK(!strcmp(o.store_nodes, ""));
  /* a range in restart-all, or one that leaves out the step's nodes, is named */
  expect_error(ARGV("--nnodes", "2:3", "p"), ENVP(STEP3), CDDP_INVALID_ARG, "--nnodes 2:3 is a range",
               "needs --restart-mode replace");
  expect_error(ARGV("--nnodes", "1:2", "--restart-mode", "replace", "p"), ENVP(STEP3), CDDP_INVALID_ARG,
               "--nnodes 1:2 does not hold the step's 3 nodes", NULL);
#undef STEP3
  /* outside Slurm the static rendezvous still needs a fixed count */
  expect_error(ARGV("--nnodes", "2:3", "--restart-mode", "replace", "--rdzv-backend", "static", "--node-rank", "0", "p"),
               ENVP(NULL), CDDP_INVALID_ARG, "needs a fixed node count", NULL);
}

/* srun -N3 -n5: one task per rank */
TEST(run_opts_slurm_task_per_rank) {
  cddp_run_opts_t o;
  CHECK_OK(parse(ARGV("p"),
                 ENVP("SLURM_PROCID=3", "SLURM_STEP_ID=0", "SLURM_JOB_ID=31", "SLURM_LOCALID=1", "SLURM_NODEID=1",
                      "SLURM_STEP_NUM_NODES=3", "SLURM_STEP_NUM_TASKS=5", "SLURM_STEP_NODELIST=node[1-3]",
                      "SLURM_STEP_TASKS_PER_NODE=2(x2),1"), &o));
  CHECK_EQ(o.mode, CDDP_RUN_SLURM_RANK);
  CHECK_EQ(o.rank, 3);
  CHECK_EQ(o.world_size, 5);
  CHECK_EQ(o.local_rank, 1);
  CHECK_EQ(o.local_world_size, 2);
  CHECK_EQ(o.node_rank, 1);
  CHECK_EQ(o.max_nodes, 3);
  CHECK(!strcmp(o.master_addr, "node1"));
  /* a malformed node list is named */
  expect_error(ARGV("p"),
               ENVP("SLURM_PROCID=0", "SLURM_STEP_ID=0", "SLURM_JOB_ID=1", "SLURM_LOCALID=0", "SLURM_NODEID=0",
                    "SLURM_STEP_NUM_NODES=2", "SLURM_STEP_NUM_TASKS=2", "SLURM_STEP_NODELIST=node[1-"),
               CDDP_INVALID_ARG, "malformed node list 'node[1-'", "position");
}

/* The batch step has SLURM_PROCID but no SLURM_STEP_ID: not a task of a step. */
TEST(run_opts_slurm_batch_step) {
  cddp_run_opts_t o;
  char **batch = ENVP("SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_NTASKS=6", "SLURM_JOB_ID=40",
                      "SLURM_JOB_NUM_NODES=3", "SLURM_NODELIST=node[1-3]");
  CHECK_OK(parse(ARGV("p"), batch, &o));
  CHECK_EQ(o.mode, CDDP_RUN_AGENT); /* not detected: a plain standalone run */
  CHECK_EQ(o.slurm, 0);
  CHECK_EQ(o.standalone, 1);
  CHECK_OK(parse(ARGV("--launcher", "slurm", "p"), batch, &o));
  CHECK_EQ(o.mode, CDDP_RUN_SLURM_BATCH);
  CHECK_EQ(o.replace, 0); /* srun --kill-on-bad-exit=1: a failed node ends the step */
  CHECK_OK(parse(ARGV("--launcher", "slurm", "--restart-mode", "replace", "p"), batch, &o));
  CHECK_EQ(o.mode, CDDP_RUN_SLURM_BATCH);
  CHECK_EQ(o.replace, 1); /* --kill-on-bad-exit=0: the other nodes go on */
  expect_error(ARGV("--launcher", "slurm", "p"), ENVP(NULL), CDDP_INVALID_ARG, "not inside a Slurm job", NULL);
  expect_error(ARGV("--launcher", "pbs", "p"), ENVP(NULL), CDDP_INVALID_ARG, "--launcher", "'pbs'");
  /* inside a step, an explicit rendezvous wins over detection */
  CHECK_OK(parse(ARGV("--standalone", "p"),
                 ENVP("SLURM_PROCID=0", "SLURM_STEP_ID=0", "SLURM_JOB_ID=1", "SLURM_LOCALID=0", "SLURM_NODEID=0",
                      "SLURM_STEP_NUM_NODES=1", "SLURM_STEP_NUM_TASKS=1", "SLURM_STEP_NODELIST=n1"), &o));
  CHECK_EQ(o.slurm, 0);
  CHECK_EQ(o.standalone, 1);
}

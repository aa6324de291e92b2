/* test_launcher.c - which launcher started the process: each source alone, then the precedence
 * (agent > torchrun > srun step > mpirun > none), presence apart from precedence, and the rank. */
#include <string.h>

#include "test.h"
#include "common/launcher.h"

#define ENVP(...) ((char *[]){__VA_ARGS__, NULL})

TEST(launcher_none) {
  CHECK_EQ(cddp__launcher_detect(ENVP("HOME=/root", "PATH=/bin")), CDDP_ENV_NONE);
  CHECK_EQ(cddp__launcher_rank(ENVP("HOME=/root")), -1);
  CHECK(strcmp(cddp__launcher_name(CDDP_ENV_NONE), "none") == 0);
  /* half of a launcher's variables is none of them */
  CHECK_EQ(cddp__launcher_detect(ENVP("RANK=1")), CDDP_ENV_NONE);
  CHECK_EQ(cddp__launcher_detect(ENVP("WORLD_SIZE=2")), CDDP_ENV_NONE);
  CHECK_EQ(cddp__launcher_detect(ENVP("SLURM_PROCID=0", "SLURM_JOB_ID=7")), CDDP_ENV_NONE); /* sbatch's script */
  CHECK_EQ(cddp__launcher_detect(ENVP("CDDP_STORE=")), CDDP_ENV_NONE);
  CHECK_EQ(cddp__launcher_detect(ENVP("NPROC_PER_NODE=2", "NNODES=1")), CDDP_ENV_NONE); /* XTuner's: not a worker */
}

TEST(launcher_agent) {
  char **e = ENVP("CDDP_STORE=10.0.0.1:29400", "RANK=3", "WORLD_SIZE=4");
  CHECK_EQ(cddp__launcher_detect(e), CDDP_ENV_AGENT);
  CHECK_EQ(cddp__launcher_rank(e), 3);
  CHECK(strcmp(cddp__launcher_name(CDDP_ENV_AGENT), "cddp run") == 0);
}

TEST(launcher_torchrun) {
  char **e = ENVP("RANK=2", "WORLD_SIZE=4", "MASTER_ADDR=h", "MASTER_PORT=1");
  CHECK_EQ(cddp__launcher_detect(e), CDDP_ENV_TORCHRUN);
  CHECK_EQ(cddp__launcher_rank(e), 2);
  CHECK(strcmp(cddp__launcher_name(CDDP_ENV_TORCHRUN), "torchrun") == 0);
}

TEST(launcher_srun_step) {
  char **e = ENVP("SLURM_PROCID=5", "SLURM_STEP_ID=0", "SLURM_JOB_ID=7");
  CHECK_EQ(cddp__launcher_detect(e), CDDP_ENV_SLURM);
  CHECK_EQ(cddp__launcher_rank(e), 5);
  CHECK(strcmp(cddp__launcher_name(CDDP_ENV_SLURM), "srun") == 0);
}

TEST(launcher_mpirun) {
  CHECK_EQ(cddp__launcher_detect(ENVP("OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2")), CDDP_ENV_MPI);
  CHECK_EQ(cddp__launcher_rank(ENVP("OMPI_COMM_WORLD_RANK=1")), 1);
  CHECK_EQ(cddp__launcher_detect(ENVP("PMI_RANK=6", "PMI_SIZE=8")), CDDP_ENV_MPI); /* MPICH, Intel MPI */
  CHECK_EQ(cddp__launcher_rank(ENVP("PMI_RANK=6")), 6);
  CHECK(strcmp(cddp__launcher_name(CDDP_ENV_MPI), "mpirun") == 0);
}

TEST(launcher_precedence) {
  /* the agent's workers carry torchrun's names, and inherit srun's and mpirun's */
  CHECK_EQ(cddp__launcher_detect(ENVP("OMPI_COMM_WORLD_RANK=0", "SLURM_PROCID=0", "SLURM_STEP_ID=1", "RANK=1",
                                      "WORLD_SIZE=2", "CDDP_STORE=h:1")), CDDP_ENV_AGENT);
  /* torchrun inside an srun step or an mpirun */
  CHECK_EQ(cddp__launcher_detect(ENVP("OMPI_COMM_WORLD_RANK=0", "SLURM_PROCID=0", "SLURM_STEP_ID=1", "RANK=1",
                                      "WORLD_SIZE=2")), CDDP_ENV_TORCHRUN);
  /* mpirun's processes inside an srun allocation's step */
  CHECK_EQ(cddp__launcher_detect(ENVP("PMI_RANK=3", "SLURM_PROCID=0", "SLURM_STEP_ID=1")), CDDP_ENV_SLURM);
  /* the rank follows the winner */
  CHECK_EQ(cddp__launcher_rank(ENVP("PMI_RANK=3", "SLURM_PROCID=1", "SLURM_STEP_ID=1")), 1);
  CHECK_EQ(cddp__launcher_rank(ENVP("PMI_RANK=3", "SLURM_PROCID=1", "SLURM_STEP_ID=1", "RANK=2", "WORLD_SIZE=4")), 2);
}

TEST(launcher_present_ignores_precedence) {
  char **e = ENVP("CDDP_STORE=h:1", "RANK=0", "WORLD_SIZE=1", "SLURM_PROCID=0", "SLURM_STEP_ID=1", "PMI_RANK=0");
  CHECK(cddp__launcher_present(e, CDDP_ENV_AGENT));
  CHECK(cddp__launcher_present(e, CDDP_ENV_TORCHRUN));
  CHECK(cddp__launcher_present(e, CDDP_ENV_SLURM));
  CHECK(cddp__launcher_present(e, CDDP_ENV_MPI));
  CHECK(!cddp__launcher_present(e, CDDP_ENV_NONE));
  CHECK(!cddp__launcher_present(ENVP("SLURM_PROCID=0"), CDDP_ENV_SLURM));
}

TEST(launcher_rank_rejects_what_is_not_a_rank) {
  CHECK_EQ(cddp__launcher_rank(ENVP("RANK=x", "WORLD_SIZE=2")), -1);
  CHECK_EQ(cddp__launcher_rank(ENVP("RANK=", "WORLD_SIZE=2")), -1);
  CHECK_EQ(cddp__launcher_rank(ENVP("RANK=-1", "WORLD_SIZE=2")), -1);
  CHECK_EQ(cddp__launcher_rank(ENVP("RANK=1 ", "WORLD_SIZE=2")), -1);
}

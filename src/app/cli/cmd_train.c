/* cmd_train.c - `cddp train`: parse the command line, start its own launcher when only
 * XTuner-style variables are set, then run the trainer (src/app/trainer/trainer.c). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/flags.h"
#include "common/check.h"
#include "trainer/trainer.h"
#include "common/launcher.h"

#define MAX_SETS 256

static void usage(FILE *f) {
  fprintf(f,
          "usage: cddp train --config PATH [--set key=value ...] [--work-dir DIR] [--name NAME|auto]\n"
          "                  [--resume-from latest|PATH|none] [--launcher auto|slurm|mpi]\n"
          "                  [--backend native|mpi|nccl] [--transport auto|shm|tcp|hier]\n"
          "  --config PATH         YAML config (configs/*.yaml; keys in docs/config.md)\n"
          "  --set key=value       override one key after the file (repeatable): --set optim.lr=0.1\n"
          "  --work-dir DIR        where runs live (default runs); the run is DIR/NAME\n"
          "  --name NAME|auto      run name (default: the config file's base name); auto: a new folder\n"
          "                        CONFIG-YYYYmmdd-HHMMSS (local time). A folder that holds another\n"
          "                        run's checkpoints or metrics is refused unless the run resumes\n"
          "  --resume-from R       latest: the newest complete checkpoint of the run (none yet: start);\n"
          "                        PATH: that checkpoint (an error if it is broken); none (default)\n"
          "  --launcher L          auto (default): cddp run, torchrun-style, Slurm or MPI variables;\n"
          "                        slurm / mpi: insist on that launcher's variables\n"
          "  --backend B           collective backend: native (default, CDDP_BACKEND) or mpi (MPI's\n"
          "                        collectives; start the ranks with mpirun); nccl: as ddp.backend\n"
          "                        nccl (the GPU gradients all-reduced by NCCL, one GPU per rank)\n"
          "  --transport T         auto (shm within a host, hier or tcp across), shm, tcp or hier\n"
          "Sana's spellings --config_path --work_dir --resume_from work too. Run it under `cddp run`,\n"
          "srun or mpirun, or alone (one rank); with NPROC_PER_NODE NNODES NODE_RANK ADDR PORT set and\n"
          "no RANK, it starts its own launcher (cddp run) first.\n");
}

/* XTuner's style: the node's launcher variables are set, but no launcher started this worker. */
static int wants_own_launcher(void) {
  return getenv("NPROC_PER_NODE") && cddp__launcher_detect(environ) == CDDP_ENV_NONE;
}

static int exec_own_launcher(int argc, char **argv) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    perror("cddp train: cannot find its own executable (/proc/self/exe)");
    return 1;
  }
  self[n] = 0;
  char **args = calloc((size_t)argc + 4, sizeof *args);
  if (!args) return 1;
  int k = 0;
  args[k++] = self;
  args[k++] = "run";
  args[k++] = self;
  for (int i = 0; i < argc; i++) args[k++] = argv[i]; /* argv[0] is "train" */
  args[k] = NULL;
  fprintf(stderr, "cddp train: NPROC_PER_NODE=%s set without RANK: starting `cddp run` for this node\n",
          getenv("NPROC_PER_NODE"));
  execv(self, args);
  perror("cddp train: cannot start cddp run");
  free(args);
  return 1;
}

static int check_launcher(const char *l) {
  if (!strcmp(l, "auto")) return 0;
  if (!strcmp(l, "slurm")) {
    if (cddp__launcher_present(environ, CDDP_ENV_SLURM)) return 0;
    fprintf(stderr, "cddp train: --launcher slurm: not a task of an srun step (SLURM_PROCID and SLURM_STEP_ID "
            "must be set): run it under srun\n");
    return 2;
  }
  if (!strcmp(l, "mpi")) {
    if (cddp__launcher_present(environ, CDDP_ENV_MPI)) return 0;
    fprintf(stderr, "cddp train: --launcher mpi: no MPI rank variable (OMPI_COMM_WORLD_RANK, PMI_RANK): run it under mpirun\n");
    return 2;
  }
  fprintf(stderr, "cddp train: --launcher '%s': expected auto, slurm or mpi\n", l);
  return 2;
}

static int is_key_value(const char *v, void *dst) { return strchr(v, '=') ? 0 : -1; }

int cddp__cmd_train(int argc, char **argv) {
  static const char *sets[MAX_SETS];
  cddp_train_opts_t o = {.sets = sets};
  const char *launcher = "auto";
  const cddp__flag_t flags[] = {
      CDDP__FLAG_STR_ROW("--config", "--config_path", &o.config_path),
      CDDP__FLAG_LIST_ROW("--set", sets, &o.n_sets, MAX_SETS, is_key_value, "key=value"),
      CDDP__FLAG_STR_ROW("--work-dir", "--work_dir", &o.work_dir),
      CDDP__FLAG_STR_ROW("--name", NULL, &o.name),
      CDDP__FLAG_STR_ROW("--resume-from", "--resume_from", &o.resume),
      CDDP__FLAG_STR_ROW("--launcher", NULL, &launcher),
      CDDP__FLAG_STR_ROW("--backend", NULL, &o.backend),
      CDDP__FLAG_STR_ROW("--transport", NULL, &o.transport),
  };
  const cddp__cli_t cli = {.cmd = "train", .flags = flags, .n_flags = (int)CDDP_ARRAY_LEN(flags), .usage = usage};
  int rc = cddp__flags_parse(&cli, argc, argv);
  if (rc >= 0) return rc;
  if (!o.config_path) {
    fprintf(stderr, "cddp train: --config PATH is required (e.g. --config configs/fmnist_mlp.yaml)\n");
    return 2;
  }
  if (o.resume && !*o.resume) {
    fprintf(stderr, "cddp train: --resume-from: expected latest, none or a checkpoint path\n");
    return 2;
  }
  rc = check_launcher(launcher);
  if (rc) return rc;
  if (!strcmp(launcher, "auto") && wants_own_launcher()) return exec_own_launcher(argc, argv);
  return cddp__train_main(&o);
}

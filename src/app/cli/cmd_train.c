/* cmd_train.c - `cddp train`: parse the command line, start its own launcher when only
 * XTuner-style variables are set, then run the trainer (src/train/trainer.c). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/flags.h"
#include "trainer/trainer.h"

#define MAX_SETS 256

static void usage(FILE *f) {
  fprintf(f,
          "usage: cddp train --config PATH [--set key=value ...] [--work-dir DIR] [--name NAME|auto]\n"
          "                  [--resume-from latest|PATH|none] [--launcher auto|slurm|mpi]\n"
          "                  [--backend native|mpi] [--transport auto|shm|tcp|hier]\n"
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
          "                        collectives; start the ranks with mpirun)\n"
          "  --transport T         auto (shm within a host, hier or tcp across), shm, tcp or hier\n"
          "Sana's spellings --config_path --work_dir --resume_from work too. Run it under `cddp run`,\n"
          "srun or mpirun, or alone (one rank); with NPROC_PER_NODE NNODES NODE_RANK ADDR PORT set and\n"
          "no RANK, it starts its own launcher (cddp run) first.\n");
}

/* XTuner's style: the launcher variables are set but no worker's RANK is. */
static int wants_own_launcher(void) {
  return getenv("NPROC_PER_NODE") && !getenv("RANK") && !getenv("CDDP_STORE") &&
         !getenv("SLURM_PROCID") && !getenv("OMPI_COMM_WORLD_RANK") && !getenv("PMI_RANK");
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
    if (getenv("SLURM_PROCID")) return 0;
    fprintf(stderr, "cddp train: --launcher slurm: SLURM_PROCID is not set (run it under srun)\n");
    return 2;
  }
  if (!strcmp(l, "mpi")) {
    if (getenv("OMPI_COMM_WORLD_RANK") || getenv("PMI_RANK")) return 0;
    fprintf(stderr, "cddp train: --launcher mpi: no MPI rank variable (OMPI_COMM_WORLD_RANK, PMI_RANK): run it under mpirun\n");
    return 2;
  }
  fprintf(stderr, "cddp train: --launcher '%s': expected auto, slurm or mpi\n", l);
  return 2;
}

int cddp__cmd_train(int argc, char **argv) {
  static const char *sets[MAX_SETS];
  cddp_train_opts_t o = {.sets = sets};
  const char *launcher = "auto";
  for (int i = 1; i < argc; i++) {
    int missing = 0;
    const char *v;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--config", &missing)) ||
               (v = cddp__flag_value(argc, argv, &i, "--config_path", &missing))) {
      o.config_path = v;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--set", &missing))) {
      if (!strchr(v, '=')) {
        fprintf(stderr, "cddp train: --set %s: expected key=value\n", v);
        return 2;
      }
      if (o.n_sets == MAX_SETS) {
        fprintf(stderr, "cddp train: more than %d --set overrides\n", MAX_SETS);
        return 2;
      }
      sets[o.n_sets++] = v;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--work-dir", &missing)) ||
               (v = cddp__flag_value(argc, argv, &i, "--work_dir", &missing))) {
      o.work_dir = v;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--name", &missing))) {
      o.name = v;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--resume-from", &missing)) ||
               (v = cddp__flag_value(argc, argv, &i, "--resume_from", &missing))) {
      o.resume = v;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--launcher", &missing))) {
      launcher = v;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--backend", &missing))) {
      o.backend = v;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--transport", &missing))) {
      o.transport = v;
    } else if (missing) {
      fprintf(stderr, "cddp train: %s needs a value\n", argv[i]);
      return 2;
    } else {
      fprintf(stderr, "cddp train: unknown option '%s' (cddp train --help lists them)\n", argv[i]);
      return 2;
    }
  }
  if (!o.config_path) {
    fprintf(stderr, "cddp train: --config PATH is required (e.g. --config configs/fmnist_mlp.yaml)\n");
    return 2;
  }
  if (o.resume && !*o.resume) {
    fprintf(stderr, "cddp train: --resume-from: expected latest, none or a checkpoint path\n");
    return 2;
  }
  int rc = check_launcher(launcher);
  if (rc) return rc;
  if (!strcmp(launcher, "auto") && wants_own_launcher()) return exec_own_launcher(argc, argv);
  return cddp__train_main(&o);
}

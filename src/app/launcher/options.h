/* options.h - `cddp run` configuration: flags, CDDP_/PET_ environment mirrors, XTuner and Slurm. */
#ifndef CDDP_LAUNCHER_OPTIONS_H
#define CDDP_LAUNCHER_OPTIONS_H

#include <stdio.h>

#include "cddp/cddp.h"

#define CDDP_RUN_DEFAULT_RDZV_PORT 29400
#define CDDP_RUN_DEFAULT_MASTER_PORT 29500
#define CDDP_RUN_MAX_NPROC 1024

typedef enum cddp_run_mode {
  CDDP_RUN_AGENT = 0,   /* this process is the node's agent: rendezvous, spawn, watch */
  CDDP_RUN_SLURM_RANK,  /* srun started one task per rank: exec PROGRAM as that rank */
  CDDP_RUN_MPI_RANK,    /* mpirun started this task: exec PROGRAM as MPI's rank */
  CDDP_RUN_SLURM_BATCH, /* inside the batch step with --launcher slurm: re-run under srun */
  CDDP_RUN_HELP         /* --help */
} cddp_run_mode_t;

typedef enum cddp_rdzv_backend { CDDP_RDZV_C10D = 0, CDDP_RDZV_STATIC } cddp_rdzv_backend_t;

typedef struct cddp_run_opts {
  cddp_run_mode_t mode;
  int min_nodes, max_nodes;
  int nproc_per_node;
  cddp_rdzv_backend_t backend;
  int standalone;            /* store on 127.0.0.1, free port, random run id, one node */
  char run_id[128];
  char rdzv_host[256];       /* c10d: where the store is */
  int rdzv_port;
  int rdzv_timeout_ms;
  int last_call_ms;
  int node_rank;             /* static: given; -1 = assigned by the rendezvous */
  char master_addr[256];     /* static: store host; workers' MASTER_ADDR */
  char master_src[64];       /* what gave master_addr (--master-addr, SLURM_STEP_NODELIST...) */
  int master_port;
  int static_nodes;          /* static: the nodes a round waits for (Slurm: the step's; else max_nodes) */
  char store_nodes[4096];    /* Slurm: the step's node list; the store may be at any of them ("": master only) */
  int max_restarts;
  int replace;               /* --restart-mode replace: a failed worker is replaced in place */
  int cpu_bind;              /* --cpu-bind auto (1): workers on disjoint shares of the CPUs; none (0) */
  char local_addr[256];      /* address published for this node ("" = route to the store) */
  char log_dir[4096];        /* "" = no log files */
  int grace_ms;              /* SIGTERM -> SIGKILL */
  int hang_ms;               /* --hang-timeout: the watchdog's bound (0 = off) */
  int agent_store;           /* --agent-store auto (1): a torch 1.x script's workers meet in the agent's TCPStore */
  int warm;                  /* --warm-workers on (1): restarts of a Python program take warm spares */
  char warm_preload[512];    /* --warm-preload: what a spare imports ahead (when warm_preload_set) */
  int warm_preload_set;
  int warm_delay_ms;         /* --warm-delay: spares start this long after a round's workers */
  int close_ms;              /* the store's host waits this long for the others at exit */
  int read_ms;               /* 0, or the bound on one store call (--rdzv-conf read_timeout) */
  int is_host;               /* c10d: -1 = host the store when the endpoint is ours; 0/1 forced */
  /* what each worker runs (launcher/program.h): torchrun's rules */
  char python[4096];         /* --python / CDDP_PYTHON: the interpreter of a .py or -m (default python3) */
  int module;                /* -m: PROGRAM is a Python module */
  int no_python;             /* --no-python: PROGRAM runs as it is, even a .py */
  int run_path;              /* --run-path: PROGRAM runs with Python whatever its name */
  char role[64];             /* --role: the workers' ROLE_NAME */
  char nproc_src[400];       /* how --nproc-per-node was given, and what gpu/auto found */
  /* console streams per local rank: bit 0 stdout, bit 1 stderr (--redirects, --tee,
   * --local-ranks-filter); a log file gets every stream */
  unsigned char console[CDDP_RUN_MAX_NPROC];
  int tmp_log_dir;           /* log_dir was made because --redirects asked for files without --log-dir */
  int slurm;                 /* configured from Slurm variables */
  int prog_index;            /* argv index of PROGRAM */
  /* CDDP_RUN_SLURM_RANK: the rank this task runs as */
  int rank, world_size, local_rank, local_world_size;
  char nnodes_src[160], node_rank_src[160]; /* how the user spelled them, for messages */
} cddp_run_opts_t;

/* Parses argv (argv[0] = "run") with envp ("K=V" strings, NULL-terminated; pass environ).
 * Precedence, highest first: flags, CDDP_<FLAG>, PET_<FLAG>, XTuner's NPROC_PER_NODE /
 * NNODES / NODE_RANK / ADDR / PORT, Slurm's variables, defaults. INVALID_ARG with one
 * line naming the flag or variable and the bad value. Never blocks, never exits. */
cddp_result_t cddp__run_parse(int argc, char **argv, char **envp, cddp_run_opts_t *o);

/* The --help text (flags, environment mirrors, precedence). */
void cddp__run_usage(FILE *f);


#endif /* CDDP_LAUNCHER_OPTIONS_H */

/* main.c - the cddp binary: dispatches to a subcommand.
 *
 * Built twice. cddp-full (CDDP_CLI_LIGHT 0) holds every command. cddp itself (CDDP_CLI_LIGHT 1)
 * holds the commands that need neither BLAS nor MPI nor CUDA, the launcher's agent first: at
 * 1,024 agents the dynamic loader and those libraries' constructors were 9 ms of CPU per start,
 * the light binary's ~1.5 ms. It runs the others by exec'ing cddp-full with the same arguments. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cddp/cddp.h"
#include "cli/commands.h"
#include "common/nearest.h"

#ifndef CDDP_CLI_LIGHT
#define CDDP_CLI_LIGHT 0
#endif
/* a command the light binary leaves to cddp-full (it links BLAS, MPI or CUDA) */
#if CDDP_CLI_LIGHT
#define FULL(fn) NULL
#else
#define FULL(fn) fn
#endif

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *help;
} commands[] = {
    {"train", FULL(cddp__cmd_train), "data-parallel training from a YAML config (run it under `cddp run`)"},
    {"run", cddp__cmd_run, "start workers on this node (torchrun-style launcher)"},
    {"store", cddp__cmd_store, "serve a rendezvous store on a TCP port"},
    {"bench", FULL(cddp__cmd_bench), "benchmark collectives (nccl-tests dialect)"},
    {"sample", FULL(cddp__cmd_sample), "print text from a trained GPT checkpoint (temperature, top-k)"},
    {"plot", cddp__cmd_plot, "draw a run's loss, throughput and communication (gnuplot)"},
    {"doctor", cddp__cmd_doctor, "check hosts, interfaces, links, clocks and configs of a job (run it like the job)"},
    {"ckpt", cddp__cmd_ckpt, "inspect or verify a checkpoint (info|verify PATH)"},
    {"flight", cddp__cmd_flight, "read the ranks' flight records: a desync, who is behind, who is stuck"},
    {"status", cddp__cmd_status, "ask a running job: nodes, ranks, steps, last collectives, events (ENDPOINT|RUN_DIR)"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: cddp <command> [options]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].help);
  fprintf(f, "\n`cddp <command> --help` for a command's options; `cddp --version`.\n");
}

/* Runs argv as cddp-full: next to this binary under libexec/cddp/ (the build tree), or in
 * ../libexec/cddp/ (an install). argv[0] stays, so the process looks as it did to pgrep -f. */
static int exec_full(char **argv) {
  char self[PATH_MAX], path[PATH_MAX + 64];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "cddp %s: cannot find its own executable (/proc/self/exe): %s\n", argv[1], strerror(errno));
    return 127;
  }
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  if (slash) *slash = '\0';
  static const char *const where[] = {"/libexec/cddp/cddp-full", "/../libexec/cddp/cddp-full"};
  for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
    snprintf(path, sizeof path, "%s%s", self, where[i]);
    execv(path, argv);
    if (errno != ENOENT) break;
  }
  fprintf(stderr, "cddp %s: cannot run %s: %s (it is built and installed with cddp)\n", argv[1], path,
          strerror(errno));
  return 127;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("cddp %s\n", cddp_version());
    printf("cuda: %s\n", CDDP_HAVE_CUDA ? "device layer built (CUDA runtime static; cuBLAS, NCCL, NVML loaded when used); "
                                          "device tests run on one H100, models not on the GPU yet (docs/gpu.md)"
                                        : "not built (nvcc not found, or NO_CUDA=1)");
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name))
      return commands[i].fn ? commands[i].fn(argc - 1, argv + 1) : exec_full(argv);
  const char *names[sizeof commands / sizeof commands[0]];
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) names[i] = commands[i].name;
  const char *near = cddp__nearest(argv[1], names, sizeof names / sizeof names[0]);
  if (near) {
    fprintf(stderr, "cddp: unknown command '%s' (did you mean %s?)\n", argv[1], near);
    return 2;
  }
  fprintf(stderr, "cddp: unknown command '%s'\n", argv[1]);
  /* under a launcher every rank gets here: the usage once, from local rank 0 */
  const char *local_rank = getenv("LOCAL_RANK");
  if (!local_rank || !strcmp(local_rank, "0")) usage(stderr);
  return 2;
}

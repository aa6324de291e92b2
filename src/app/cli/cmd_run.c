/* cmd_run.c - `cddp run`: the torchrun-style launcher (src/launcher/agent.c does the work). */
#include "cli/commands.h"
#include "launcher/agent.h"

int cddp__cmd_run(int argc, char **argv) { return cddp__run_main(argc, argv); }

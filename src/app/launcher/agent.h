/* agent.h - `cddp run`: the per-node agent (store, rendezvous, rounds, restarts, exit code). */
#ifndef CDDP_LAUNCHER_AGENT_H
#define CDDP_LAUNCHER_AGENT_H

/* The whole of `cddp run`; argv[0] = "run". Returns the process exit status (or execs). */
int cddp__run_main(int argc, char **argv);

#endif /* CDDP_LAUNCHER_AGENT_H */

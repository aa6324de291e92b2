/* commands.h - the subcommands of the cddp binary; each lives in its own cmd_*.c. */
#ifndef CDDP_CLI_COMMANDS_H
#define CDDP_CLI_COMMANDS_H

/* Each returns the process exit status. argv[0] is the subcommand name. */
int cddp__cmd_run(int argc, char **argv);
int cddp__cmd_store(int argc, char **argv);
int cddp__cmd_bench(int argc, char **argv);
int cddp__cmd_train(int argc, char **argv);
int cddp__cmd_ckpt(int argc, char **argv);
int cddp__cmd_plot(int argc, char **argv);
int cddp__cmd_sample(int argc, char **argv);
int cddp__cmd_doctor(int argc, char **argv);
int cddp__cmd_flight(int argc, char **argv);
int cddp__cmd_status(int argc, char **argv);

#endif

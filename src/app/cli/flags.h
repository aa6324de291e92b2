/* flags.h - the one "--flag VALUE" / "--flag=VALUE" matcher the subcommands share. */
#ifndef CDDP_CLI_FLAGS_H
#define CDDP_CLI_FLAGS_H

/* When argv[*i] is flag (alone, then the value is the next argument, or "flag=VALUE"),
 * returns the value and advances *i past it; else NULL. A flag given last without its value
 * sets *missing and returns NULL. */
const char *cddp__flag_value(int argc, char **argv, int *i, const char *flag, int *missing);

#endif /* CDDP_CLI_FLAGS_H */

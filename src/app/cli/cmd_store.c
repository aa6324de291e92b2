/* cmd_store.c - `cddp store`: serve a rendezvous store on a TCP port until SIGINT/SIGTERM. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cddp/store.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/check.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: cddp store --port P [--host ADDR] [--token-file F]\n"
          "  --port P          TCP port to listen on (0: any free port)\n"
          "  --host ADDR       address to bind (default: all interfaces)\n"
          "  --token-file F    file holding the job token (default: CDDP_TOKEN, then\n"
          "                    CDDP_TOKEN_FILE; none = no authentication)\n"
          "Serves until SIGINT or SIGTERM, then exits 0.\n");
}

int cddp__cmd_store(int argc, char **argv) {
  const char *host = NULL, *port_s = NULL, *token_file = NULL;
  for (int i = 1; i < argc; i++) {
    int missing = 0;
    const char *v;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--port", &missing))) {
      port_s = v;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--host", &missing))) {
      host = v;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--token-file", &missing))) {
      token_file = v;
    } else if (missing) {
      fprintf(stderr, "cddp store: %s needs a value\n", argv[i]);
      usage(stderr);
      return 2;
    } else {
      fprintf(stderr, "cddp store: unknown flag '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (!port_s) {
    fprintf(stderr, "cddp store: --port is required\n");
    usage(stderr);
    return 2;
  }
  char *end;
  errno = 0;
  long port = strtol(port_s, &end, 10);
  if (errno || *end || end == port_s || port < 0 || port > 65535) {
    fprintf(stderr, "cddp store: --port %s is not a port number (0-65535)\n", port_s);
    return 2;
  }
  static char token[4096];
  if (token_file) setenv("CDDP_TOKEN_FILE", token_file, 1), unsetenv("CDDP_TOKEN");
  if (cddp_token_from_env(token, sizeof token) != CDDP_OK) {
    fprintf(stderr, "cddp store: %s\n", cddp_last_error());
    return 1;
  }
  /* the server thread inherits this mask, so the signals come to sigwait below */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  cddp_store_server_t *srv;
  if (cddp_store_server_start(&srv, host, (int)port, token) != CDDP_OK) {
    fprintf(stderr, "cddp store: %s\n", cddp_last_error());
    return 1;
  }
  printf("cddp store: listening on %s:%d%s\n", host ? host : "0.0.0.0",
         cddp_store_server_port(srv), token[0] ? " (token required)" : "");
  fflush(stdout);
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  CDDP_INFO(CDDP_SUB_STORE, "store: signal %d, stopping", sig);
  cddp_store_server_stop(srv);
  return 0;
}

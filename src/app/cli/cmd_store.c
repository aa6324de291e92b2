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
#include "common/log.h"
#include "store/failover.h"
#include "store/store_internal.h"

/* Marks this store as one that never moves (store/failover.h), through a client of its own: the
 * agents then skip their wait for a peers list. Without it they only wait, so a failure is INFO. */
static void mark_fixed(const char *host, int port, const char *token) {
  const char *to = !host || !strcmp(host, "0.0.0.0") ? "127.0.0.1" : !strcmp(host, "::") ? "::1" : host;
  cddp_store_t *s = NULL;
  if (cddp__store_tcp_connect_here(&s, to, port, token, 5000) != CDDP_OK ||
      cddp_store_set(s, CDDP__FIXED_KEY, "1", 1) != CDDP_OK)
    CDDP_INFO(CDDP_SUB_STORE, "store: cannot set %s (agents wait 1 s for a peers list): %s", CDDP__FIXED_KEY,
              cddp_last_error());
  cddp_store_close(s);
}

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
  const char *host = NULL, *token_file = NULL;
  long port = -1;
  const cddp__flag_t flags[] = {
      CDDP__FLAG_LONG_ROW("--port", &port, 0, 65535, "a port number (0-65535)"),
      CDDP__FLAG_STR_ROW("--host", NULL, &host),
      CDDP__FLAG_STR_ROW("--token-file", NULL, &token_file),
  };
  const cddp__cli_t cli = {.cmd = "store", .flags = flags, .n_flags = 3, .usage = usage};
  int rc = cddp__flags_parse(&cli, argc, argv);
  if (rc >= 0) return rc;
  if (port < 0) {
    fprintf(stderr, "cddp store: --port is required\n");
    usage(stderr);
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
  mark_fixed(host, cddp_store_server_port(srv), token);
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

/* store_reach.h - where a job's store is, as its agent knows it, and reaching it: the endpoint,
 * the nodes of a Slurm step it may have moved to, connecting a "<run_id>/" view and
 * reconnecting one whose connection broke. */
#ifndef CDDP_JOB_STORE_REACH_H
#define CDDP_JOB_STORE_REACH_H

#include "cddp/store.h"

typedef struct cddp__job_store {
  const char *run_id, *token; /* borrowed: the job's id, the store's token */
  int timeout_ms;             /* --rdzv-timeout: how long a (re)connection may take */
  char host[256];             /* the store's endpoint, then wherever it was last reached */
  int port;
  char **cand;                /* a Slurm step's nodes, where the store may live (nodelist.h); ncand < 2: none */
  int ncand;
} cddp__job_store_t;

/* The nodes of the Slurm step (a host list, with js->host first) as the places the store may
 * have moved to. Does not block. Error: INVALID_ARG naming the list's fault. */
cddp_result_t cddp__job_store_candidates(cddp__job_store_t *js, const char *nodes);
/* A raw connection to the job's store within timeout_ms (blocks up to that). With candidates,
 * the endpoint is tried for up to 1 s, then each other node in order; only a server that knows
 * the job counts. probe: one round over the other nodes only (does the job's store live on
 * elsewhere?). On success js->host/port say where it landed. Errors: AUTH (the token was
 * refused), else TIMEOUT / NOT_FOUND / SYSTEM naming each place tried. */
cddp_result_t cddp__job_store_reach(cddp__job_store_t *js, int timeout_ms, int probe, cddp_store_t **base);
/* The job's "<run_id>/" view on a fresh connection, within js->timeout_ms. The error line is
 * the one a user reads (the refused token, the endpoint that never answered). */
cddp_result_t cddp__job_store_connect(cddp__job_store_t *js, cddp_store_t **view);
/* The same, and *raw the unprefixed connection under it (the view owns it: closing the view
 * closes it), for a helper that reads keys outside the job's prefix on the same connection. */
cddp_result_t cddp__job_store_connect_base(cddp__job_store_t *js, cddp_store_t **view, cddp_store_t **raw);
/* *view's connection broke, or not: 0 it works, 1 *view is a fresh connection, -1 none within
 * js->timeout_ms (cddp_last_error says why). The old view is left open: a thread may still be
 * blocked in it. */
int cddp__job_store_reconnect(cddp__job_store_t *js, cddp_store_t **view);
/* Where the store is now: moved by a take-over this process saw, else js->host/port. */
void cddp__job_store_now(const cddp__job_store_t *js, char *host, size_t size, int *port);
/* A fresh job token: 32 hex digits from getrandom, into buf (size >= 33). 0, or -1 with buf "" when
 * the kernel gives no randomness (the job then runs without one, and says so). */
int cddp__job_token_random(char *buf, size_t size);
/* Frees the candidates. */
void cddp__job_store_release(cddp__job_store_t *js);

#endif /* CDDP_JOB_STORE_REACH_H */

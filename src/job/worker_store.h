/* worker_store.h - a torch job's workers meet in the job's own store (TORCHELASTIC_USE_AGENT_STORE=True):
 * the store server that hosts the job speaks torch's TCPStore protocol too (1.x and 2.x,
 * store/torch_proto.h) on the same port, so the workers' MASTER_PORT is the port the user gave
 * and a firewall that opens only that port works. Each round's workers get a key space of their
 * own (torch/round in jobkeys.h). */
#ifndef CDDP_JOB_WORKER_STORE_H
#define CDDP_JOB_WORKER_STORE_H
#include "cddp/store.h"

/* Starts the job's store server as cddp_store_server_start does (host, port, token), serving
 * torch's protocol too, its keys by round of job RUN_ID. Does not block. */
cddp_result_t cddp__job_torch_store_start(cddp_store_server_t **out, const char *host, int port, const char *token,
                                          const char *run_id);
/* The hosting agent says so in the job (store: the job's "<run_id>/" view), before it joins. */
cddp_result_t cddp__job_torch_store_mark(cddp_store_t *store);
/* Whether the job's store serves torch for this job (another job's store or a `cddp store` does
 * not): 1 yes, 0 no, -1 the store did not answer (error set). */
int cddp__job_torch_store_served(cddp_store_t *store);
/* Round's workers own the torch keys from now on: set before they start. */
cddp_result_t cddp__job_torch_store_round(cddp_store_t *store, int round);

#endif /* CDDP_JOB_WORKER_STORE_H */

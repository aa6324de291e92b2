/* worker_store.h - the TCPStore a torch job's workers meet in when the agent serves it
 * (TORCHELASTIC_USE_AGENT_STORE=True): a store server that speaks torch's protocol, 1.x and 2.x
 * (store/torch_proto.h). One per round, on a fresh port, so no key of an earlier round is seen. */
#ifndef CDDP_JOB_WORKER_STORE_H
#define CDDP_JOB_WORKER_STORE_H
#include "cddp/store.h"

/* Listens at a free port on every address of the family of STORE_HOST (IPv6 when it holds a ':',
 * as the job's store does) and serves from a thread of its own; its port is
 * cddp_store_server_port(*out), and cddp_store_server_stop ends it. Does not block. */
cddp_result_t cddp__job_worker_store_start(const char *store_host, cddp_store_server_t **out);

#endif /* CDDP_JOB_WORKER_STORE_H */

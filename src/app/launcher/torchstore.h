/* torchstore.h - a key-value store that speaks torch 1.x's TCPStore wire protocol, served by
 * the agent for its workers: with TORCHELASTIC_USE_AGENT_STORE=True, torch's env:// and tcp://
 * rendezvous connect to it as clients instead of rank 0 hosting one, so no worker waits for
 * rank 0's listener (torch retries a refused connect after 1 s). One per round, on a fresh port. */
#ifndef CDDP_LAUNCHER_TORCHSTORE_H
#define CDDP_LAUNCHER_TORCHSTORE_H
#include "cddp/cddp.h"

typedef struct cddp__torch_store cddp__torch_store_t;

/* Listens on every address of family AF_INET or AF_INET6 at a free port (*port) and serves
 * from a thread of its own. */
cddp_result_t cddp__torch_store_start(int family, cddp__torch_store_t **out, int *port);
/* Stops the thread, closes every connection, frees the keys. NULL is fine. */
void cddp__torch_store_stop(cddp__torch_store_t *ts);

#endif /* CDDP_LAUNCHER_TORCHSTORE_H */

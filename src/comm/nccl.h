/* nccl.h - the nccl backend (nccl.c: NCCL and the CUDA driver loaded with dlopen, so cddp
 * runs where neither is installed) and its rendezvous through cddp's store (nccl_boot.c). */
#ifndef CDDP_COMM_NCCL_H
#define CDDP_COMM_NCCL_H

#include "comm/transport.h"

#define CDDP__NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */

extern const cddp__transport_t cddp__transport_nccl;

/* OK when backend nccl can run here: built with NCCL's header, libcuda.so.1 and a GPU
 * present, libnccl.so.2 loadable. Otherwise INVALID_USAGE with one line that says which:
 * "backend 'nccl' needs a GPU: no NVIDIA driver (libcuda.so.1 ...)". */
cddp_result_t cddp__nccl_available(void);

/* Makes NCCL's unique id (rank 0 only); non-OK with cddp_last_error set on failure. */
typedef cddp_result_t (*cddp__nccl_make_id_fn)(void *arg, unsigned char id[CDDP__NCCL_ID_BYTES]);

/* The rendezvous of one round (the comm's store view is per round, so each generation gets
 * its own id): every rank publishes the GPU it drives ("<PCI bus id>"), rank 0 makes and
 * publishes the unique id, every rank reads the id and the peers' GPUs. Two ranks of one host
 * on one GPU are refused (INVALID_USAGE naming both: NCCL needs one GPU per rank). Bounded by
 * cfg->timeout_ms and *aborted. */
cddp_result_t cddp__nccl_rendezvous(const cddp__comm_ctx_t *ctx, const char *gpu, cddp__nccl_make_id_fn make_id,
                                    void *arg, unsigned char id[CDDP__NCCL_ID_BYTES]);

/* The stream the collectives of a communicator of backend nccl run on (a CUstream /
 * cudaStream_t, e.g. the trainer's); state is cddp__comm_transport_state's for "nccl".
 * Until it is called the backend uses a stream of its own. */
void cddp__nccl_use_stream(void *state, void *stream);

#endif /* CDDP_COMM_NCCL_H */

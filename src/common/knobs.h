/* knobs.h - every environment knob, declared once: name, variable, default, meaning.
 * docs/knobs.md is checked against this table by tests/unit/test_knobs.c. */
#ifndef CDDP_COMMON_KNOBS_H
#define CDDP_COMMON_KNOBS_H

#include <stdint.h>

/* X(id, "VARIABLE", "default", "one-line meaning") */
#define CDDP_KNOB_MAP(X)                                                                       \
  X(DEBUG, "CDDP_DEBUG", "WARN", "log level: NONE, WARN, INFO or TRACE")                       \
  X(DEBUG_SUBSYS, "CDDP_DEBUG_SUBSYS", "",                                                     \
    "subsystems logged at INFO/TRACE: comma list of INIT,STORE,RDZV,RUN,COMM,SHM,NET,BENCH,ENV,ERR,TRAIN,DDP; ^ excludes; empty = all") \
  X(DEBUG_TIMESTAMP, "CDDP_DEBUG_TIMESTAMP", "0",                                             \
    "1: each log line starts with the wall clock in seconds, to line up an agent's events with its workers'") \
  X(SOCKET_IFNAME, "CDDP_SOCKET_IFNAME", "",                                                   \
    "interface for TCP: prefix list (eth,ib), ^prefix to exclude, =name exact; empty = the one routing to the master") \
  X(NSTREAMS, "CDDP_NSTREAMS", "2", "TCP connections per peer")                                \
  X(TIMEOUT_MS, "CDDP_TIMEOUT_MS", "300000", "bound on any wait inside a collective or comm init, ms") \
  X(BACKEND, "CDDP_BACKEND", "native", "collective backend: native (cddp's shm/tcp), mpi (Open MPI's collectives, under mpirun) or nccl (GPU buffers)") \
  X(TRANSPORT, "CDDP_TRANSPORT", "auto",                                                      \
    "auto (shm within a host; across hosts hier when every host runs the same number >= 2 of ranks, else tcp), shm, tcp (flat) or hier") \
  X(ALGO, "CDDP_ALGO", "auto", "collective algorithm: auto, ring or direct")                   \
  X(DIRECT_MAX_BYTES, "CDDP_DIRECT_MAX_BYTES", "65536",                                        \
    "auto picks the latency algorithm at or below this message size; set, it overrides the tuner") \
  X(HIER_SEGMENT_BYTES, "CDDP_HIER_SEGMENT_BYTES", "4194304",                                 \
    "hier: large allreduces are pipelined in segments of about this size (at most 15)")      \
  X(SHM_CHUNK_BYTES, "CDDP_SHM_CHUNK_BYTES", "262144", "staging chunk per rank for shm copies") \
  X(SHM_NT_BYTES, "CDDP_SHM_NT_BYTES", "0",                                                   \
    "shm: non-temporal stores into the user's buffers from this message size on (0 = never)") \
  X(SHM_CMA, "CDDP_SHM_CMA", "1",                                                              \
    "shm: 1 = read/write peers' ordinary buffers with process_vm_readv/writev when allowed, 0 = staged; set, it overrides the tuner") \
  X(TUNE, "CDDP_TUNE", "1",                                                                   \
    "shm, tcp: 1 = the first allreduce above 4 KiB calibrates which mechanism each size class uses; 0 = fixed defaults") \
  X(TUNE_MS, "CDDP_TUNE_MS", "40", "bound on that calibration, ms")                           \
  X(TCP_CHUNK_BYTES, "CDDP_TCP_CHUNK_BYTES", "1048576",                                          \
    "TCP pipeline chunk: the unit striped over streams and the staging slot per stream")     \
  X(TCP_CONGESTION, "CDDP_TCP_CONGESTION", "auto",                                              \
    "TCP congestion control for data connections: auto (reno within one host, system default across), system, or a name") \
  X(SPIN_US, "CDDP_SPIN_US", "20", "busy-wait this long before sleeping on a futex")           \
  X(RECOVER_TIMEOUT_MS, "CDDP_RECOVER_TIMEOUT_MS", "30000",                                   \
    "restart mode replace: how long survivors wait for the job to re-form after a failure, ms") \
  X(HEARTBEAT_MS, "CDDP_HEARTBEAT_MS", "500",                                                 \
    "restart mode replace: how often each agent beats its heartbeat in the store, ms")       \
  X(HEARTBEAT_TIMEOUT_MS, "CDDP_HEARTBEAT_TIMEOUT_MS", "3000",                                \
    "restart mode replace: a member agent whose heartbeat stands still this long is declared lost, ms") \
  X(DATA_CACHE, "CDDP_DATA_CACHE", "",                                                         \
    "directory of decompressed data sets mapped by later loads; empty = $TMPDIR/cddp-cache-<uid>, off = none") \
  X(STORE_TIMEOUT_MS, "CDDP_STORE_TIMEOUT_MS", "300000", "default bound on a store client call, ms") \
  X(STORE_HELLO_TIMEOUT_MS, "CDDP_STORE_HELLO_TIMEOUT_MS", "10000",                            \
    "a store connection that has not authenticated (without a token: sent no request) this long after connecting is dropped, ms") \
  X(STORE_FAILOVER, "CDDP_STORE_FAILOVER", "1",                                               \
    "cddp run --restart-mode replace with --nnodes MAX >= 2: 1 = the store survives its host (standby stores, a vote); 0 = off") \
  X(STORE_FAILOVER_MS, "CDDP_STORE_FAILOVER_MS", "30000",                                      \
    "a store client whose store's host is lost waits this long for a listed peer to take the store over, ms") \
  X(FLIGHT, "CDDP_FLIGHT", "1",                                                              \
    "1: record every collective (the flight recorder the agent reads to find hangs); 0: off") \
  X(PY_SPY, "CDDP_PY_SPY", "py-spy",                                                          \
    "cddp run: the py-spy the watchdog runs for Python workers' stacks (a path, or a name on PATH)") \
  X(WARM_NICE, "CDDP_WARM_NICE", "0",                                                        \
    "cddp run: the nice value (0-19) a warm spare imports at; set back to the agent's own when it becomes a worker") \
  X(DESYNC_CHECK, "CDDP_DESYNC_CHECK", "1",                                                    \
    "1: every collective's kind, count, dtype and op are compared across ranks (a mismatch fails every rank, naming both calls); 0: off") \
  X(RDZV_SAY_MS, "CDDP_RDZV_SAY_MS", "10000",                                                 \
    "cddp run: while a node waits at the rendezvous, how often it says what it waits for, ms") \
  X(TOKEN, "CDDP_TOKEN", "", "job token for the store's challenge-response (never sent on the wire)") \
  X(TOKEN_FILE, "CDDP_TOKEN_FILE", "", "file holding the job token (used when CDDP_TOKEN is unset)") \
  X(CPU_BF16, "CDDP_CPU_BF16", "auto",                                                        \
    "train.precision bf16, its path: auto = the fastest this CPU has; avx512_bf16 (VDPBF16PS), avx512, avx2, sse2 (fp32 FMA, the same bits)") \
  X(LINEAR_FORM, "CDDP_LINEAR_FORM", "auto",                                                  \
    "the fully connected layers' product: auto = x W^T or (W x^T)^T, the faster timed per shape on first use; direct; transposed") \
  X(TRIAL_PICK, "CDDP_TRIAL_PICK", "",                                                         \
    "tests: the way the first steps' trial keeps once it has timed them all (after, overlapped, sharded), not the fastest") \
  X(DEVICE_EMULATE, "CDDP_DEVICE_EMULATE", "0",                                                 \
    "tests: 1 = train.device cuda|auto with no GPU trains on an emulated device (the CPU's kernels on memory the host cannot read)")

typedef enum cddp_knob {
#define CDDP_KNOB_ENUM(id, var, def, doc) CDDP_KNOB_##id,
  CDDP_KNOB_MAP(CDDP_KNOB_ENUM)
#undef CDDP_KNOB_ENUM
  CDDP_KNOB_COUNT
} cddp_knob_t;

/* The variable's value, else its fallback's (NCCL's and Gloo's names for the same setting:
 * CDDP_DEBUG <- NCCL_DEBUG, CDDP_DEBUG_SUBSYS <- NCCL_DEBUG_SUBSYS, CDDP_SOCKET_IFNAME <-
 * NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME), else its default. Never NULL. */
const char *cddp__knob_str(cddp_knob_t k);
/* The variable that gave cddp__knob_str's value: the knob's own, a fallback's, or NULL
 * when it is the default. */
const char *cddp__knob_source(cddp_knob_t k);
/* Integer value; a malformed value logs a WARN naming the variable and yields the default. */
int64_t cddp__knob_int(cddp_knob_t k);
const char *cddp__knob_var(cddp_knob_t k);
const char *cddp__knob_default(cddp_knob_t k);
const char *cddp__knob_doc(cddp_knob_t k);

#endif /* CDDP_COMMON_KNOBS_H */

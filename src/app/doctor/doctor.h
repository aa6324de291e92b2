/* doctor.h - `cddp doctor`'s parts: what one rank knows about itself, its probe sockets
 * (listener, bounded connects, ping-pong, bulk transfer), and the report rank 0 writes. */
#ifndef CDDP_DOCTOR_H
#define CDDP_DOCTOR_H

#include <net/if.h>
#include <stdint.h>
#include <stdio.h>

#include "cddp/cddp.h"

#define CDDP__DOC_MAX_IFS 16
#define CDDP__DOC_MAX_KEYS 128

typedef struct cddp__doc_if {
  char name[IF_NAMESIZE];
  char addr[64];
  int up, loopback;
} cddp__doc_if_t;

/* One rank's self-description, published in the store as text (doc_info_encode). */
typedef struct cddp__doc_info {
  int rank, present;
  char host[128];
  char spec[128];       /* CDDP_SOCKET_IFNAME as set ("" when unset) */
  char master[256];     /* the master's host as TCP sees it ("" when none) */
  char route[64];       /* local address routing to the master ("" when none) */
  char chosen[IF_NAMESIZE], chosen_addr[64];
  char why[448];        /* why that interface */
  char spec_error[384]; /* CDDP_SOCKET_IFNAME matched nothing usable: what is wrong */
  char suggest[IF_NAMESIZE]; /* the interface the rules pick without CDDP_SOCKET_IFNAME */
  int port;             /* the doctor's probe port on chosen_addr */
  int port_lo, port_hi; /* the kernel's ephemeral range (cddp's TCP transport binds there) */
  int nif;
  cddp__doc_if_t ifs[CDDP__DOC_MAX_IFS];
  int cfg_state;        /* 0 no --config, 1 loaded, -1 failed */
  char cfg_err[384];
  uint64_t cfg_hash;
  int nkeys;
  uint64_t keys[CDDP__DOC_MAX_KEYS];
  char gpus[448];       /* this host's GPUs through NVML, one line (cddp__doc_gpus) */
} cddp__doc_info_t;

/* This host's GPUs in one line: "2 (driver 550.54, CUDA 12.4): 0 NVIDIA H100 ... 81559 MiB, 1 ...
 * (NODE to GPU 0)", or why there are none ("none: no NVIDIA driver (libnvidia-ml.so.1 not found)").
 * NVML is dlopened: the doctor runs where it is absent. */
void cddp__doc_gpus(char *out, size_t cap);

/* Fills the network part of info for this process (hostname, interfaces, the choice cddp's
 * TCP transport would make and why). When CDDP_SOCKET_IFNAME matches nothing usable, records
 * spec_error and chooses what the rules give without it, so the probes still run. */
cddp_result_t cddp__doc_info_local(cddp__doc_info_t *info);
/* Text form (one "key value" per line): malloc'd, NUL-terminated. */
char *cddp__doc_info_encode(const cddp__doc_info_t *info, size_t *len);
/* INVALID_ARG naming the line when text is not an encoded info. */
cddp_result_t cddp__doc_info_decode(const char *text, cddp__doc_info_t *info);

/* How a connect to a peer ended. */
typedef enum cddp__doc_reach {
  CDDP__REACH_OK = 0,
  CDDP__REACH_REFUSED,
  CDDP__REACH_TIMEOUT,
  CDDP__REACH_NOROUTE,
  CDDP__REACH_NETUNREACH,
  CDDP__REACH_WRONG_PEER, /* something answered, but not the doctor of that rank */
  CDDP__REACH_OTHER,
  CDDP__REACH_UNTRIED
} cddp__doc_reach_t;
const char *cddp__doc_reach_str(cddp__doc_reach_t r);

/* ---- probe sockets ---- */
typedef struct cddp__doc_server cddp__doc_server_t;
/* Listens on addr (numeric) port 0 and answers probes on a background thread until stop. */
cddp_result_t cddp__doc_server_start(cddp__doc_server_t **out, const char *addr, int rank, int io_timeout_ms);
int cddp__doc_server_port(const cddp__doc_server_t *s);
void cddp__doc_server_stop(cddp__doc_server_t *s);

/* Connects to every target at once (addr[i]:port[i], rank[i]), each bounded by timeout_ms, and
 * checks that the doctor of rank[i] answers. result[i] receives the outcome. Never blocks
 * longer than about 2 * timeout_ms. */
void cddp__doc_probe_all(int n, const char *const *addr, const int *port, const int *rank, int my_rank,
                         int timeout_ms, cddp__doc_reach_t *result);

typedef struct cddp__doc_meas {
  int ok;
  double lat_us;      /* half the median round trip of small messages */
  double offset_ms;   /* peer's realtime clock minus ours, at the fastest round trip */
  double offset_err_ms; /* half that round trip: the offset's uncertainty */
  double bw_to, bw_from; /* Gbit/s: our bytes to the peer, the peer's bytes to us */
  char err[256];
} cddp__doc_meas_t;
/* Latency (iters ping-pongs), clock offset, and bytes each way, against the peer's server. */
void cddp__doc_measure(const char *addr, int port, int peer_rank, int my_rank, int iters, uint64_t bytes,
                       int timeout_ms, cddp__doc_meas_t *m);

/* Round-robin tournament (circle method) over n members: in round r (0 <= r < rounds(n)),
 * member i meets the member returned (-1: sits out). Every pair meets exactly once. */
int cddp__doc_rounds(int n);
int cddp__doc_partner(int n, int round, int i);

/* ---- report (rank 0) ---- */
typedef struct cddp__doc_job {
  int world;               /* ranks the job has */
  int n;                   /* members: ranks that reported, ascending */
  const cddp__doc_info_t *info; /* [n] */
  const cddp__doc_reach_t *reach; /* [n*n], reach[i*n+j]: member i -> member j */
  const cddp__doc_meas_t *meas;   /* [n*n], filled for i < j from i's side (NULL: none) */
  const int *missing;      /* ranks that did not report */
  int nmissing;
  double wait_s;           /* how long rank 0 waited for them */
  const char *store;       /* "host:port" of the store */
  const char *cfg_path;    /* --config, or NULL */
  const char *const *cfg_keys; /* names of the config keys, for the first differing one */
  int iters;
  uint64_t bytes;
  double max_offset_ms;
} cddp__doc_job_t;
/* Writes the report to out and returns the number of problems (each printed on one line
 * starting "problem: " with what to do after "->"). */
int cddp__doc_report(const cddp__doc_job_t *job, FILE *out);

#endif /* CDDP_DOCTOR_H */

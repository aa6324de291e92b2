/* failover.h - a TCP store that moves: the peers list a job's store publishes, and the process's
 * view of it that every TCP client of the process fails over by (docs/store.md, "Failover").
 *
 * The store's host writes CDDP__PEERS_KEY (a raw key, outside any prefix view):
 *   "epoch <E>\n<agent id> <host> <port>\n..."
 * E is the store's epoch (0 for the first host; each host that takes over bumps it) and every
 * line names a server that may take over (a member agent's standby), the current host's
 * included. A client that reads the key at connect remembers E and the list; when its
 * connection breaks it polls the listed servers until one publishes an epoch above E, and
 * repeats its call there. A server with the same or a lower epoch (the old host, back after a
 * partition) is never taken. Without the key (a plain `cddp store`) nothing changes. */
#ifndef CDDP_STORE_FAILOVER_H
#define CDDP_STORE_FAILOVER_H

#include <stddef.h>
#include <stdint.h>

#define CDDP__PEERS_KEY "cddp/peers"
/* Set by a store that never moves (`cddp store`), so that an agent knows at once that no peers
 * list will come, instead of waiting for one as it does at an agent's store that is starting. */
#define CDDP__FIXED_KEY "cddp/fixed"
#define CDDP__MAX_PEERS 64

typedef struct cddp__peer {
  int id; /* the agent that serves it (-1: none named) */
  char host[256];
  int port;
} cddp__peer_t;

typedef struct cddp__peers {
  int64_t epoch;
  int n;
  cddp__peer_t p[CDDP__MAX_PEERS];
} cddp__peers_t;

/* 0, or -1 when the text is not a peers list (an empty list is one: n = 0). */
int cddp__peers_parse(const void *text, size_t len, cddp__peers_t *out);
/* The text into buf (NUL-terminated); its length, or 0 when it does not fit. */
size_t cddp__peers_format(const cddp__peers_t *p, char *buf, size_t size);
/* The index of the server at host:port in p, or -1. */
int cddp__peers_find(const cddp__peers_t *p, const char *host, int port);

/* The process's view: the list with the highest epoch any client of this process read. */
void cddp__failover_note(const cddp__peers_t *p);
/* Where the job's store is now when it moved (the view's epoch > 0; its host is listed first):
 * 0 with host and port, else -1. */
int cddp__failover_current(char *host, size_t size, int *port);
/* The epoch of the process's view (-1: none), cheaply. */
int64_t cddp__failover_epoch(void);
/* 0 with *out filled, -1 when no client of this process read a peers list. */
int cddp__failover_view(cddp__peers_t *out);
/* The latest epoch whose list (as this process read it) named host:port; -1: none did. A
 * client that connected before its server listed itself fails over from that epoch. */
int64_t cddp__failover_epoch_of(const char *host, int port);

/* Called once per lost epoch, by the first client of the process that finds its store gone,
 * from inside that client's call (it must not use that client; it may start a thread). */
typedef void (*cddp__failover_hook_t)(const char *lost_host, int lost_port, int64_t epoch, void *arg);
void cddp__failover_set_hook(cddp__failover_hook_t fn, void *arg);
void cddp__failover_lost(const char *host, int port, int64_t epoch);

/* Nobody takes the store over with this node (it stops, or it was cut off): every client the
 * process made before fails at once instead of failing over, now and later; clients made after
 * (a node that comes back connects afresh) may fail over again. cddp__failover_era() counts the
 * give-ups: a client fails over only in the era it was made in. */
void cddp__failover_give_up(void);
int64_t cddp__failover_era(void);

#endif /* CDDP_STORE_FAILOVER_H */

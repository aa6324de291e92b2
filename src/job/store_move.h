/* store_move.h - the job's store outlives its host (cddp run, either restart mode, --nnodes
 * MAX >= 2): every member agent serves a standby store and lists it in the store's peers list
 * (store/failover.h); when the host is lost, the next member in line takes the store over with
 * the votes of a majority of the latest generation's members (of two, the survivor alone when
 * the lost host's port refuses), rebuilds it from what they hold,
 * and drops the lost host's node through the will it writes for it. The design and its
 * split-brain argument: docs/store.md, "Failover". */
#ifndef CDDP_JOB_STORE_MOVE_H
#define CDDP_JOB_STORE_MOVE_H

#include <stdint.h>

#include "job/rdzv.h"
#include "job/elastic.h"

typedef struct cddp__store_move cddp__store_move_t;

typedef struct cddp__store_move_cfg {
  const char *run_id, *token;
  int self;                    /* this agent's id */
  const char *store_host;      /* the store as this agent reaches it */
  int store_port;
  int hosting;                 /* this agent's process serves that store */
  int hb_timeout_ms;           /* CDDP_HEARTBEAT_TIMEOUT_MS: the lease of a host cut off */
  int notify_fd;               /* STORE_STOP / STORE_CUT (job/events.h) go here when this node must stop,
                                  STORE_MOVED when it voted for or became the new host (-1: later) */
  int restart_all;             /* --restart-mode restart-all: generations are rounds; a take-over
                                  announces the latest as the restart it was */
  int torch;                   /* the workers meet in the job's store (job/worker_store.h): a standby
                                  must speak torch's protocol too, or they lose it at the move */
  cddp_store_t *conn;          /* an unprefixed connection to that store the caller lends (its own
                                  calls are short, on the same thread): no connection of its own, one
                                  descriptor fewer per agent at the store host; NULL: it opens one */
} cddp__store_move_cfg_t;

/* 1 when the job's store should be able to move: the knob CDDP_STORE_FAILOVER is on, room for 2
 * or more nodes, not --standalone (replace and restart-all mode alike). */
int cddp__store_move_wanted(int max_nodes, int standalone);
/* The store's host lists itself (agent id not known yet: -1) the moment it serves, so that
 * every client reads a list naming it from its first connection. */
cddp_result_t cddp__store_move_list_host(const char *host, int port, const char *token);
/* Starts this agent's standby (unless it hosts the store), lists it in the peers list and
 * hooks the process's store clients: a lost store starts the vote. *out stays NULL (and OK)
 * when no agent hosts the store (`cddp store` elsewhere: it lists no peers), which cannot move. */
cddp_result_t cddp__store_move_start(cddp__store_move_t **out, const cddp__store_move_cfg_t *cfg);
/* Where the STORE_STOP / STORE_CUT events go (the membership's pipe, made after the start). */
void cddp__store_move_notify(cddp__store_move_t *mv, int fd);
/* The latest generation this agent saw: what it votes with. */
void cddp__store_move_note(cddp__store_move_t *mv, const cddp__members_t *m, int64_t gen);
/* The count of worker replacements (elastic/restarts) this agent saw: the most any voter saw
 * is the count the store's new host starts from, so a move does not reset the budget. */
void cddp__store_move_restarts(cddp__store_move_t *mv, int64_t restarts);
/* The rendezvous round this agent is in (copied): a take-over writes it back, so that a node
 * started after the move finds the round closed and waits to be taken in. */
void cddp__store_move_round(cddp__store_move_t *mv, const cddp__rdzv_cfg_t *cfg, const cddp__rdzv_t *rz);
/* This agent came back under a new id: listed again under it. */
cddp_result_t cddp__store_move_rejoin(cddp__store_move_t *mv, int new_id);
/* 1 while this agent's process serves the job's store (from the start, or since it took over):
 * it holds the lease (the monitor's minority check) and waits for the others at exit. The
 * address stays valid for cddp__monitor_lease. NULL: 0. */
int cddp__store_move_hosting(const cddp__store_move_t *mv);
const int *cddp__store_move_hosting_flag(const cddp__store_move_t *mv);
/* Why this node stops (after a STORE_STOP or STORE_CUT event). */
const char *cddp__store_move_line(const cddp__store_move_t *mv);
/* Stops the standby (after the agent's last store call) and frees. NULL is a no-op. */
void cddp__store_move_stop(cddp__store_move_t *mv);

#endif /* CDDP_JOB_STORE_MOVE_H */

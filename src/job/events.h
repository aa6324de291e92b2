/* events.h - what the agent's membership threads tell its main loop (the monitor's findings, the
 * store move's verdict): one struct with a kind, through one pipe the main loop polls. Never text
 * to be parsed: the line a person reads is made by the reader, from the fields. */
#ifndef CDDP_JOB_EVENTS_H
#define CDDP_JOB_EVENTS_H

#include <stddef.h>
#include <stdint.h>

typedef enum cddp__agent_ev_kind {
  CDDP__AEV_LOST = 1,   /* member `id` is gone; `why` says how (no heartbeat, connection closed) */
  CDDP__AEV_PENDING,    /* agent `id` waits to be taken in */
  CDDP__AEV_WAITED,     /* the wait below MIN ran out */
  CDDP__AEV_GEN,        /* generation `value` was announced */
  CDDP__AEV_CUT,        /* this node's heartbeat went unanswered; `why`: the failure */
  CDDP__AEV_STORE_STOP, /* the store is gone for good and nobody here takes it over */
  CDDP__AEV_STORE_CUT,  /* the store is unreachable and may live on: this node may be the one cut off */
  CDDP__AEV_FROZE,      /* this store host stood still for `value` ms */
  CDDP__AEV_MINORITY,   /* this store host hears from `id` of its `n` nodes */
  CDDP__AEV_STOP,       /* the job's stop key was written */
  CDDP__AEV_STORE_MOVED, /* this node voted for agent `id` to host the store at epoch `value`, or took it over */
} cddp__agent_ev_kind_t;

typedef struct cddp__agent_ev {
  cddp__agent_ev_kind_t kind;
  int id, n;
  int64_t value;
  char why[200]; /* for people only; always terminated */
} cddp__agent_ev_t;

/* Writes ev to fd whole (one write, below PIPE_BUF, so writers of several threads never
 * interleave). Does not block on a pipe with room; a full or closed pipe drops the event. */
void cddp__agent_ev_send(int fd, const cddp__agent_ev_t *ev);
/* A shorthand: kind with id, n, value and a printf-style why. */
void cddp__agent_ev_say(int fd, cddp__agent_ev_kind_t kind, int id, int n, int64_t value, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Reads the events waiting on fd (non-blocking or known readable) into out[max]: how many, 0
 * when none. A kind outside the enum, or a short read, is dropped: the pipe is this process's
 * own, but a reader never trusts a length it did not check. */
int cddp__agent_ev_recv(int fd, cddp__agent_ev_t *out, int max);

#endif /* CDDP_JOB_EVENTS_H */

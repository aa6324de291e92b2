/* jobkeys.h - the job protocol's vocabulary: every key of a job in its store, and its values as
 * C types. No other file spells a job key or reads a job value's text (docs/elastic.md has the
 * table: key, value type, writer, readers). Keys are relative to the job's "<run_id>/" view. */
#ifndef CDDP_JOB_JOBKEYS_H
#define CDDP_JOB_JOBKEYS_H

#include <stddef.h>
#include <stdint.h>

/* ---- keys ---- */
typedef enum cddp__jobkey_kind {
  /* the rendezvous (job/rdzv.c, launcher/agent.c): round R gathers the members of
   * generation R - generation 0, and in restart-all each restart generation */
  CDDP__JK_RDZV_SETTINGS, /* rdzv/settings            cddp__job_settings_t: the first node's --nnodes */
  CDDP__JK_RDZV_MISMATCH, /* rdzv/mismatch            text: the line of a node that disagrees */
  CDDP__JK_RDZV_JOINED,   /* rdzv/<R>/joined          add(): join slots */
  CDDP__JK_RDZV_NODE,     /* rdzv/<R>/node/<S>        cddp__job_node_rec_t, or the mismatch word */
  CDDP__JK_RDZV_CLOSED,   /* rdzv/<R>/closed          cddp__job_closed_t: node count, or mismatch */
  CDDP__JK_RDZV_MEMBERS,  /* rdzv/<R>/members         the node records, one a line, or mismatch, or "error <line>" */
  CDDP__JK_RDZV_EVENT,    /* rdzv/<R>/event           cddp__job_event_t: the first value wins */
  CDDP__JK_RDZV_FAILURE,  /* rdzv/<R>/failure/<N>     cddp__job_failure_t of node rank N */
  CDDP__JK_RDZV_NDONE,    /* rdzv/<R>/ndone           add(): nodes whose workers all succeeded (replace mode: marks made) */
  CDDP__JK_RDZV_NEXIT,    /* rdzv/<R>/nexit           add(): agents counted out */
  CDDP__JK_RDZV_ALLEXIT,  /* rdzv/<R>/allexit         flag: every agent is out */
  CDDP__JK_RDZV_DONE,     /* rdzv/<R>/done/<A>        flag: member agent A's workers succeeded */
  /* the generations (job/elastic*.c, job/member.c, launcher/agent.c): restart-all makes
   * one per restart (every member new, gathered by round G); replace mode one per change */
  CDDP__JK_GEN,           /* elastic/gen              add(): the latest announced generation */
  CDDP__JK_GEN_ANNOUNCE,  /* elastic/gen/<G>          cddp__job_announce_t: what made generation G */
  CDDP__JK_GEN_CLAIM,     /* elastic/claim/<G>        text: "<agent> <announcement>", the one making G */
  CDDP__JK_GEN_MEMBERS,   /* elastic/members/<G>      cddp__members_t */
  CDDP__JK_GEN_COMM,      /* elastic/g<G>/            prefix: generation G's communicator */
  CDDP__JK_RESTARTS,      /* elastic/restarts         add(): worker replacements so far */
  CDDP__JK_AGENTS,        /* elastic/agents           add(): agent ids handed out */
  CDDP__JK_HEARTBEAT,     /* elastic/hb/<A>           add(): agent A's heartbeat counter */
  CDDP__JK_DEAD,          /* elastic/dead/<A>         text: agent A's will fired (the store sets it) */
  CDDP__JK_LEFT,          /* elastic/left/<A>         flag: agent A left properly */
  CDDP__JK_PENDING,       /* elastic/pending/<A>      cddp__member_t (nproc host): A waits to be taken in */
  CDDP__JK_SPARE,         /* elastic/spare/<A>        int: the agent that said A waits as a spare */
  CDDP__JK_WORLDS,        /* elastic/worlds           int list: world sizes the batch splits over */
  CDDP__JK_STOP,          /* elastic/stop             text: a worker stopped the job; why */
  CDDP__JK_COMPLETE,      /* elastic/complete         flag: training is over */
  CDDP__JK_STORE_VOTE,    /* elastic/vote/<E>/<A>     cddp__job_vote_t: agent A asks the next in line to
                             host the store at epoch E (job/store_move.c) */
  /* what `cddp status` reads (job/status.c; values: cddp__status_node_t, events) */
  CDDP__JK_STATUS_SLOTS,  /* status/slots             add(): node record slots handed out */
  CDDP__JK_STATUS_NODE,   /* status/node/<S>          a node's status record */
  CDDP__JK_STATUS_EVENTS, /* status/events            add(): events posted */
  CDDP__JK_STATUS_EVENT,  /* status/event/<I>         event I */
  CDDP__JK_STATUS_ONCE,   /* status/once/<T>          flag: the event tagged T was posted */
  /* the agents waiting in their first round, at the top of the store (no run id: they find
   * another --rdzv-id; job/rdzv_watch.c, values cddp__rdzv_waiter_t) */
  CDDP__JK_RDZV_WATCH,    /* rdzv-watch/latest        the waiter that refreshed it last */
  /* a torch job's workers meet in the job's store (job/worker_store.c) */
  CDDP__JK_TORCH_SERVED,  /* torch/served             flag: the store's host serves torch's protocol for this job */
  CDDP__JK_TORCH_ROUND,   /* torch/round              int: the round whose workers own the torch keys now */
  /* the workers (world/world.c) */
  CDDP__JK_WORLD_DONE,    /* world/g<G>/done/<r>      flag: rank r is done with the store */
  CDDP__JK_COUNT
} cddp__jobkey_kind_t;

/* A key's text; generous enough for every kind with any int64 arguments (and a run id). */
typedef struct cddp__jobkey {
  char s[240];
} cddp__jobkey_t;

/* The key of kind with its numbers (round, slot, node, agent, generation, rank: those the
 * kind names, in the order of its comment; the rest are ignored). */
cddp__jobkey_t cddp__job_key(cddp__jobkey_kind_t kind, int64_t a, int64_t b);
cddp__jobkey_t cddp__job_key3(cddp__jobkey_kind_t kind, int64_t a, int64_t b, int64_t c);
/* The key's text as the store holds it under the "<run_id>/" view (a connection's will is
 * registered on the raw connection, outside the view). */
cddp__jobkey_t cddp__job_key_in(const char *run_id, cddp__jobkey_kind_t kind, int64_t a);

/* ---- values ----
 * Every format returns the length written (NUL-terminated, truncated to fit) and every parse
 * takes (text, len) as the store gave it: 0, or -1 when the text is not one. */

/* flags: "1" */
#define CDDP__JOB_FLAG "1"
#define CDDP__JOB_FLAG_LEN 1
/* the will's value: what elastic/dead/<A> holds */
#define CDDP__JOB_WILL "connection closed"

/* ints: elastic/spare/<A> */
size_t cddp__job_int_format(int64_t v, char *buf, size_t size);
int cddp__job_int_parse(const void *text, size_t len, int64_t *out);

/* rdzv/settings: --nnodes of the first node and its host */
typedef struct cddp__job_settings {
  int min_nodes, max_nodes;
  char host[64];
} cddp__job_settings_t;
size_t cddp__job_settings_format(const cddp__job_settings_t *v, char *buf, size_t size);
int cddp__job_settings_parse(const void *text, size_t len, cddp__job_settings_t *out);

/* What each node publishes when it joins a round (rdzv/<R>/node/<S>). */
typedef struct cddp__job_node {
  char host[64];    /* gethostname() */
  char addr[64];    /* address the other nodes reach it at */
  int nproc;        /* workers it starts */
  int master_port;  /* a free port on it (workers' MASTER_PORT when it is node 0) */
  int id;           /* its agent id (elastic/agents), -1 when it has none */
} cddp__job_node_t;
typedef struct cddp__job_node_rec {
  cddp__job_node_t node;
  int min_nodes, max_nodes; /* its --nnodes (an old record without them: the reader's own) */
  int mismatch;             /* 1: a node that disagrees on --nnodes filled the slot */
} cddp__job_node_rec_t;
size_t cddp__job_node_format(const cddp__job_node_rec_t *v, char *buf, size_t size);
/* out->min_nodes / max_nodes are kept when the record does not carry them. */
int cddp__job_node_parse(const void *text, size_t len, cddp__job_node_rec_t *out);

/* rdzv/<R>/members, the round's node records one a line: a long list travels deflated, as
 * "#z <text length>\n" and a zlib stream (no host name starts with '#'), 5-7x smaller at 10,000
 * nodes. pack: *text (malloc'd) is replaced by the packed form when that is shorter; 0, or -1
 * out of memory (*text kept). unpack: 0 with *out NULL when v is not packed, or the text in
 * *out (malloc'd, NUL-terminated) of at most max bytes; -1 when v is packed but malformed. */
int cddp__job_list_pack(char **text, size_t *len);
int cddp__job_list_unpack(const void *v, size_t len, size_t max, char **out, size_t *out_len);

/* rdzv/<R>/closed and the mismatch word that may fill it or a node record */
typedef struct cddp__job_closed {
  int nnodes;   /* the round's node count */
  int mismatch; /* 1: a node found the nodes disagree on --nnodes */
} cddp__job_closed_t;
size_t cddp__job_closed_format(const cddp__job_closed_t *v, char *buf, size_t size);
int cddp__job_closed_parse(const void *text, size_t len, cddp__job_closed_t *out);

/* rdzv/<R>/event: how the round ends, for every node */
typedef enum cddp__job_event_kind {
  CDDP__EV_NONE,    /* not an event (parse fails with it) */
  CDDP__EV_DONE,    /* every node's workers succeeded */
  CDDP__EV_RESTART, /* restart-all: the next round */
  CDDP__EV_FAIL,    /* the job fails: code, line */
} cddp__job_event_kind_t;
typedef struct cddp__job_event {
  cddp__job_event_kind_t kind;
  int code;        /* FAIL: the exit code */
  char line[600];  /* FAIL: the one line to print */
} cddp__job_event_t;
size_t cddp__job_event_format(const cddp__job_event_t *v, char *buf, size_t size);
int cddp__job_event_parse(const void *text, size_t len, cddp__job_event_t *out);

/* rdzv/<R>/failure/<N>: that node's first failure; wall_ns 0 = "none of its own" */
typedef struct cddp__job_failure {
  uint64_t wall_ns;
  int code;
  char line[600];
} cddp__job_failure_t;
size_t cddp__job_failure_format(const cddp__job_failure_t *v, char *buf, size_t size);
int cddp__job_failure_parse(const void *text, size_t len, cddp__job_failure_t *out);

/* elastic/members/<G>: the member agents of generation G.
 * Text, one member agent per line in rank order: "<agent id> <nproc> <host>"; the agent's
 * global ranks are rank_base .. rank_base + nproc - 1 (rank_base = the nproc before it),
 * world = the sum. Or, when the job cannot go on: "stop <line>" (every process exits
 * non-zero with that line). Or, below MIN after a loss, a first line "wait <ms> <lost>" (lost:
 * "H (agent A, why)") before the survivors: the job waits up to ms for pending nodes;
 * its workers do not form this generation but wait for the next (a join or a stop). */
#define CDDP__MAX_MEMBERS 4096

typedef struct cddp__member {
  int id, nproc;
  char host[64];
} cddp__member_t;

typedef struct cddp__members {
  int n;
  int stop;           /* 1: the job stops; line says why */
  int wait_ms;        /* > 0: below MIN, waiting this long for nodes; line names the lost node */
  char line[400];
  cddp__member_t m[CDDP__MAX_MEMBERS];
} cddp__members_t;

/* 0, or -1 when the text is malformed (an empty list included). */
int cddp__members_parse(const char *text, size_t len, cddp__members_t *out);
/* The record's text into buf (NUL-terminated); its length, or 0 when it does not fit. */
size_t cddp__members_format(const cddp__members_t *m, char *buf, size_t size);

/* elastic/pending/<A>: "<nproc> <host>" (out->id is left alone) */
size_t cddp__job_pending_format(const cddp__member_t *v, char *buf, size_t size);
int cddp__job_pending_parse(const void *text, size_t len, cddp__member_t *out);

/* elastic/gen/<G>: what made generation G - its kind, which the protocol acts on, and the
 * words the agents and the trainer print. Text: "<kind> <what>". */
typedef enum cddp__gen_kind {
  CDDP__GEN_NONE,    /* not an announcement (parse fails with it) */
  CDDP__GEN_REPLACE, /* a worker replaced in place, the members unchanged: "rank R pid P" */
  CDDP__GEN_LOSS,    /* a node lost (a spare may take its place), or the wait for one ended */
  CDDP__GEN_JOIN,    /* nodes taken in, nobody lost: the ranks re-form at a step boundary;
                        what: "node H (agent A)[, node ...]" */
  CDDP__GEN_WAIT,    /* below MIN after a loss: the survivors wait for a node */
  CDDP__GEN_STOP,    /* the job stops (the member record says why) */
  CDDP__GEN_MOVED,   /* the store's new host wrote the generation back: "store moved to agent A" */
  CDDP__GEN_RESTART, /* restart-all: every worker restarts and every member is new, gathered
                        by the rendezvous round of the same number: "restart N" */
  CDDP__GEN_END,     /* restart-all: the job ended with the round before (its event says how):
                        no round opens, so a node waiting for one stops: "after round R" */
  CDDP__GEN_KINDS
} cddp__gen_kind_t;
typedef struct cddp__job_announce {
  cddp__gen_kind_t kind;
  char what[400];
} cddp__job_announce_t;
size_t cddp__job_announce_format(const cddp__job_announce_t *v, char *buf, size_t size);
int cddp__job_announce_parse(const void *text, size_t len, cddp__job_announce_t *out);
/* The announcement of a worker replaced in place, and of a generation written back by the
 * store's new host. */
cddp__job_announce_t cddp__job_announce_replace(int rank, int pid);
cddp__job_announce_t cddp__job_announce_moved(int agent_id);

/* elastic/claim/<G>: the claimer and what it announces (unique: what names a pid or a node) */
size_t cddp__job_claim_format(int agent_id, const cddp__job_announce_t *what, char *buf, size_t size);

/* elastic/vote/<E>/<A>: "gen <G> restarts <N>\n" and the member record of G, the latest
 * generation agent A saw before the store's host was lost, and the most worker replacements
 * (elastic/restarts) it saw counted, so that the budget survives the move */
typedef struct cddp__job_vote {
  int64_t gen;
  int64_t restarts;
  cddp__members_t members;
} cddp__job_vote_t;
size_t cddp__job_vote_format(const cddp__job_vote_t *v, char *buf, size_t size);
int cddp__job_vote_parse(const void *text, size_t len, cddp__job_vote_t *out);

/* elastic/worlds: the world sizes the global batch splits over, "1 2 3 6 ..." */
size_t cddp__job_worlds_format(const int *sizes, int n, char *buf, size_t size);
/* 1 when world w is listed (or the list is NULL or empty: any). */
int cddp__job_worlds_allow(const char *text, int w);

#endif /* CDDP_JOB_JOBKEYS_H */

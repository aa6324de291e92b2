/* agent.c - `cddp run`: hosts or joins the store, runs rendezvous rounds, workers, restarts. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cddp/store.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/io.h"
#include "launcher/agent.h"
#include "job/elastic.h"
#include "launcher/elastic_timer.h"
#include "launcher/errfile.h"
#include "job/member.h"
#include "common/knobs.h"
#include "common/sock.h"
#include "launcher/options.h"
#include "job/rdzv.h"
#include "job/rdzv_watch.h"
#include "job/store_reach.h"
#include "launcher/program.h"
#include "launcher/sigguard.h"
#include "launcher/slurm_token.h"
#include "launcher/status_pub.h"
#include "launcher/task_exec.h"
#include "job/worker_store.h"
#include "launcher/warm.h"
#include "launcher/torch_fr_vars.h"
#include "launcher/workers.h"

extern char **environ;

/* Beyond the grace period, how long a node that learns of a failure waits for every node's record
 * (its first failure, or none): a node posts once its workers are gone, so within the grace. */
#define FAILURE_WAIT_EXTRA_MS 2000

/* Variables the agent sets for its workers (any inherited value is replaced). */
static const char *contract_vars[] = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
    "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CDDP_RUN_ID", "CDDP_ROUND", "CDDP_RESTART_COUNT",
    "CDDP_MAX_RESTARTS", "CDDP_STORE", "CDDP_TOKEN", "CDDP_RESTART_MODE", "CDDP_GEN", "CDDP_REPLACEMENT", "CDDP_AGENT_ID",
    "ROLE_NAME", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_SIGNALS_TO_HANDLE", "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_TIMER_FILE", "CDDP_FLIGHT_FILE", "CDDP_CONSOLE_LIVE"};

/* Set for the workers only when the agent's environment lacks them (torchrun's defaults). */
static const struct { const char *name, *value; } default_vars[] = {
    {"NCCL_ASYNC_ERROR_HANDLING", "1"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}, {"OMP_NUM_THREADS", "1"}};

typedef struct agent {
  cddp_run_opts_t *o;
  char **prog;
  char token[256];
  char token_file[4096]; /* a Slurm job's token file (launcher/slurm_token.h): its host removes it */
  int store_loopback; /* the store this agent hosts listens on the loopback only */
  char host[64];
  cddp__job_store_t js;   /* where the job's store is (its endpoint, a Slurm step's nodes) */
  cddp_store_server_t *server;
  cddp_store_t *store, *watch_store; /* "<run_id>/" views; the watcher has its own connection */
  cddp_store_t *watch_raw; /* watch_store's connection, unprefixed: lent to the first join's rdzv watch */
  cddp_store_t *store_raw; /* store's, unprefixed: lent to the store move (same thread, short calls) */
  int sig_fd;
  int ev_pipe[2];
  pthread_t watcher;
  int watcher_running, watch_round;
  cddp__rdzv_t rz;
  int id;                 /* this agent's id in the job (elastic/agents) */
  int elastic;            /* replace mode: members, heartbeats, membership changes */
  int omp_default;        /* OMP_NUM_THREADS=1 for the workers (unset here, several workers) */
  char err_dir[256];      /* this agent's folder of the workers' torch error files */
  int failure_posted;     /* round + 1 when this node posted its first failure of that round */
  int live_console;       /* our stderr is a terminal and no --log-dir: workers' progress lines live */
  char flight_dir[4200];  /* where a hang's flight records and stack go (--log-dir/flight, else $TMPDIR) */
  int flight_named;       /* a line named flight_dir: its records stay (workers.h) */
  cddp__membership_t ms;  /* replace mode: the job's members as this agent knows them */
  const char *not_retried; /* why the last failure is not retried (launcher/blame.h), or NULL */
  cddp__failure_t last;   /* restart-all: the failure that ended the previous round (rank -1: none) */
  cddp__warm_t *warm;     /* warm spares for the workers' restarts (launcher/warm.h), or NULL */
  int torch_store;        /* the workers meet in the job's store, which speaks torch's protocol too (job/worker_store.h) */
  int torch_major;        /* the script's torch (1, 2), -1 when it is not a Python script importing torch */
  int torch_minor;        /* and its minor version (capped at 19: program.h) */
  char *fr_env[CDDP__TORCH_FR_VARS_MAX]; /* torch's flight-recorder variables the workers get (torch_fr_vars.h) */
  int n_fr_env;
  cddp__etimer_t *timer;  /* TORCHELASTIC_ENABLE_FILE_TIMER=1: the workers' elastic timers, served */
  char timer_dir[4200], timer_path[4300];
  cddp__status_pub_t status; /* its node record and events for `cddp status` */
  int endpoint_written;   /* its --log-dir holds the endpoint record */
  int move_pipe[2];       /* restart-all: the store move's events (job/events.h); -1 in replace mode */
  int64_t moved_epoch;    /* restart-all: the latest store epoch this agent's rounds are past */
  int store_moved;        /* restart-all: 1 the store moved under this round, -1 nobody took it over */
} agent_t;

/* Warm spares, when a restart can come (restarts allowed, or an elastic node count) and the
 * program is a Python script they help. */
static void start_warm(agent_t *a) {
  const cddp_run_opts_t *o = a->o;
  char why[320] = "";
  if (!o->warm) snprintf(why, sizeof why, "--warm-workers off");
  else if (o->max_restarts == 0 && o->min_nodes == o->max_nodes) snprintf(why, sizeof why, "no restarts (--max-restarts 0)");
  else a->warm = cddp__warm_new(a->prog, o->warm_preload_set ? o->warm_preload : NULL, o->warm_delay_ms, why, sizeof why);
  if (a->warm) CDDP_INFO(CDDP_SUB_RUN, "warm restarts: a spare per worker, %.1f s after each start", o->warm_delay_ms / 1e3);
  else CDDP_INFO(CDDP_SUB_RUN, "no warm spares: %s", why);
}

/* Whether the workers meet in the job's store, as torchrun's agent store has them do: a torch 1.x
 * or 2.x script (the protocols store/torch_proto.c speaks). The store's host says whether it
 * serves them (job/worker_store.h); when it does not, rank 0 hosts their TCPStore after all. */
static void choose_torch_store(agent_t *a) {
  char why[320] = "";
  int at = cddp__program_python_args(a->prog, why, sizeof why);
  int module = at >= 0 && !strcmp(a->prog[at], "-m");
  int imports = at >= 0 && !module && cddp__program_imports_torch(a->prog[at]);
  int major = a->torch_major = imports ? cddp__program_torch_major(a->prog[0], &a->torch_minor) : -1;
  if (!a->o->agent_store) snprintf(why, sizeof why, "--agent-store off");
  else if (at < 0) {} /* why: what cddp__program_python_args said */
  else if (module) snprintf(why, sizeof why, "-m (its imports are not looked at)");
  else if (!imports) snprintf(why, sizeof why, "the script does not import torch");
  else if (cddp__program_mentions(a->prog[at], "TCPStore")) /* its own, maybe on MASTER_PORT */
    snprintf(why, sizeof why, "the script makes a TCPStore of its own");
  else if (major != 1 && major != 2)
    snprintf(why, sizeof why, "%s has torch %d.x, whose TCPStore protocol is not served", a->prog[0], major);
  else a->torch_store = 1;
  if (a->torch_store) CDDP_INFO(CDDP_SUB_RUN, "the workers meet in the job's store, which speaks torch %d.x's TCPStore protocol too", major);
  else CDDP_INFO(CDDP_SUB_RUN, "the workers' rank 0 hosts their TCPStore: %s", why);
}

/* ---- the watcher: one thread per round waits for rdzv/R/event, reports on a pipe ---- */

static void *watch_main(void *arg) {
  agent_t *a = arg;
  int round = a->watch_round;
  char msg[512];
  cddp__jobkey_t key = cddp__job_key(CDDP__JK_RDZV_EVENT, round, 0);
  const char *k = key.s;
  for (;;) {
    cddp_result_t r = cddp_store_wait(a->watch_store, &k, 1, 60000);
    if (r == CDDP_TIMEOUT) continue;
    void *v = NULL;
    size_t len = 0;
    if (r == CDDP_OK) r = cddp_store_get(a->watch_store, k, &v, &len, 0);
    int n = r == CDDP_OK ? snprintf(msg, sizeof msg, "%d %.*s", round, (int)CDDP_MIN(len, 480), (char *)v)
                         : snprintf(msg, sizeof msg, "%d lost %s", round, cddp_last_error());
    free(v);
    ssize_t w = write(a->ev_pipe[1], msg, (size_t)CDDP_MIN(n, (int)sizeof msg - 1));
    (void)w;
    return NULL;
  }
}

static void watch_start(agent_t *a, int round) {
  if (a->watcher_running) pthread_join(a->watcher, NULL); /* its round's event is set: it returned */
  a->watch_round = round;
  a->watcher_running = pthread_create(&a->watcher, NULL, watch_main, a) == 0;
}

/* Event messages are "<round> <value>"; drop those of older rounds. */
static int event_accept(const char *msg, void *ctx) {
  agent_t *a = ctx;
  return atoi(msg) == a->rz.round;
}

static const char *event_value(const char *msg) {
  const char *sp = strchr(msg, ' ');
  return sp ? sp + 1 : "";
}

/* restart-all: reads the store move's events. 1 when this round is over: the store moved
 * (store_moved = 1; its generation is gone with the old store, so the workers restart on the
 * new one, as torchrun restarts them after any failure) or nobody took it over (-1). */
static int store_move_events(agent_t *a) {
  cddp__agent_ev_t ev[8];
  int over = 0;
  for (int n; (n = cddp__agent_ev_recv(a->move_pipe[0], ev, 8)) > 0;)
    for (int i = 0; i < n; i++) {
      if (ev[i].kind == CDDP__AEV_STORE_MOVED && ev[i].value > a->moved_epoch) {
        a->moved_epoch = ev[i].value;
        if (!a->store_moved) a->store_moved = 1;
        over = 1;
      } else if (ev[i].kind == CDDP__AEV_STORE_STOP || ev[i].kind == CDDP__AEV_STORE_CUT) {
        a->store_moved = -1;
        over = 1;
      }
    }
  return over;
}

/* Blocks until the watcher reports this round's event or a signal arrives: 0, or the signal;
 * -1 the watcher is gone; -2 the membership ends this node, -3 it was taken in; -4 (restart-all)
 * the store moved under the round, or nobody took it over (a->store_moved). */
static int wait_event_loop(agent_t *a, char *msg, size_t size) {
  for (;;) {
    int ev_fd = a->elastic ? a->ms.pipe[0] : a->move_pipe[0]; /* -1 (replace mode, inelastic): none */
    struct pollfd p[3] = {{.fd = a->ev_pipe[0], .events = POLLIN}, {.fd = a->sig_fd, .events = POLLIN},
                          {.fd = ev_fd, .events = POLLIN}};
    if (poll(p, 3, -1) < 0 && errno != EINTR) return -1;
    if ((p[2].revents & POLLIN) && !a->elastic && store_move_events(a)) return -4;
    if ((p[2].revents & POLLIN) && a->elastic) {
      cddp__membership_events(&a->ms);
      if (a->ms.ending) return -2;
      if (a->ms.joined) return -3;
    }
    int sig = p[1].revents & POLLIN ? cddp__sigguard_read(a->sig_fd) : 0;
    if (sig) return sig;
    if (p[0].revents & POLLIN) {
      ssize_t n = read(a->ev_pipe[0], msg, size - 1);
      if (n <= 0) return -1;
      msg[n] = '\0';
      if (event_accept(msg, a)) return 0;
    }
  }
}

/* The agent's own poll loops take its signals; everywhere else the guard does (launcher/sigguard.h). */
static int wait_event(agent_t *a, char *msg, size_t size) {
  cddp__sigguard_hold();
  int r = wait_event_loop(a, msg, size);
  cddp__sigguard_release();
  return r;
}

static void watch(agent_t *a, cddp__workers_t *ws) {
  cddp__sigguard_hold();
  cddp__workers_watch(ws, a->sig_fd, a->ev_pipe[0], event_accept, a);
  cddp__sigguard_release();
}

/* The round's workers are done with: the guard forgets them before they are freed. */
static void workers_done(cddp__workers_t *ws) {
  cddp__sigguard_workers(NULL);
  cddp__workers_release(ws);
}

/* ---- the store ---- */

/* The job's "<run_id>/" view on a fresh connection; the line says why not. */
static int connect_store(agent_t *a, cddp_store_t **out) {
  if (cddp__job_store_connect(&a->js, out) == CDDP_OK) return 0;
  fprintf(stderr, "cddp run: %s\n", cddp_last_error());
  return -1;
}

/* Hosts the store when this node should, then connects (twice: agent + watcher). */
/* The address the hosted store listens on: the endpoint's own, which is where the others reach it
 * (a loopback endpoint keeps it off every other interface); every interface when the endpoint
 * names no single address of this host, said at INFO with the reason (sock.h). */
static const char *store_bind_host(const cddp_run_opts_t *o, const char *endpoint_host, char *buf, size_t size) {
  if (o->standalone) return "127.0.0.1";
  char why[400];
  if (cddp__sock_listen_addr_for(endpoint_host, buf, size, why, sizeof why)) return buf;
  if (why[0]) CDDP_INFO(CDDP_SUB_RUN, "the store listens on every interface: %s", why);
  return NULL;
}

static int setup_store(agent_t *a) {
  cddp_run_opts_t *o = a->o;
  a->js.run_id = o->run_id, a->js.token = a->token, a->js.timeout_ms = o->rdzv_timeout_ms;
  int host_it;
  if (o->standalone) {
    snprintf(a->js.host, sizeof a->js.host, "127.0.0.1");
    a->js.port = 0;
    host_it = 1;
  } else if (o->backend == CDDP_RDZV_STATIC) {
    snprintf(a->js.host, sizeof a->js.host, "%s", o->master_addr);
    a->js.port = o->master_port;
    host_it = o->node_rank == 0;
    /* a Slurm step's store follows the first live node of the step: any node may reach it
     * through the others, and the first node hosts it only when no other node serves it (a
     * restarted first node joins the job that went on without it) */
    if (o->store_nodes[0] && cddp__store_move_wanted(o->max_nodes, o->standalone) &&
        cddp__job_store_candidates(&a->js, o->store_nodes) != CDDP_OK) {
      fprintf(stderr, "cddp run: %s\n", cddp_last_error());
      return -1;
    }
    cddp_store_t *there;
    if (host_it && a->js.ncand > 1 && cddp__job_store_reach(&a->js, 0, 1, &there) == CDDP_OK) {
      fprintf(stderr, "cddp run: node %s is the step's first node, but the job's store lives on at %s:%d: it joins "
              "there\n", a->host, a->js.host, a->js.port);
      cddp_store_close(there);
      host_it = 0;
    }
    cddp__clear_error();
  } else {
    snprintf(a->js.host, sizeof a->js.host, "%s", o->rdzv_host);
    a->js.port = o->rdzv_port;
    /* --rdzv-conf is_host=true/false overrides the address test (torchrun's) */
    host_it = o->is_host >= 0 ? o->is_host : cddp__sock_host_is_local(o->rdzv_host);
  }
  if (host_it) {
    /* c10d: another agent of this host may serve it already; then we are its client. Two
     * agents starting together can each make the other's listen fail (a probe bind lands
     * between the other's bind and listen): a failure is tried again for a short while. */
    int shared = o->backend == CDDP_RDZV_C10D && !o->standalone;
    char bind_buf[64];
    const char *bind = store_bind_host(o, a->js.host, bind_buf, sizeof bind_buf);
    a->store_loopback = bind && cddp__sock_host_is_loopback(bind);
    for (int tries = 0;; tries++) {
      if (shared && cddp__sock_port_in_use(a->js.port)) {
        CDDP_INFO(CDDP_SUB_RUN, "port %d is in use: joining the store there as a client", a->js.port);
        a->server = NULL;
        break;
      }
      cddp_result_t sr = a->torch_store ? cddp__job_torch_store_start(&a->server, bind, a->js.port, a->token, o->run_id)
                                        : cddp_store_server_start(&a->server, bind, a->js.port, a->token);
      if (sr == CDDP_OK) {
        a->js.port = cddp_store_server_port(a->server);
        break;
      }
      a->server = NULL;
      if (!shared || tries >= 20) {
        fprintf(stderr, "cddp run: cannot host the store on port %d: %s\n", a->js.port, cddp_last_error());
        return -1;
      }
      usleep(20000 + 10000 * (getpid() % 5)); /* apart, so the next tries do not meet again */
    }
  }
  if (a->server && cddp__store_move_wanted(o->max_nodes, o->standalone) &&
      cddp__store_move_list_host(a->js.host, a->js.port, a->token) != CDDP_OK) {
    fprintf(stderr, "cddp run: the store's failover: %s\n", cddp_last_error());
    return -1;
  }
  if (cddp__job_store_connect_base(&a->js, &a->store, &a->store_raw) != CDDP_OK ||
      cddp__job_store_connect_base(&a->js, &a->watch_store, &a->watch_raw) != CDDP_OK) {
    fprintf(stderr, "cddp run: %s\n", cddp_last_error());
    return -1;
  }
  if (a->server && a->torch_store && cddp__job_torch_store_mark(a->store) != CDDP_OK) {
    fprintf(stderr, "cddp run: %s\n", cddp_last_error());
    return -1;
  }
  return 0;
}

/* Once the first round closed (the store's host joined it, so it has said whether it serves
 * torch): the workers meet in the job's store only when it does. -1: the store did not answer. */
static int confirm_torch_store(agent_t *a) {
  int served = cddp__job_torch_store_served(a->store);
  if (served < 0) {
    fprintf(stderr, "cddp run: %s\n", cddp_last_error());
    return -1;
  }
  if (!served) {
    a->torch_store = 0;
    CDDP_INFO(CDDP_SUB_RUN, "the job's store at %s:%d does not serve torch's protocol for this job (another program "
              "hosts it): the workers' rank 0 hosts their TCPStore", a->js.host, a->js.port);
  }
  return 0;
}

/* ---- workers' environment ---- */

/* gen / replacement: the job's generation and whether the worker replaces a dead one. */
static char **worker_env(agent_t *a, int local_rank, int64_t gen, int replacement) {
  const cddp__rdzv_t *rz = &a->rz;
  const cddp_run_opts_t *o = a->o;
  size_t n = 0;
  while (environ[n]) n++;
  char **env = calloc(n + CDDP_ARRAY_LEN(contract_vars) + CDDP_ARRAY_LEN(default_vars) + CDDP__TORCH_FR_VARS_MAX + 1, sizeof *env);
  if (!env) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    int ours = 0;
    for (size_t c = 0; c < CDDP_ARRAY_LEN(contract_vars) && !ours; c++) {
      size_t l = strlen(contract_vars[c]);
      ours = !strncmp(environ[i], contract_vars[c], l) && environ[i][l] == '=';
    }
    if (!ours) env[k++] = strdup(environ[i]);
  }
  char shost[256];
  int sport;
  cddp__job_store_now(&a->js, shost, sizeof shost, &sport);
  /* the workers' own rendezvous: the job's store, on the port the user gave, when it serves
   * torch; else rank 0's TCPStore on a port that was free on node 0 when this round formed,
   * never the store's (static: the store is on --master-port) */
  const char *maddr = a->torch_store ? shost : o->backend == CDDP_RDZV_STATIC ? o->master_addr : rz->nodes[0].addr;
  int mport = a->torch_store ? sport : rz->nodes[0].master_port;
  int v6 = strchr(shost, ':') != NULL;
  char store[300];
  snprintf(store, sizeof store, "%s%s%s:%d", v6 ? "[" : "", shost, v6 ? "]" : "", sport);
  int nproc = rz->nodes[rz->node_rank].nproc, rank_base = rz->rank_base, world = rz->world_size;
  if (a->elastic && cddp__members_find(&a->ms.cur, a->id, &rank_base, &world) < 0)
    rank_base = rz->rank_base, world = rz->world_size;
  int64_t restarts = 0;
  if (o->replace && cddp_store_add(a->store, cddp__job_key(CDDP__JK_RESTARTS, 0, 0).s, 0, &restarts) == CDDP_OK)
    cddp__store_move_restarts(a->ms.mv, restarts);
#define PUT(name, ...)                                         \
  do {                                                         \
    if (asprintf(&env[k], name "=" __VA_ARGS__) >= 0) k++;     \
  } while (0)
  PUT("RANK", "%d", rank_base + local_rank);
  PUT("LOCAL_RANK", "%d", local_rank);
  PUT("WORLD_SIZE", "%d", world);
  PUT("LOCAL_WORLD_SIZE", "%d", nproc);
  PUT("GROUP_RANK", "%d", rz->node_rank);
  PUT("GROUP_WORLD_SIZE", "%d", rz->nnodes);
  PUT("ROLE_RANK", "%d", rank_base + local_rank);
  PUT("ROLE_WORLD_SIZE", "%d", world);
  PUT("MASTER_ADDR", "%s", maddr);
  PUT("MASTER_PORT", "%d", mport);
  PUT("CDDP_RUN_ID", "%s", o->run_id);
  PUT("CDDP_ROUND", "%d", rz->round);
  PUT("CDDP_RESTART_COUNT", "%lld", (long long)(o->replace ? restarts : rz->restart_count));
  PUT("CDDP_MAX_RESTARTS", "%d", o->max_restarts);
  PUT("CDDP_STORE", "%s", store);
  if (a->token[0]) PUT("CDDP_TOKEN", "%s", a->token);
  PUT("CDDP_RESTART_MODE", "%s", o->replace ? "replace" : "all");
  PUT("CDDP_GEN", "%lld", (long long)gen);
  PUT("CDDP_REPLACEMENT", "%d", replacement);
  if (a->elastic) PUT("CDDP_AGENT_ID", "%d", a->id);
  PUT("TORCHELASTIC_RUN_ID", "%s", o->run_id);
  PUT("TORCHELASTIC_RESTART_COUNT", "%d", rz->restart_count);
  PUT("TORCHELASTIC_MAX_RESTARTS", "%d", o->max_restarts);
  PUT("TORCHELASTIC_USE_AGENT_STORE", "%s", a->torch_store ? "True" : "False");
  PUT("TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP");
  /* torchrun 2.x's: the pipe the agent serves, or the user's own path, forwarded as torchrun does */
  if (a->timer_path[0]) PUT("TORCHELASTIC_TIMER_FILE", "%s", a->timer_path);
  /* the console is a terminal, through us: a progress line may be rewritten in place */
  if (a->live_console && (o->console[local_rank] & 2)) PUT("CDDP_CONSOLE_LIVE", "1");
  PUT("ROLE_NAME", "%s", o->role);
  if (a->err_dir[0]) { /* emptied by each start (workers.c), so an old file is never taken for new */
    char path[320];
    cddp__errfile_path(a->err_dir, rank_base + local_rank, path, sizeof path);
    PUT("TORCHELASTIC_ERROR_FILE", "%s", path);
    /* the page the worker's collectives and steps are recorded in, for the watchdog and `cddp status` */
    cddp__flight_file_path(a->err_dir, rank_base + local_rank, path, sizeof path);
    PUT("CDDP_FLIGHT_FILE", "%s", path);
  }
  for (size_t i = 0; i < CDDP_ARRAY_LEN(default_vars); i++)
    if (!getenv(default_vars[i].name) && (strcmp(default_vars[i].name, "OMP_NUM_THREADS") || a->omp_default))
      PUT("%s", "%s", default_vars[i].name, default_vars[i].value);
  for (int i = 0; i < a->n_fr_env; i++)
    if ((env[k] = strdup(a->fr_env[i]))) k++;
#undef PUT
  env[k] = NULL;
  return env;
}

static void free_env(char **env) {
  for (char **e = env; e && *e; e++) free(*e);
  free(env);
}

/* "exited with code 1: ValueError: boom": how worker w ended, with the message of the exception
 * it recorded in its torch error file, else of the last traceback on its stderr. Returns the exit
 * code the agent uses (code, or 128+signal). */
static int describe_failure(const agent_t *a, const cddp__worker_t *w, int status, char *buf, size_t size) {
  char path[320], cause[200] = "";
  int code = cddp__describe_status(status, buf, size);
  if (w->hang[0]) { /* the watchdog killed it: say why */
    snprintf(buf + strlen(buf), size - strlen(buf), " by the watchdog: %s", w->hang);
    return code;
  }
  if (a->err_dir[0]) cddp__errfile_path(a->err_dir, w->rank, path, sizeof path);
  if ((a->err_dir[0] && cddp__errfile_read(path, cause, sizeof cause, NULL)) || w->exception[0])
    snprintf(buf + strlen(buf), size - strlen(buf), ": %.199s", cause[0] ? cause : w->exception);
  return code;
}

/* ---- one round: spawn, watch; returns what happened ---- */

/* --restart-mode replace: worker ws->fail_index died; start its replacement in the job's next
 * generation (the others keep running and re-form by themselves). -1: restarts used up. */
static int replace_failed(agent_t *a, cddp__workers_t *ws) {
  char desc[768];
  describe_failure(a, &ws->w[ws->fail_index], ws->fail_status, desc, sizeof desc);
  cddp__job_announce_t what = cddp__job_announce_replace(ws->fail_rank, (int)ws->fail_pid);
  if (a->elastic) { /* a worker of a dropped node or of a stopping job is not replaced */
    cddp__membership_refresh(&a->ms);
    if (!a->ms.ending) {
      void *v = NULL;
      size_t len = 0;
      if (cddp_store_get(a->store, cddp__job_key(CDDP__JK_STOP, 0, 0).s, &v, &len, 0) == CDDP_OK) {
        a->ms.ending = 2;
        snprintf(a->ms.line, sizeof a->ms.line, "%.*s", (int)len, (char *)v);
      }
      free(v);
    }
    if (a->ms.ending) return 1;
  }
  const cddp__worker_t *w = &ws->w[ws->fail_index];
  if ((a->not_retried = cddp__failure_deterministic(w->replaced ? &w->prev : NULL, &ws->failure, w->start_ns)))
    return -1; /* it would fail the same way again: the budget stays for failures a restart cures */
  int64_t restarts = 0, gen = 0; /* membership changes are free; failures count */
  if (cddp_store_add(a->store, cddp__job_key(CDDP__JK_RESTARTS, 0, 0).s, 1, &restarts) != CDDP_OK)
    return -1;
  cddp__store_move_restarts(a->ms.mv, restarts);
  if (restarts > a->o->max_restarts) return -1;
  if (cddp__gen_change(a->store, &what, a->id, NULL, NULL, &gen) != CDDP_OK) {
    fprintf(stderr, "cddp run: cannot announce a new generation in the store: %s\n", cddp_last_error());
    return -1;
  }
  if (a->elastic) cddp__membership_refresh(&a->ms);
  char **env = worker_env(a, ws->fail_index, gen, 1);
  cddp_result_t r = env ? cddp__workers_respawn(ws, ws->fail_index, a->prog, env)
                        : cddp__fail(CDDP_SYSTEM, "out of memory");
  free_env(env);
  if (r != CDDP_OK) {
    fprintf(stderr, "cddp run: cannot start the replacement of rank %d: %s\n", ws->fail_rank, cddp_last_error());
    return -1;
  }
  fprintf(stderr, "cddp run: rank %d (host %s, pid %d) %s; replaced in place by pid %d, generation %lld (restart %lld of "
          "%d); the other workers stay\n", ws->fail_rank, a->host, (int)ws->fail_pid, desc,
          (int)ws->w[ws->fail_index].pid, (long long)gen, (long long)restarts, a->o->max_restarts);
  cddp__status_pub_lost(&a->status, ws, "rank %d (host %s, pid %d) %.150s; replaced by pid %d, generation %lld",
                        ws->fail_rank, a->host, (int)ws->fail_pid, desc, (int)ws->w[ws->fail_index].pid, (long long)gen);
  return 0;
}

static int all_exited(const cddp__workers_t *ws) {
  for (int i = 0; i < ws->n; i++)
    if (!ws->w[i].exited) return 0;
  return 1;
}

/* The job goes on without this node, or stops: no replacements; the workers get grace_ms to
 * exit by themselves (they learn it from the generation record), then TERM, then KILL. A store
 * host whose lease is gone kills them at once: the others may take over once the lease has run
 * out, and no step of the old world may come after that (docs/store.md, "The lease"). */
static void begin_ending(agent_t *a, cddp__workers_t *ws) {
  if (a->ms.fence == 1) cddp__workers_kill(ws), a->ms.fence = 2; /* once: reaped pids are reused */
  if (!ws->stop_at) ws->stop_at = cddp__deadline_ms(a->o->grace_ms);
}

static int run_round(agent_t *a, cddp__workers_t *ws, int first) {
  int n = a->rz.nodes[a->rz.node_rank].nproc;
  /* this round's torch workers find no key of the last round's (every node sets the same round) */
  if (a->torch_store && cddp__job_torch_store_round(a->store, a->rz.round) != CDDP_OK) {
    fprintf(stderr, "cddp run: %s\n", cddp_last_error());
    return -1;
  }
  int64_t gen = a->rz.round; /* restart-all: the round gathered this generation */
  if (a->o->replace && cddp__gen_latest(a->store, &gen) != CDDP_OK) {
    fprintf(stderr, "cddp run: %s\n", cddp_last_error());
    return -1;
  }
  /* a node taken into a running job: its workers are newcomers of the generation that took it
   * in; they get the state from the others over the network */
  int newcomer = a->elastic && a->ms.joined, rank_base = a->rz.rank_base;
  if (newcomer) gen = a->ms.gen, a->ms.joined = 0;
  if (a->elastic) cddp__members_find(&a->ms.cur, a->id, &rank_base, NULL);
  if (rank_base < 0) rank_base = a->rz.rank_base;
  char ***envs = calloc((size_t)n, sizeof *envs);
  int ok = envs != NULL;
  for (int i = 0; ok && i < n; i++) ok = (envs[i] = worker_env(a, i, gen, newcomer)) != NULL;
  memset(ws, 0, sizeof *ws);
  ws->console = a->o->console;
  ws->live = a->live_console;
  ws->grace_ms = a->o->grace_ms;
  ws->keep_going = a->o->replace;
  ws->cpu_bind = a->o->cpu_bind;
  ws->host = a->host;
  ws->err_dir = a->err_dir[0] ? a->err_dir : NULL;
  ws->hang_ms = a->o->hang_ms;
  ws->flight_dir = a->flight_dir;
  ws->flight_named = &a->flight_named;
  ws->warm = a->warm;
  ws->timer = a->timer;
  ws->wake_fd = a->elastic ? a->ms.pipe[0] : a->move_pipe[0];
  a->store_moved = 0;
  cddp__status_node_t *sn = &a->status.node;
  sn->round = a->rz.round, sn->node_rank = a->rz.node_rank, sn->nproc = n, sn->rank_base = rank_base;
  sn->world = a->rz.world_size, sn->restarts = a->rz.restart_count;
  if (a->elastic) /* the members' order, which a loss changes */
    sn->world = cddp__members_world(&a->ms.cur), sn->node_rank = cddp__members_find(&a->ms.cur, a->id, NULL, NULL);
  ws->tick = cddp__status_pub_tick;
  ws->tick_arg = &a->status;
  ws->remote_wanted = &a->status.remote_wanted;
  ws->remote_since = &a->status.remote_since;
  if (ok && cddp__workers_start(ws, n, rank_base, a->prog, (char **const *)envs, a->o->log_dir, first) != CDDP_OK) {
    fprintf(stderr, "cddp run: %s\n", cddp_last_error());
    ok = 0;
  }
  for (int i = 0; envs && i < n; i++) free_env(envs[i]);
  free(envs);
  if (!ok) return -1;
  cddp__sigguard_workers(ws);
  if (a->o->log_dir[0] && !a->endpoint_written) { /* `cddp status LOG_DIR` finds the job here */
    cddp__endpoint_t e = {.port = a->js.port};
    snprintf(e.host, sizeof e.host, "%s", a->js.host);
    snprintf(e.run_id, sizeof e.run_id, "%s", a->o->run_id);
    snprintf(e.token, sizeof e.token, "%s", a->token);
    a->endpoint_written = cddp__endpoint_write(a->o->log_dir, &e) == CDDP_OK;
    if (!a->endpoint_written) CDDP_WARN("no job record for cddp status: %s", cddp_last_error());
  }
  CDDP_INFO(CDDP_SUB_RUN, "round %d: started ranks %d-%d of %d (restart %d)", a->rz.round, a->rz.rank_base,
            a->rz.rank_base + n - 1, a->rz.world_size, a->rz.restart_count);
  watch(a, ws);
  for (;;) {
    if (ws->outcome == CDDP__OUT_WAKE && !a->elastic) {
      if (store_move_events(a)) ws->stop_now = 1; /* the round is over: every worker restarts */
      ws->outcome = CDDP__OUT_SUCCESS;
    } else if (ws->outcome == CDDP__OUT_WAKE) {
      cddp__membership_events(&a->ms);
      ws->outcome = CDDP__OUT_SUCCESS;
    } else if (ws->outcome == CDDP__OUT_FAILED && ws->keep_going) {
      int rf = a->elastic && a->ms.ending ? 1 : replace_failed(a, ws);
      if (rf < 0) { /* restarts used up: stop the others, then fail */
        ws->keep_going = 0;
        ws->stop_now = 1;
      }
      if (rf > 0) ws->outcome = CDDP__OUT_SUCCESS;
    } else {
      break;
    }
    if (a->elastic && a->ms.ending) {
      begin_ending(a, ws);
      if (all_exited(ws)) break;
    }
    watch(a, ws);
  }
  /* the watcher's "lost" raced the store move's verdict here, which was sent first (store_move.c,
   * say_stop): the verdict decides, so that a node cut off comes back instead of stopping */
  if (a->elastic && !a->ms.ending && ws->outcome == CDDP__OUT_EVENT && !strncmp(event_value(ws->event), "lost", 4))
    cddp__membership_events(&a->ms);
  return 0;
}

/* Leaves: counts this agent out of the round (the store's host waits for everyone). */
static int finish(agent_t *a, int code) {
  cddp__status_pub_state(&a->status, code == 0 ? "done" : "failed");
  cddp__status_pub_end(&a->status);
  if (a->endpoint_written && a->store) { /* `cddp status LOG_DIR` shows them once the store is gone */
    cddp_store_set_timeout(a->store, CDDP__EVENTS_SAVE_MS);
    if (cddp__events_save(a->o->log_dir, a->store) != CDDP_OK)
      CDDP_INFO(CDDP_SUB_RUN, "the job's events are not kept in %s: %s", a->o->log_dir, cddp_last_error());
  }
  cddp__warm_free(a->warm); /* first: nothing waits on them */
  a->warm = NULL;
  if (a->elastic) {
    cddp__monitor_stop(a->ms.mon, 1);
    a->ms.mon = NULL;
  }
  if (a->rz.nodes && a->elastic && (a->ms.ending == 1 || a->ms.pending)) { /* dropped / never taken in */
    cddp__rdzv_release(&a->rz);
  } else if (a->rz.nodes) {
    if (a->elastic) a->rz.nnodes = a->ms.cur.n; /* count out the nodes still in the job */
    int hosting = a->server != NULL || cddp__store_move_hosting(a->ms.mv); /* the others need it to count out */
    /* at most --rdzv-conf close_timeout (default the grace period), which it used to ignore */
    cddp__rdzv_exit(a->store, &a->rz, hosting && !(a->elastic && a->ms.ending), a->o->close_ms);
    cddp__rdzv_release(&a->rz);
  }
  /* the watcher may still be blocked on the connection: leave it to process exit */
  if (!a->watcher_running) cddp_store_close(a->watch_store);
  cddp_store_close(a->store);
  int hosted = a->server != NULL || cddp__store_move_hosting(a->ms.mv);
  cddp_store_server_stop(a->server);
  cddp__store_move_stop(a->ms.mv);
  cddp__job_store_release(&a->js);
  if (hosted) cddp__slurm_token_remove(a->token_file); /* the job is over: no node will read it again */
  return code;
}

/* This node's first failure, for the job's line: when it happened, on the wall clock (the nodes'
 * clocks are compared; the monotonic ones are not comparable across hosts). */
static void post_failure(agent_t *a, const cddp__failure_t *f, int code, const char *line) {
  struct timespec real;
  clock_gettime(CLOCK_REALTIME, &real);
  uint64_t now = cddp__now_ns(), t = cddp__failure_time(f), age = now > t ? now - t : 0;
  uint64_t wall = (uint64_t)real.tv_sec * 1000000000ull + (uint64_t)real.tv_nsec - age;
  (void)cddp__rdzv_failure_post(a->store, a->rz.round, a->rz.node_rank, wall, code, line);
  a->failure_posted = a->rz.round + 1;
}

/* A failure of this node's own that is not a worker's (a signal to the agent, workers that did
 * not start): it happened now. */
static void post_now(agent_t *a, int code, const char *line) {
  struct timespec real;
  clock_gettime(CLOCK_REALTIME, &real);
  (void)cddp__rdzv_failure_post(a->store, a->rz.round, a->rz.node_rank,
                                (uint64_t)real.tv_sec * 1000000000ull + (uint64_t)real.tv_nsec, code, line);
  a->failure_posted = a->rz.round + 1;
}

/* restart-all: the store moved under this round, while its workers ran or after they were done
 * (its generation and done marks are gone with the old store): the round ends in a restart on
 * the new store, as after a failure, which *now gets. -1 (said) when nobody took the store over. */
static int moved_under_round(agent_t *a, cddp__job_event_t *ev, cddp__job_event_t *now) {
  if (a->store_moved < 0) {
    fprintf(stderr, "cddp run: node %s (agent %d) %s\n", a->host, a->id, cddp__store_move_line(a->ms.mv));
    return -1;
  }
  char line[480];
  snprintf(line, sizeof line, "cddp run: the job's store moved (epoch %lld) under round %d", (long long)a->moved_epoch,
           a->rz.round);
  *ev = (cddp__job_event_t){.kind = CDDP__EV_FAIL};
  if (a->rz.restart_count < a->o->max_restarts) {
    ev->kind = CDDP__EV_RESTART;
  } else {
    snprintf(line + strlen(line), sizeof line - strlen(line), "; no restarts left (--max-restarts %d)", a->o->max_restarts);
    ev->code = 1;
    snprintf(ev->line, sizeof ev->line, "%s", line);
    post_now(a, ev->code, line);
  }
  *now = *ev;
  if (cddp__rdzv_post(a->store, a->rz.round, ev, now) == CDDP_OK && ev->kind == CDDP__EV_RESTART &&
      now->kind == CDDP__EV_RESTART)
    fprintf(stderr, "%s; restarting the workers (restart %d of %d)\n", line, a->rz.restart_count + 1, a->o->max_restarts);
  return 0;
}

/* The round's event decides the agent's next step: -1 = go to the next round. */
static int follow_event(agent_t *a, const cddp__job_event_t *ev, int *exit_code) {
  /* restart-all: the job ends with this round, so a node waiting for the next one (it came after
   * this round closed) is told now, not after its --rdzv-timeout */
  if (ev->kind != CDDP__EV_RESTART && !a->o->replace && cddp__gen_close_job(a->store, a->rz.round, a->rz.node_rank))
    CDDP_INFO(CDDP_SUB_RUN, "round %d: the job's end is not announced: %s", a->rz.round, cddp_last_error());
  if (ev->kind == CDDP__EV_DONE) {
    *exit_code = 0;
    return 1;
  }
  if (ev->kind == CDDP__EV_RESTART) { /* the next generation, every member new: gathered by its round */
    if (ev->line[0]) /* a lost node's will */
      fprintf(stderr, "%s; restarting the workers on the nodes left (restart %d of %d)\n", ev->line,
              a->rz.restart_count + 1, a->o->max_restarts);
    if (cddp__gen_open_restart(a->store, a->rz.round, a->rz.node_rank) != CDDP_OK)
      CDDP_WARN("restart generation %d: %s (joining its round anyway)", a->rz.round + 1, cddp_last_error());
    return -1;
  }
  /* fail */
  char first[640];
  int code = ev->code, c;
  /* every node prints the failure that came first anywhere, which need not be the one posted;
   * a node with no failure of its own says so, so that nobody waits for it */
  if (a->failure_posted != a->rz.round + 1)
    (void)cddp__rdzv_failure_post(a->store, a->rz.round, a->rz.node_rank, 0, 0, "");
  if (cddp__rdzv_failure_first(a->store, a->rz.round, a->rz.nnodes, a->o->grace_ms + FAILURE_WAIT_EXTRA_MS, &c,
                               first, sizeof first)) {
    fprintf(stderr, "%s\n", first);
    code = c;
  } else {
    fprintf(stderr, "%s\n", ev->line);
  }
  *exit_code = code > 0 && code < 256 ? code : 1;
  return 1;
}

/* A watcher's report (the event's value, or "lost <why>" when the store went away). */
static int follow_value(agent_t *a, const char *value, int *exit_code) {
  cddp__job_event_t *ev = malloc(sizeof *ev);
  if (ev && !cddp__job_event_parse(value, strlen(value), ev)) {
    int r = follow_event(a, ev, exit_code);
    free(ev);
    return r;
  }
  free(ev);
  /* the store's move said why this node stops (its clients were cut for it): that line; a store
   * that may move and moved nowhere with this node: it is the one cut off */
  const char *why = cddp__store_move_line(a->ms.mv), *lost = !strncmp(value, "lost ", 5) ? value + 5 : value;
  if (why[0]) fprintf(stderr, "cddp run: node %s (agent %d) %s\n", a->host, a->id, why);
  else if (a->ms.mv)
    fprintf(stderr, "cddp run: node %s (agent %d) is cut off from the job (lost the store at %s:%d: %s)\n", a->host,
            a->id, a->js.host, a->js.port, lost);
  else fprintf(stderr, "cddp run: lost the store at %s:%d: %s\n", a->js.host, a->js.port, lost);
  *exit_code = 1;
  return 1;
}

/* restart-all: the member record of the generation a round gathered (every member new), so
 * that every generation of every job has one; written by node 0. Its workers do not read it:
 * restart-all never changes members in place. */
static void gathered(agent_t *a) {
  cddp__members_t *m = malloc(sizeof *m);
  if (!m) return;
  cddp__members_of_nodes(a->rz.nodes, a->rz.nnodes, m); /* past CDDP__MAX_MEMBERS: the first of them */
  if (cddp__members_write(a->store, a->rz.round, m) != CDDP_OK)
    CDDP_WARN("generation %d: no member record: %s", a->rz.round, cddp_last_error());
  free(m);
}

/* restart-all: what the others do if this agent dies (killed, its host gone) before the round
 * ends: the store posts it for the dead agent (its will), so they never wait for its "done";
 * they restart on the nodes left while restarts remain (as after a worker's failure), else stop
 * with the line that names this node. */
static void leave_will(agent_t *a) {
  int restart = a->rz.restart_count < a->o->max_restarts;
  cddp__job_event_t ev = {.kind = restart ? CDDP__EV_RESTART : CDDP__EV_FAIL, .code = 1};
  snprintf(ev.line, sizeof ev.line, "cddp run: node %d (host %s, agent %d) was lost: its agent's connection to the "
           "store closed without a goodbye (killed, or its host went down)%s", a->rz.node_rank, a->host, a->id,
           restart ? "" : "; no restarts left");
  if (cddp__rdzv_will(a->store, a->o->run_id, a->rz.round, &ev) != CDDP_OK)
    CDDP_WARN("round %d: no will at the store, so a loss of this node would go unseen: %s", a->rz.round,
              cddp_last_error());
}

/* Replace mode: generation 0's members, and the monitor (heartbeat, will, peers' health). */
static int start_membership(agent_t *a) {
  cddp__membership_t *ms = &a->ms;
  ms->store = a->store, ms->self = a->id, ms->min_nodes = a->o->min_nodes, ms->max_nodes = a->o->max_nodes;
  ms->round = a->rz.round;
  ms->wait_ms = a->o->rdzv_timeout_ms, ms->wait_gen = -1; /* below MIN: wait for a node as long as a join may take */
  snprintf(ms->host, sizeof ms->host, "%s", a->host);
  if (pipe2(ms->pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    fprintf(stderr, "cddp run: pipe: %s\n", strerror(errno));
    return -1;
  }
  a->elastic = 1;
  if (a->o->max_nodes > 1 &&
      cddp__monitor_start(&ms->mon, a->js.host, a->js.port, a->token, a->o->run_id, a->id,
                          (int)cddp__knob_int(CDDP_KNOB_HEARTBEAT_MS), (int)cddp__knob_int(CDDP_KNOB_HEARTBEAT_TIMEOUT_MS),
                          ms->pipe[1]) != CDDP_OK) {
    fprintf(stderr, "cddp run: cannot start the heartbeat: %s\n", cddp_last_error());
    return -1;
  }
  cddp__store_move_notify(ms->mv, ms->pipe[1]);
  cddp__monitor_lease(ms->mon, cddp__store_move_hosting_flag(ms->mv));
  cddp_result_t r = a->rz.late ? cddp__membership_pend(ms, a->o->nproc_per_node)
                                : cddp__membership_begin(ms, a->rz.nodes, a->rz.nnodes);
  if (r != CDDP_OK) {
    fprintf(stderr, "cddp run: %s\n", cddp_last_error());
    return -1;
  }
  return 0;
}

/* A pending node (a late joiner, a spare, one that came back) waits until a member takes it
 * in: -1 (then start the workers as newcomers), or the exit code (the job finished or
 * stopped, a signal, the store lost). */
static int wait_taken_in(agent_t *a) {
  cddp__membership_t *ms = &a->ms;
  if (ms->joined) return -1;
  if (!ms->ending) {
    fprintf(stderr, "cddp run: node %s (agent %d) waits to be taken into the running job (generation %lld)\n", a->host,
            a->id, (long long)ms->gen);
    cddp__status_pub_state(&a->status, "spare");
  }
  char msg[512];
  for (;;) {
    int sig = ms->ending ? -2 : wait_event(a, msg, sizeof msg);
    if (sig > 0) return 128 + sig;
    if (sig == -2) {
      fprintf(stderr, "cddp run: %s\n", ms->line);
      return 1;
    }
    if (sig == -3) {
      fprintf(stderr, "cddp run: node %s (agent %d) taken into the job in generation %lld (world %d)\n", a->host, a->id,
              (long long)ms->gen, cddp__members_world(&ms->cur));
      return -1;
    }
    const char *value = sig == 0 ? event_value(msg) : "lost the watcher";
    cddp__job_event_t ev;
    if (!cddp__job_event_parse(value, strlen(value), &ev) && ev.kind == CDDP__EV_DONE) {
      fprintf(stderr, "cddp run: the job finished while node %s (agent %d) waited to be taken in\n", a->host, a->id);
      return 0;
    }
    int code = 1;
    follow_value(a, value, &code);
    return code;
  }
}

/* Reconnects a store view whose connection broke (a partition): 0 it works, 1 reconnected,
 * -1 not reachable within --rdzv-timeout (said on stderr). */
static int reconnect(agent_t *a, cddp_store_t **s) {
  int re = cddp__job_store_reconnect(&a->js, s);
  if (re < 0) fprintf(stderr, "cddp run: %s\n", cddp_last_error());
  return re;
}

/* This node was dropped (a partition, a freeze): its workers are gone; it registers again as a
 * pending node under a new agent id, with a new heartbeat and will. */
static int come_back(agent_t *a) {
  cddp__membership_t *ms = &a->ms;
  cddp__monitor_stop(ms->mon, 1);
  ms->mon = NULL;
  int re = reconnect(a, &a->store);
  if (re < 0) return -1;
  ms->store = a->store;
  int64_t n;
  if (cddp_store_add(a->store, cddp__job_key(CDDP__JK_AGENTS, 0, 0).s, 1, &n) != CDDP_OK) {
    fprintf(stderr, "cddp run: %s\n", cddp_last_error());
    return -1;
  }
  int old = a->id;
  a->id = ms->self = (int)n - 1;
  /* the watcher's connection broke with the agent's: a fresh one (the old one is busy in its
   * thread's wait, so it cannot be probed) */
  if (re > 0) {
    if (connect_store(a, &a->watch_store) != 0) return -1;
    if (a->watcher_running) pthread_detach(a->watcher);
    a->watcher_running = 0;
    watch_start(a, a->rz.round);
  }
  char drain[4096];
  while (read(ms->pipe[0], drain, sizeof drain) > 0) {
  }
  if (cddp__monitor_start(&ms->mon, a->js.host, a->js.port, a->token, a->o->run_id, a->id,
                          (int)cddp__knob_int(CDDP_KNOB_HEARTBEAT_MS), (int)cddp__knob_int(CDDP_KNOB_HEARTBEAT_TIMEOUT_MS),
                          ms->pipe[1]) != CDDP_OK ||
      cddp__membership_pend(ms, a->o->nproc_per_node) != CDDP_OK) {
    fprintf(stderr, "cddp run: node %s cannot come back into the job: %s\n", a->host, cddp_last_error());
    return -1;
  }
  if (ms->mv && cddp__store_move_rejoin(ms->mv, a->id) != CDDP_OK)
    fprintf(stderr, "cddp run: node %s comes back without a standby store: %s\n", a->host, cddp_last_error());
  cddp__monitor_lease(ms->mon, cddp__store_move_hosting_flag(ms->mv));
  fprintf(stderr, "cddp run: node %s (agent %d) comes back as agent %d\n", a->host, old, a->id);
  return 0;
}

/* A job of more than ~1,500 nodes beats slower (cddp__heartbeat_ms: the store's load stays flat),
 * so its detection timeout grows too, from --nnodes' MAX, which every agent of the job shares.
 * Put in the environment before any thread starts: this agent's clients, its monitor, its store
 * move and its workers' store clients all bound their calls by it. The user's value wins. */
static void heartbeat_timeout_for_size(const cddp_run_opts_t *o) {
  const char *var = cddp__knob_var(CDDP_KNOB_HEARTBEAT_TIMEOUT_MS);
  int floor_ms = (int)strtol(cddp__knob_default(CDDP_KNOB_HEARTBEAT_TIMEOUT_MS), NULL, 10);
  int ms = cddp__heartbeat_timeout_ms(o->max_nodes, (int)cddp__knob_int(CDDP_KNOB_HEARTBEAT_MS), floor_ms);
  if (getenv(var) || ms == floor_ms) return;
  char v[16];
  snprintf(v, sizeof v, "%d", ms);
  setenv(var, v, 1);
  CDDP_INFO(CDDP_SUB_RUN, "up to %d nodes: heartbeat timeout %d ms (%s unset; %d ms in smaller jobs)", o->max_nodes, ms,
            var, floor_ms);
}

static int agent_main(agent_t *a) {
  cddp_run_opts_t *o = a->o;
  if (setup_store(a) != 0) return finish(a, 1);
  cddp__rdzv_cfg_t cfg = {.min_nodes = o->min_nodes, .max_nodes = o->max_nodes,
                          .node_rank = o->backend == CDDP_RDZV_STATIC ? o->node_rank : -1, .static_nodes = o->static_nodes,
                          .last_call_ms = o->last_call_ms, .timeout_ms = o->rdzv_timeout_ms};
  snprintf(cfg.self.host, sizeof cfg.self.host, "%s", a->host);
  if (o->local_addr[0]) snprintf(cfg.self.addr, sizeof cfg.self.addr, "%.63s", o->local_addr);
  else cddp__sock_addr_toward(a->js.host, a->js.port, cfg.self.addr, sizeof cfg.self.addr);
  cfg.self.nproc = o->nproc_per_node;
  cfg.self.id = -1;
  /* replace mode, room to grow: a node that comes after the round closed (static: after its
   * slot was filled, a restarted node) waits to be taken into the running job instead of
   * waiting for a round that never opens */
  cfg.late_ok = o->replace && !o->standalone && o->max_nodes > 1;
  /* a stable id for this agent's life: its place in every generation's member record (and in
   * replace mode its heartbeat, its will, its workers' place) */
  int64_t n_agents;
  if (cddp_store_add(a->store, cddp__job_key(CDDP__JK_AGENTS, 0, 0).s, 1, &n_agents) != CDDP_OK) {
    fprintf(stderr, "cddp run: %s\n", cddp_last_error());
    return finish(a, 1);
  }
  a->id = cfg.self.id = (int)n_agents - 1;
  /* no single point of failure: this agent's standby is listed before it joins, so every
   * member knows every standby of the round it forms (restart-all: the move's events come on a
   * pipe of its own; replace mode: on the membership's, once it starts) */
  if (cddp__store_move_wanted(o->max_nodes, o->standalone)) {
    if (!o->replace && pipe2(a->move_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      fprintf(stderr, "cddp run: pipe: %s\n", strerror(errno));
      return finish(a, 1);
    }
    cddp__store_move_cfg_t mc = {.run_id = o->run_id, .token = a->token, .self = a->id, .store_host = a->js.host,
                                 .store_port = a->js.port, .hosting = a->server != NULL,
                                 .hb_timeout_ms = (int)cddp__knob_int(CDDP_KNOB_HEARTBEAT_TIMEOUT_MS),
                                 .notify_fd = a->move_pipe[1], .restart_all = !o->replace,
                                 .torch = a->torch_store, .conn = a->store_raw};
    if (cddp__store_move_start(&a->ms.mv, &mc) != CDDP_OK) {
      fprintf(stderr, "cddp run: %s\n", cddp_last_error());
      return finish(a, 1);
    }
  }
  cddp__status_pub_begin(&a->status, a->js.host, a->js.port, a->token, o->run_id, a->host, o->replace ? a->id : -1,
                         o->replace ? &a->ms.gen : NULL);
  int min_round = 0, first = 1;
  for (;;) {
    cddp__rdzv_release(&a->rz);
    /* rank 0's TCPStore, when the workers host their own: a fresh port each round (the last
     * round's rank 0 may have left its port in TIME_WAIT) */
    cfg.self.master_port = cddp__sock_free_port();
    /* the first join of a multi-node job: another --rdzv-id or a refused token said in one line */
    cddp__rdzv_watch_t rw = {0};
    if (first && !o->standalone && o->max_nodes > 1) {
      cddp__rdzv_waiter_t me = {.node_records = cfg.node_rank >= 0 ? o->static_nodes : 0};
      snprintf(me.run_id, sizeof me.run_id, "%s", o->run_id);
      snprintf(me.host, sizeof me.host, "%s", a->host);
      /* the watcher's connection is idle until the round forms: the watch borrows it */
      cddp__rdzv_watch_start(&rw, a->watch_raw, a->js.host, a->js.port, &me, o->max_nodes,
                             cfg.node_rank >= 0 ? o->static_nodes : o->min_nodes, o->rdzv_timeout_ms);
    }
    cddp_result_t jr = cddp__rdzv_join(a->store, &cfg, min_round, &a->rz);
    cddp__rdzv_watch_stop(&rw);
    if (jr != CDDP_OK) {
      fprintf(stderr, "cddp run: %s\n", cddp_last_error());
      /* the nodes disagree on a setting: a usage error; the job ended without this node: its code */
      return finish(a, a->rz.ended ? a->rz.end_code : jr == CDDP_INVALID_ARG ? 2 : 1);
    }
    CDDP_INFO(CDDP_SUB_RDZV, "round %d closed: node %d of %d, world %d", a->rz.round, a->rz.node_rank, a->rz.nnodes,
              a->rz.world_size);
    if (first && a->torch_store && confirm_torch_store(a) != 0) return finish(a, 1);
    cddp__store_move_round(a->ms.mv, &cfg, &a->rz);
    if (!o->replace && a->ms.mv) { /* restart-all: the round's nodes are the generation a move votes with */
      cddp__members_t *m = malloc(sizeof *m);
      if (m && !cddp__members_of_nodes(a->rz.nodes, a->rz.nnodes, m)) cddp__store_move_note(a->ms.mv, m, a->rz.round);
      free(m);
      store_move_events(a); /* a move before the round closed: this round formed on the new store */
      if (a->store_moved < 0) {
        fprintf(stderr, "cddp run: node %s (agent %d) %s\n", a->host, a->id, cddp__store_move_line(a->ms.mv));
        return finish(a, 1);
      }
    }
    char nproc_line[400];
    if (first && cddp__rdzv_nproc_line(&a->rz, nproc_line, sizeof nproc_line))
      fprintf(stderr, "cddp run: %s\n", nproc_line);
    /* a store off the loopback without a token lets anyone who reaches the port join, read or fail
     * the job: said once per job, by the node that hosts it, once the job has formed (a job that
     * fails before it forms keeps its one line) */
    if (first && a->server && !a->token[0] && !o->standalone && o->max_nodes > 1 && !a->store_loopback)
      CDDP_WARN("the store is unauthenticated: anyone who reaches %s can join or stop this job; "
                "put a shared secret in a file only you can read and set CDDP_TOKEN_FILE to it on every node",
                o->rdzv_host[0] ? o->rdzv_host : "its port");
    watch_start(a, a->rz.round);
    if (!o->replace && a->rz.nnodes > 1) leave_will(a);
    if (!o->replace && a->rz.node_rank == 0) gathered(a); /* restart-all: this generation's members */
    if (o->replace && !a->elastic && start_membership(a) != 0) return finish(a, 1);
    if (a->elastic && a->ms.pending) {
      int code = wait_taken_in(a);
      if (code >= 0) return finish(a, code);
    }
    cddp__workers_t ws;
    if (run_round(a, &ws, first) != 0) {
      cddp__job_event_t ev = {.kind = CDDP__EV_FAIL, .code = 1, .line = "cddp run: could not start the workers"};
      post_now(a, ev.code, ev.line);
      cddp__rdzv_post(a->store, a->rz.round, &ev, NULL);
      return finish(a, 1);
    }
    first = 0;
    while (a->elastic && a->ms.ending == 1) { /* dropped: come back as a pending node */
      workers_done(&ws);
      fprintf(stderr, "cddp run: %s\n", a->ms.line);
      if (come_back(a) != 0) return finish(a, 1);
      int code = wait_taken_in(a);
      if (code >= 0) return finish(a, code);
      if (run_round(a, &ws, 0) != 0) return finish(a, 1);
    }
    if (a->elastic && a->ms.ending) {
      workers_done(&ws);
      fprintf(stderr, "cddp run: %s\n", a->ms.line);
      return finish(a, 1);
    }
    int code = 0, next;
    char line[1024], desc[768], msg[512];
    /* ev: what this node posts; now: the round's event that won (this one or another node's) */
    cddp__job_event_t ev = {.kind = CDDP__EV_FAIL}, now;
    const char *value = NULL;
    if (a->store_moved && ws.outcome == CDDP__OUT_SUCCESS) { /* restart-all: the store moved under the round */
      if (moved_under_round(a, &ev, &now) != 0) {
        workers_done(&ws);
        return finish(a, 1);
      }
    } else switch (ws.outcome) {
    case CDDP__OUT_FAILED:
      code = describe_failure(a, &ws.w[ws.fail_index], ws.fail_status, desc, sizeof desc);
      snprintf(line, sizeof line, "cddp run: rank %d (host %s, pid %d) %s", ws.fail_rank, a->host, (int)ws.fail_pid,
               desc);
      if (!o->replace) /* replace mode judged it in replace_failed */
        a->not_retried = a->rz.restart_count >= o->max_restarts ? NULL
                         : cddp__failure_deterministic(a->last.rank >= 0 ? &a->last : NULL, &ws.failure,
                                                       ws.w[ws.fail_index].start_ns);
      a->last = ws.failure;
      if (a->not_retried) {
        int64_t used = a->rz.restart_count;
        if (o->replace) cddp_store_add(a->store, cddp__job_key(CDDP__JK_RESTARTS, 0, 0).s, 0, &used);
        snprintf(line + strlen(line), sizeof line - strlen(line), " (%s: not retried; restarts used %lld of %d)%s%.200s",
                 a->not_retried, (long long)used, o->max_restarts, ws.failure.error[0] ? ": " : "", ws.failure.error);
      } else if (o->replace) {
        snprintf(line + strlen(line), sizeof line - strlen(line), "; no restarts left (--max-restarts %d, "
                 "--restart-mode replace)", o->max_restarts);
      } else if (a->rz.restart_count < o->max_restarts) {
        ev.kind = CDDP__EV_RESTART;
      }
      if (ev.kind == CDDP__EV_FAIL) {
        ev.code = code;
        snprintf(ev.line, sizeof ev.line, "%.*s", (int)sizeof ev.line - 1, line); /* the store's copy may be cut */
        post_failure(a, &ws.failure, code, line);
      }
      now = ev;
      if (cddp__rdzv_post(a->store, a->rz.round, &ev, &now) == CDDP_OK && ev.kind == CDDP__EV_RESTART &&
          now.kind == CDDP__EV_RESTART) {
        fprintf(stderr, "%s; restarting the workers (restart %d of %d)\n", line, a->rz.restart_count + 1,
                o->max_restarts);
        cddp__status_pub_lost(&a->status, &ws, "%.200s; every worker restarts (restart %d of %d)", line + 10,
                              a->rz.restart_count + 1, o->max_restarts);
      }
      break;
    case CDDP__OUT_SIGNAL: {
      const char *ab = sigabbrev_np(ws.signo);
      ev.code = 128 + ws.signo;
      snprintf(ev.line, sizeof ev.line, "cddp run: the agent on %s received SIG%s; workers stopped", a->host,
               ab ? ab : "?");
      post_now(a, ev.code, ev.line);
      cddp__rdzv_post(a->store, a->rz.round, &ev, NULL);
      fprintf(stderr, "%s\n", ev.line);
      workers_done(&ws);
      return finish(a, 128 + ws.signo);
    }
    case CDDP__OUT_WAKE: /* handled in run_round; not an outcome */
    case CDDP__OUT_EVENT:
      snprintf(msg, sizeof msg, "%s", ws.event);
      value = event_value(msg);
      if (ws.fail_rank >= 0 && !cddp__job_event_parse(value, strlen(value), &now) &&
          now.kind == CDDP__EV_FAIL) { /* ours failed too: maybe first */
        code = describe_failure(a, &ws.w[ws.fail_index], ws.fail_status, desc, sizeof desc);
        snprintf(line, sizeof line, "cddp run: rank %d (host %s, pid %d) %s", ws.fail_rank, a->host, (int)ws.fail_pid, desc);
        post_failure(a, &ws.failure, code, line);
      }
      break;
    case CDDP__OUT_SUCCESS:
      if (a->elastic) /* nobody is taken in now */
        (void)cddp_store_set(a->store, cddp__job_key(CDDP__JK_COMPLETE, 0, 0).s, CDDP__JOB_FLAG, CDDP__JOB_FLAG_LEN);
      if (a->elastic) cddp__membership_done(&a->ms, 1);
      else cddp__rdzv_node_done(a->store, &a->rz);
      CDDP_INFO(CDDP_SUB_RUN, "this node's workers are done (exit 0); it waits for the job's end");
      int sig = wait_event(a, msg, sizeof msg);
      if (sig > 0) {
        workers_done(&ws);
        return finish(a, 128 + sig);
      }
      if (sig == -4 && moved_under_round(a, &ev, &now) != 0) { /* the store moved while this node waited */
        workers_done(&ws);
        return finish(a, 1);
      }
      if (sig == -4) break;
      if (sig == -2) {
        workers_done(&ws);
        fprintf(stderr, "cddp run: %s\n", a->ms.line);
        return finish(a, 1);
      }
      value = sig == 0 ? event_value(msg) : "lost the watcher";
      break;
    }
    workers_done(&ws);
    next = value ? follow_value(a, value, &code) : follow_event(a, &now, &code);
    if (next > 0) return finish(a, code);
    min_round = a->rz.round + 1;
  }
}

/* A new private folder $TMPDIR/<prefix>XXXXXX. */
static int tmp_dir(char *buf, size_t size, const char *prefix) {
  snprintf(buf, size, "%s/%sXXXXXX", cddp__tmp_base(), prefix);
  return mkdtemp(buf) ? 0 : -1;
}

/* The flight folder without --log-dir: a new private one, $TMPDIR/cddp-flight-<run id>.XXXXXX
 * (mkdtemp: a name nobody can plant first); empty when it cannot be made (no records then). */
static void flight_tmp_dir(char *buf, size_t size, const char *run_id) {
  char prefix[96];
  int plain = strlen(run_id) < 64 && !strchr(run_id, '/');
  snprintf(prefix, sizeof prefix, "cddp-flight-%.63s.", plain ? run_id : "job");
  if (tmp_dir(buf, size, prefix) != 0) buf[0] = '\0';
}

/* Removes a folder of plain files (the error files), if there is one. */
static void remove_dir(const char *dir) {
  if (!dir[0]) return;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    char path[4400];
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}

/* The agent's folders in $TMPDIR, however it ends (its own end, the guard's, an early return):
 * the error files and pages go, the timer's folder too, and the private flight folder unless a
 * line named it: records the log named stay, also when the job recovered from that hang or
 * failure and ended well; records nobody was told of would only pile up in $TMPDIR. */
static void leave_tmp(void *arg) {
  agent_t *a = arg;
  remove_dir(a->err_dir);
  if (a->timer_dir[0]) rmdir(a->timer_dir);
  const char *log = a->o->log_dir;
  if (!a->flight_dir[0] || (log[0] && !strncmp(a->flight_dir, log, strlen(log)))) return; /* the user's */
  if (__atomic_load_n(&a->flight_named, __ATOMIC_ACQUIRE)) rmdir(a->flight_dir); /* only when empty */
  else remove_dir(a->flight_dir);
}

/* How the job ended, into its --log-dir's record: `cddp status LOG_DIR` says it once the job's
 * store is gone, as it does for the trainer's run folder. */
static void say_ended(const char *log_dir, int code) {
  cddp_result_t r;
  if (code == 0) r = cddp__endpoint_end(log_dir, "done (cddp run exit code 0)");
  else if (code > 128 && sigabbrev_np(code - 128))
    r = cddp__endpoint_end(log_dir, "stopped by signal SIG%s (cddp run exit code %d)", sigabbrev_np(code - 128), code);
  else r = cddp__endpoint_end(log_dir, "failed (cddp run exit code %d; its output names the rank and the cause)", code);
  if (r != CDDP_OK) CDDP_WARN("%s (cddp status LOG_DIR)", cddp_last_error());
}

int cddp__run_main(int argc, char **argv) {
  cddp_run_opts_t o;
  cddp_result_t r = cddp__run_parse(argc, argv, environ, &o);
  if (r == CDDP_INVALID_USAGE) {
    fprintf(stderr, "cddp run: %s\n", cddp_last_error());
    cddp__run_usage(stderr);
    return 2;
  }
  if (r != CDDP_OK) {
    fprintf(stderr, "cddp run: %s\n", cddp_last_error());
    return 2;
  }
  if (o.mode == CDDP_RUN_HELP) {
    cddp__run_usage(stdout);
    return 0;
  }
  /* a Slurm step's master comes from its node list: a name nobody knows fails here, at once,
   * not after every task retried the store for --rdzv-timeout */
  if (o.slurm && (o.mode == CDDP_RUN_SLURM_RANK ? o.world_size : o.max_nodes) > 1 &&
      cddp__sock_host_resolves(o.master_addr, o.master_src) != CDDP_OK) {
    fprintf(stderr, "cddp run: %s\n", cddp_last_error());
    return 2;
  }
  if (o.mode == CDDP_RUN_SLURM_BATCH) return cddp__slurm_exec_srun(argc, argv, o.replace);
  cddp__program_t prog;
  if (cddp__program_resolve(&o, argv + o.prog_index, &prog) != CDDP_OK) {
    fprintf(stderr, "cddp run: %s\n", cddp_last_error());
    return 2;
  }
  if (o.mode == CDDP_RUN_SLURM_RANK || o.mode == CDDP_RUN_MPI_RANK) return cddp__task_exec_rank(&o, prog.argv);

  agent_t a = {.o = &o, .prog = prog.argv, .sig_fd = -1, .ev_pipe = {-1, -1}, .move_pipe = {-1, -1}, .last = {.rank = -1}};
  if (cddp_token_from_env(a.token, sizeof a.token) != CDDP_OK) {
    fprintf(stderr, "cddp run: %s\n", cddp_last_error());
    return 2;
  }
  /* a hand-written `srun cddp run` over several nodes: the job's own token, no flag needed */
  if (!a.token[0] && o.slurm && o.max_nodes > 1 && !o.standalone) {
    if (cddp__slurm_token(environ, a.token, sizeof a.token, a.token_file, sizeof a.token_file) != CDDP_OK) {
      fprintf(stderr, "cddp run: %s\n", cddp_last_error());
      return 2;
    }
    CDDP_INFO(CDDP_SUB_RUN, "the job's token is in %s (no CDDP_TOKEN given)", a.token_file);
  }
  CDDP_INFO(CDDP_SUB_RUN, "%d workers on this node (%s); each runs %s%s%s", o.nproc_per_node, o.nproc_src, prog.argv[0],
            prog.python ? " " : "", prog.python ? argv[o.prog_index] : "");
  if (!getenv("OMP_NUM_THREADS") && o.nproc_per_node > 1) { /* torchrun's default, and its notice */
    a.omp_default = 1;
    /* said aloud where it matters (torch's CPU ops run on OpenMP), at INFO for other programs */
    if (prog.python)
      fprintf(stderr, "cddp run: setting OMP_NUM_THREADS=1 for each worker (%d workers on this node) so they do not "
              "overload the CPUs; set it yourself to tune\n", o.nproc_per_node);
    else
      CDDP_INFO(CDDP_SUB_RUN, "OMP_NUM_THREADS=1 for each worker (%d workers on this node)", o.nproc_per_node);
  }
  heartbeat_timeout_for_size(&o);
  start_warm(&a);
  choose_torch_store(&a);
  if (tmp_dir(a.err_dir, sizeof a.err_dir, "cddp-run-") != 0) { /* no error files: no causes, no flight pages */
    int e = errno;
    fprintf(stderr, "cddp run: cannot make a private folder in %s (%s): no workers' error files%s\n", cddp__tmp_base(),
            strerror(e), o.hang_ms > 0 ? ", and no hang watchdog (--hang-timeout)" : "");
    a.err_dir[0] = '\0';
  }
  a.live_console = isatty(STDERR_FILENO) && !o.log_dir[0] && !o.tmp_log_dir;
  if (o.log_dir[0]) snprintf(a.flight_dir, sizeof a.flight_dir, "%s/flight", o.log_dir);
  else flight_tmp_dir(a.flight_dir, sizeof a.flight_dir, o.run_id);
  if (a.torch_major >= 2) a.n_fr_env = cddp__torch_fr_vars(a.flight_dir, a.torch_minor, a.fr_env);
  const char *want_timer = getenv("TORCHELASTIC_ENABLE_FILE_TIMER"); /* torchrun's switch */
  const char *user_timer = getenv("TORCHELASTIC_TIMER_FILE"); /* the user's path is kept, as torchrun does */
  if (user_timer && user_timer[0]) snprintf(a.timer_path, sizeof a.timer_path, "%s", user_timer);
  if (want_timer && !strcmp(want_timer, "1")) {
    if (!a.timer_path[0] && tmp_dir(a.timer_dir, sizeof a.timer_dir, "cddp-timer-") != 0) a.timer_dir[0] = '\0';
    else if (!a.timer_path[0]) snprintf(a.timer_path, sizeof a.timer_path, "%s/timer.pipe", a.timer_dir);
    if (!a.timer_path[0] || !(a.timer = cddp__etimer_open(a.timer_path))) {
      fprintf(stderr, "cddp run: TORCHELASTIC_ENABLE_FILE_TIMER=1: %s\n", a.timer_path[0] ? cddp_last_error() : strerror(errno));
      leave_tmp(&a);
      return 1;
    }
  }
  if (o.tmp_log_dir) {
    if (tmp_dir(o.log_dir, sizeof o.log_dir, "cddp-logs-") != 0) {
      fprintf(stderr, "cddp run: --redirects without --log-dir: cannot make a folder for the log files: %s\n", strerror(errno));
      leave_tmp(&a);
      return 1;
    }
    fprintf(stderr, "cddp run: --redirects without --log-dir: worker output goes to %s/rank<N>.log\n", o.log_dir);
  }
  if (o.standalone && !a.token[0]) cddp__job_token_random(a.token, sizeof a.token);
  if (gethostname(a.host, sizeof a.host) != 0) snprintf(a.host, sizeof a.host, "?");
  a.host[sizeof a.host - 1] = '\0';
  /* signals arrive on a pipe; set up before any thread of ours starts, so all keep them blocked */
  signal(SIGPIPE, SIG_IGN);
  if (cddp__sigguard_start(o.grace_ms, a.host, &a.sig_fd) != CDDP_OK) {
    fprintf(stderr, "cddp run: %s\n", cddp_last_error());
    leave_tmp(&a);
    return 1;
  }
  cddp__sigguard_at_exit(leave_tmp, &a);
  if (pipe2(a.ev_pipe, O_CLOEXEC) != 0) {
    fprintf(stderr, "cddp run: pipe: %s\n", strerror(errno));
    leave_tmp(&a);
    return 1;
  }
  int code = agent_main(&a);
  if (a.endpoint_written) say_ended(o.log_dir, code);
  cddp__etimer_close(a.timer);
  leave_tmp(&a);
  cddp__program_free(&prog);
  return cddp__sigguard_end(code);
}

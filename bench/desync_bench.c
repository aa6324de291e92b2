/* desync_bench.c - what the desync check (CDDP_DESYNC_CHECK) costs a small allreduce, with and
 * without in the same run. Build: make lib && make -C bench desync; run:
 *   build/bench/desync_bench [-t shm|tcp] [-b BYTES] [-n CALLS] [-r ROUNDS] [-w WORLD] [-m]
 * Each rank (forked, over a TCP store of its own) opens two communicators, one with the check
 * and one without (the knob is read at init), and times CALLS allreduces of BYTES on each in
 * turn, ROUNDS times, the order alternating. Rank 0 prints the median time per call of each,
 * and the difference. On a loaded machine those times are mostly the scheduler's; -m measures
 * the check's own work in one process instead: the shm side (fingerprint, hash, two slots
 * written, a peer's compared) per call, and the tcp side as 4 KiB send+recv over a loopback
 * connection against the same with the 24-byte header, sent as the transport does (header and
 * chunk copied into one buffer below 16 KiB), in turns. -f times the flight recorder's own
 * records per collective the same way (bench/observe_bench.sh runs both). */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cddp/comm.h"
#include "cddp/store.h"
#include "comm/desync.h"
#include "comm/flight.h"

enum { MAXR = 201 };

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void die(const char *what, cddp_result_t r) {
  fprintf(stderr, "desync_bench: %s: %s: %s\n", what, cddp_result_name(r), cddp_last_error());
  exit(1);
}

static int rank_main(int rank, int world, int port, const char *tp, size_t bytes, int calls, int rounds) {
  cddp_store_t *st;
  cddp_result_t r = cddp_store_tcp_connect(&st, "127.0.0.1", port, "", 5000);
  if (r) die("store", r);
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.transport = tp;
  cddp_comm_t *c[2]; /* [0] without the check, [1] with it */
  for (int k = 0; k < 2; k++) {
    setenv("CDDP_DESYNC_CHECK", k ? "1" : "0", 1);
    if ((r = cddp_comm_init(&c[k], st, rank, world, k, &cfg))) die("comm init", r);
  }
  size_t n = bytes / 4;
  float *x = calloc(n ? n : 1, 4);
  double t[2][MAXR];
  for (int k = 0; k < 2; k++) /* warm-up, and the tuner's calibration where it runs */
    for (int i = 0; i < calls; i++)
      if ((r = cddp_allreduce(c[k], x, x, n, CDDP_F32, CDDP_SUM))) die("allreduce", r);
  for (int round = 0; round < rounds; round++)
    for (int j = 0; j < 2; j++) {
      int k = (round + j) % 2; /* alternate which goes first */
      if ((r = cddp_barrier(c[k]))) die("barrier", r);
      double t0 = now();
      for (int i = 0; i < calls; i++)
        if ((r = cddp_allreduce(c[k], x, x, n, CDDP_F32, CDDP_SUM))) die("allreduce", r);
      t[k][round] = (now() - t0) / calls;
    }
  if (rank == 0) {
    double off = median(t[0], rounds), on = median(t[1], rounds);
    printf("%-4s %2d ranks %8zu B  without %8.3f us  with %8.3f us  difference %+7.3f us  (median of %d x %d calls)\n",
           tp, world, bytes, off * 1e6, on * 1e6, (on - off) * 1e6, rounds, calls);
  }
  for (int k = 0; k < 2; k++) cddp_comm_destroy(c[k]);
  cddp_store_close(st);
  free(x);
  return 0;
}

/* ---- -m: the check's own work, in one process ---- */

static volatile uint32_t sink;

/* What the shm transport adds to a collective's first arrival: the call's fingerprint, its hash,
 * the slot written, and a peer's slot compared. ns per call, median of rounds. */
static double micro_shm(int rounds) {
  enum { N = 1000000 };
  double t[MAXR];
  cddp__fp_t mine[2], peer[2] = {{0}};
  uint32_t hash_mine[2], step_peer[2] = {0}, hash_peer[2] = {0};
  for (int r = 0; r < rounds; r++) {
    double t0 = now();
    for (uint32_t i = 1; i <= N; i++) {
      cddp__fp_t f = {.count = 1024, .seq = i, .rank = 0, .kind = 0, .dt = 0, .arg = 0};
      uint32_t k = i & 1;
      mine[k] = f, mine[k].tag = i, hash_mine[k] = cddp__fp_hash(&f, i);
      peer[k] = mine[k], step_peer[k] = i, hash_peer[k] = hash_mine[k]; /* the peer did the same */
      sink += step_peer[k] == i && hash_peer[k] == hash_mine[k];
    }
    t[r] = (now() - t0) / N * 1e9;
  }
  sink += mine[0].seq + peer[1].seq;
  return median(t, rounds);
}

/* A loopback TCP connection, both ends in this process. */
static void tcp_pair(int fd[2]) {
  int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) || getsockname(l, (struct sockaddr *)&a, &len))
    exit(1);
  fd[0] = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd[0], (struct sockaddr *)&a, sizeof a) || (fd[1] = accept(l, NULL, NULL)) < 0) exit(1);
  close(l);
  for (int i = 0; i < 2; i++) setsockopt(fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* One 4 KiB message one way, with or without the header: us per message, median of rounds. */
static double micro_tcp(int fd[2], int header, size_t bytes, int calls, int round_i, double *t) {
  static char out[1 << 16], in[1 << 16];
  cddp__fp_t h = {.count = bytes / 4, .seq = 1, .tag = CDDP__FP_MAGIC}, got;
  double t0 = now();
  for (int i = 0; i < calls; i++) {
    if (header) { /* as tcp_engine.c sends a small first chunk: header and data copied into one buffer */
      static char bounce[(1 << 16) + 64], bin[(1 << 16) + 64];
      size_t total = sizeof h + bytes;
      memcpy(bounce, &h, sizeof h);
      memcpy(bounce + sizeof h, out, bytes);
      if (send(fd[0], bounce, total, MSG_NOSIGNAL) != (ssize_t)total) exit(1);
      for (size_t got_n = 0; got_n < total;) {
        ssize_t n = recv(fd[1], bin + got_n, total - got_n, 0);
        if (n <= 0) exit(1);
        got_n += (size_t)n;
      }
      memcpy(&got, bin, sizeof got);
      memcpy(in, bin + sizeof got, bytes);
      sink += cddp__fp_same(&got, &h);
    } else {
      if (send(fd[0], out, bytes, MSG_NOSIGNAL) != (ssize_t)bytes) exit(1);
      for (size_t got_n = 0; got_n < bytes;) {
        ssize_t n = recv(fd[1], in + got_n, bytes - got_n, 0);
        if (n <= 0) exit(1);
        got_n += (size_t)n;
      }
    }
  }
  t[round_i] = (now() - t0) / calls * 1e6;
  return t[round_i];
}

/* -f: what the flight recorder adds to a collective, start and end records (CDDP_FLIGHT=1, the
 * page in this process's memory): ns per collective, median of rounds. */
static int micro_flight(int rounds) {
  enum { N = 1000000 };
  double t[MAXR];
  setenv("CDDP_FLIGHT", "1", 1);
  for (int r = 0; r < rounds; r++) {
    double t0 = now();
    for (uint64_t i = 1; i <= N; i++) cddp__flight_end(cddp__flight_start(0, 0, 0, 0, 1024, 0, 2, 0, i), 1);
    t[r] = (now() - t0) / N * 1e9;
  }
  printf("flight recorder per collective (its start and end records): %.1f ns (median of %d x 1M)\n", median(t, rounds),
         rounds);
  return 0;
}

static int micro(size_t bytes, int calls, int rounds) {
  printf("fingerprint work per collective (shm: fingerprint, hash, slot written, peer's compared): %.1f ns "
         "(median of %d x 1M)\n", micro_shm(rounds), rounds);
  int fd[2];
  tcp_pair(fd);
  double t[2][MAXR];
  for (int r = 0; r < rounds; r++)
    for (int j = 0; j < 2; j++) micro_tcp(fd, (r + j) % 2, bytes, calls, r, t[(r + j) % 2]);
  double off = median(t[0], rounds), on = median(t[1], rounds);
  printf("tcp one way, %zu B, one process: send+recv %.3f us, with the 24-byte header (copied in and out of one buffer) %.3f us, "
         "difference %+.3f us (median of %d x %d)\n", bytes, off, on, on - off, rounds, calls);
  close(fd[0]), close(fd[1]);
  return 0;
}

int main(int argc, char **argv) {
  const char *tp = "shm";
  size_t bytes = 4096;
  int calls = 2000, rounds = 31, world = 2, opt, micro_only = 0, flight_only = 0;
  while ((opt = getopt(argc, argv, "t:b:n:r:w:mf")) != -1) {
    switch (opt) {
      case 't': tp = optarg; break;
      case 'b': bytes = (size_t)strtoull(optarg, NULL, 10); break;
      case 'n': calls = atoi(optarg); break;
      case 'r': rounds = atoi(optarg); break;
      case 'w': world = atoi(optarg); break;
      case 'm': micro_only = 1; break;
      case 'f': flight_only = 1; break;
      default:
        fprintf(stderr, "usage: desync_bench [-t shm|tcp] [-b BYTES] [-n CALLS] [-r ROUNDS] [-w WORLD] [-m] [-f]\n");
        return 2;
    }
  }
  if (calls < 1 || rounds < 1 || rounds > MAXR || world < 2 || world > 64) {
    fprintf(stderr, "desync_bench: -n >= 1, -r in 1..%d, -w in 2..64\n", MAXR);
    return 2;
  }
  if (micro_only) return micro(bytes, calls, rounds);
  if (flight_only) return micro_flight(rounds);
  cddp_store_server_t *srv;
  cddp_result_t r = cddp_store_server_start(&srv, "127.0.0.1", 0, "");
  if (r) die("store server", r);
  int port = cddp_store_server_port(srv);
  pid_t pids[64];
  fflush(NULL);
  for (int q = 0; q < world; q++) {
    pids[q] = fork();
    if (pids[q] == 0) {
      int rc = rank_main(q, world, port, tp, bytes, calls, rounds);
      fflush(stdout); /* _exit does not flush */
      _exit(rc);
    }
  }
  int bad = 0;
  for (int q = 0; q < world; q++) {
    int st = 0;
    waitpid(pids[q], &st, 0);
    bad |= !WIFEXITED(st) || WEXITSTATUS(st);
  }
  cddp_store_server_stop(srv);
  return bad;
}

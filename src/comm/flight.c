/* flight.c - records every collective's start and end in a page its agent can read, so that a
 * hang is found and explained from outside the process (docs/launcher.md, "Hangs"). */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cddp/comm.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "comm/flight.h"

static cddp__flight_page_t private_page, *page;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The agent's file when there is one (it reads it), else memory of our own (a dump still works). */
static void init_once(void) {
  if (cddp__knob_int(CDDP_KNOB_FLIGHT) == 0) return;
  const char *path = getenv("CDDP_FLIGHT_FILE");
  cddp__flight_page_t *p = &private_page;
  if (path && *path) {
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
      if (ftruncate(fd, sizeof *p) == 0) {
        void *m = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m != MAP_FAILED) p = m;
      }
      close(fd);
    }
  }
  memset(p, 0, sizeof *p);
  p->version = CDDP__FLIGHT_VERSION;
  p->pid = (uint32_t)getpid();
  __atomic_store_n(&p->magic, CDDP__FLIGHT_MAGIC, __ATOMIC_RELEASE);
  page = p;
}

static cddp__flight_page_t *get(void) {
  pthread_once(&once, init_once);
  return page;
}

uint64_t cddp__flight_start(int kind, int dt, int op, int root, uint64_t count, int rank, int world, int round,
                            uint64_t cseq) {
  cddp__flight_page_t *p = get();
  if (!p) return 0;
  /* one number per collective of the process, whichever communicator (and thread) runs it;
   * the agent may read seq a moment before its record is written: it then describes the one
   * before in that slot, which only its own next read corrects */
  uint64_t seq = __atomic_add_fetch(&p->seq, 1, __ATOMIC_ACQ_REL);
  cddp__flight_rec_t *r = &p->ring[(seq - 1) % CDDP__FLIGHT_RING];
  *r = (cddp__flight_rec_t){.seq = seq, .cseq = cseq, .count = count, .t_start = cddp__now_coarse_ns(), .kind = kind, .dt = dt,
                            .op = op, .root = root, .rank = rank, .world = world, .round = round,
                            .state = CDDP__FLIGHT_STARTED};
  return seq;
}

void cddp__flight_end(uint64_t seq, int ok) {
  cddp__flight_page_t *p = page;
  if (!p || !seq) return;
  cddp__flight_rec_t *r = &p->ring[(seq - 1) % CDDP__FLIGHT_RING];
  r->t_end = cddp__now_coarse_ns();
  r->state = ok ? CDDP__FLIGHT_DONE : CDDP__FLIGHT_FAILED;
  uint64_t cur = __atomic_load_n(&p->done, __ATOMIC_ACQUIRE); /* done only grows (several threads) */
  while (cur < seq && !__atomic_compare_exchange_n(&p->done, &cur, seq, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
  }
}

void cddp_progress_alive(void) {
  cddp__flight_page_t *p = get();
  if (p) __atomic_add_fetch(&p->beat, 1, __ATOMIC_RELEASE);
}

void cddp_progress_step(uint64_t step) {
  cddp__flight_page_t *p = get();
  if (p) __atomic_store_n(&p->step, step, __ATOMIC_RELEASE);
}

const cddp__flight_page_t *cddp__flight_page(void) { return get(); }

struct cddp__alive {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* on CLOCK_MONOTONIC: a clock step neither stops nor floods the beats */
  int beat_ms, max_ms, stop;
};

static void *alive_loop(void *arg) {
  cddp__alive_t *a = arg;
  struct timespec at;
  clock_gettime(CLOCK_MONOTONIC, &at);
  pthread_mutex_lock(&a->mu);
  for (int ms = 0; !a->stop && ms <= a->max_ms; ms += a->beat_ms) {
    cddp_progress_alive();
    at.tv_nsec += (long)(a->beat_ms % 1000) * 1000000L, at.tv_sec += a->beat_ms / 1000 + at.tv_nsec / 1000000000L;
    at.tv_nsec %= 1000000000L;
    while (!a->stop && pthread_cond_timedwait(&a->cv, &a->mu, &at) == 0) {
    }
  }
  pthread_mutex_unlock(&a->mu);
  return NULL;
}

cddp__alive_t *cddp__alive_start(int beat_ms, int max_ms) {
  cddp__alive_t *a = calloc(1, sizeof *a);
  pthread_condattr_t ca;
  if (!a || beat_ms <= 0 || pthread_condattr_init(&ca) != 0) {
    free(a);
    return NULL;
  }
  a->beat_ms = beat_ms, a->max_ms = max_ms;
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&a->mu, NULL);
  pthread_cond_init(&a->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (pthread_create(&a->thread, NULL, alive_loop, a) != 0) {
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a);
    return NULL;
  }
  return a;
}

void cddp__alive_stop(cddp__alive_t *a) {
  if (!a) return;
  pthread_mutex_lock(&a->mu);
  a->stop = 1;
  pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&a->mu);
  pthread_join(a->thread, NULL);
  pthread_cond_destroy(&a->cv);
  pthread_mutex_destroy(&a->mu);
  free(a);
}

const char *cddp__flight_kind_name(int kind) {
  static const char *names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast", "barrier"};
  return kind >= 0 && kind < (int)(sizeof names / sizeof names[0]) ? names[kind] : "?";
}

void cddp__flight_describe(const cddp__flight_rec_t *r, char *buf, size_t size) {
  if (r->kind == 4) /* barrier: no data */
    snprintf(buf, size, "barrier #%llu", (unsigned long long)r->seq);
  else if (r->kind == 3)
    snprintf(buf, size, "broadcast #%llu (%llu %s from rank %d)", (unsigned long long)r->seq,
             (unsigned long long)r->count, cddp_dtype_name((cddp_dtype_t)r->dt), r->root);
  else
    snprintf(buf, size, "%s #%llu (%llu %s, %s)", cddp__flight_kind_name(r->kind), (unsigned long long)r->seq,
             (unsigned long long)r->count, cddp_dtype_name((cddp_dtype_t)r->dt), cddp_redop_name((cddp_redop_t)r->op));
}

int cddp__flight_dump(const cddp__flight_page_t *p, int rank, const char *path, uint64_t now_ns) {
  /* O_NOFOLLOW: a link planted where the record goes is refused, never written through */
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    if (fd >= 0) close(fd);
    return -1;
  }
  uint64_t seq = __atomic_load_n(&p->seq, __ATOMIC_ACQUIRE), done = __atomic_load_n(&p->done, __ATOMIC_ACQUIRE);
  fprintf(f, "{\"rank\": %d, \"pid\": %u, \"seq\": %llu, \"done\": %llu, \"collectives\": [", rank, p->pid,
          (unsigned long long)seq, (unsigned long long)done);
  uint64_t first = seq > CDDP__FLIGHT_RING ? seq - CDDP__FLIGHT_RING + 1 : 1;
  for (uint64_t s = first; s <= seq && seq; s++) {
    const cddp__flight_rec_t *r = &p->ring[(s - 1) % CDDP__FLIGHT_RING];
    static const char *states[] = {"?", "started", "done", "failed"};
    uint64_t end = r->t_end ? r->t_end : now_ns;
    fprintf(f, "%s\n  {\"seq\": %llu, \"cseq\": %llu, \"op\": \"%s\", \"dtype\": \"%s\", \"redop\": \"%s\", \"count\": %llu, "
            "\"root\": %d, \"world\": %d, \"round\": %d, \"state\": \"%s\", \"started_s_ago\": %.6f, \"ms\": %.3f}",
            s == first ? "" : ",", (unsigned long long)r->seq, (unsigned long long)r->cseq, cddp__flight_kind_name(r->kind),
            cddp_dtype_name((cddp_dtype_t)r->dt), cddp_redop_name((cddp_redop_t)r->op), (unsigned long long)r->count,
            r->root, r->world, r->round, states[r->state >= 0 && r->state <= 3 ? r->state : 0],
            (double)(now_ns - r->t_start) / 1e9, (double)(end - r->t_start) / 1e6);
  }
  fprintf(f, "\n]}\n");
  return fclose(f) == 0 ? 0 : -1;
}

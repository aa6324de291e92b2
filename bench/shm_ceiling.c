// shm_ceiling - what each way of moving an allreduce between two processes on this host can
// reach, with no library in the way: the ceilings issue 2's speed table is measured against.
//
// Two forked ranks, pinned to CPUs 0 and 1, allreduce (float avg) a buffer in place, the way
// `cddp bench allreduce` does, by one of three mechanisms:
//   zero-copy  both buffers sit in one shared mapping; rank r averages half r of both and
//              writes the result into both (what cddp does with mem_alloc buffers)
//   cma        private buffers; rank r reads half r of the peer's buffer with
//              process_vm_readv, 256 KiB at a time, averages it into its own and writes it
//              back with process_vm_writev (cddp's path for ordinary buffers)
//   staged     private buffers copied through a ring of shared slots, software-pipelined:
//              step s stages chunk s, reduces chunk s-1, copies out chunk s-2 (the pipelined
//              copy through shared memory)
// Waits spin (no futex): this is the ceiling, not a library. `--thp` backs the private
// buffers with transparent huge pages (madvise), as PyTorch's THP_MEM_ALLOC_ENABLE does.
//
// Usage: shm_ceiling [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]
//                    [-m zero-copy|cma|staged|all] [--chunk BYTES] [--thp]
// Prints one row per size and mechanism: size, mechanism, time (us), algbw, busbw (GB/s),
// #wrong (elements of either rank's result that differ from the exact average).
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { ZERO_COPY, CMA, STAGED, NMECH };
static const char *const mech_name[NMECH] = {"zero-copy", "cma", "staged"};

#define SLOTS 4 /* staged ring depth: step s reuses the slot of step s-4, long released */
#define CMA_PIECE (256u << 10)

typedef struct {
  _Atomic uint32_t v;
  char pad[124]; /* one flag per 128 B: no false sharing with the adjacent-line prefetcher */
} flag_t;

typedef struct {
  flag_t step[2];
  flag_t wrong[2];
  char *buf[2];
  pid_t pid[2];
} ctl_t;

typedef float vf __attribute__((vector_size(64), aligned(4), may_alias));

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Spin until *w reaches s; a peer that stops answering for 10 s ends the run. */
static void wait_step(const _Atomic uint32_t *w, uint32_t s, int rank) {
  double deadline = 0; /* read the clock only once a wait has spun a million times */
  for (unsigned spins = 1;; spins++) {
    if ((int32_t)(atomic_load_explicit(w, memory_order_acquire) - s) >= 0) return;
    __builtin_ia32_pause();
    if ((spins & 0xfffff) == 0) {
      if (deadline == 0) deadline = now() + 10;
      else if (now() > deadline) {
        fprintf(stderr, "shm_ceiling: rank %d: the peer did not reach step %u in 10 s\n", rank, s);
        _exit(1);
      }
    }
  }
}

/* d = a = (a + b) / 2, 64 bytes at a time (n is a multiple of 64) */
static void avg_into_both(char *a, const char *b, char *d, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    vf x = (*(const vf *)(a + i) + *(const vf *)(b + i)) * 0.5f;
    *(vf *)(a + i) = x;
    *(vf *)(d + i) = x;
  }
}

typedef struct {
  int mech, thp, rank;
  size_t bytes, chunk;
  int iters, warmup;
  ctl_t *ctl;
  char *shared;     /* zero-copy buffers, or the staged slots */
  size_t slot_size; /* staged: one slot's stride */
} run_t;

static char *staged_slot(const run_t *x, int owner, int result, uint64_t k) {
  /* slots of one kind and owner are consecutive; the stride keeps them 1 KiB apart mod 4 KiB */
  size_t idx = ((size_t)owner * 2 + (size_t)result) * SLOTS + (size_t)(k % SLOTS);
  return x->shared + idx * x->slot_size + 1024 * (size_t)(owner * 2 + result);
}

static char *private_buffer(size_t bytes, int thp, int rank) {
  size_t align = thp ? (2u << 20) : 4096, len = (bytes + 2 * align) & ~(align - 1);
  char *p = mmap(NULL, len + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  p = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
  if (thp && madvise(p, len, MADV_HUGEPAGE) != 0) return NULL;
  return p + 64 * (size_t)rank; /* the two ranks' buffers at different offsets mod 4 KiB */
}

/* One in-place allreduce (avg); *step counts the sync steps, and every call ends with both ranks synced. */
static int one_call(run_t *x, char *buf, char *peer, char *scratch, uint32_t *step) {
  int r = x->rank, o = 1 - r;
  size_t half = x->bytes / 2;
  ctl_t *c = x->ctl;
  if (x->mech == ZERO_COPY) {
    avg_into_both(buf + r * half, peer + r * half, peer + r * half, half);
  } else if (x->mech == CMA) {
    for (size_t off = r * half; off < (size_t)(r + 1) * half; off += CMA_PIECE) {
      size_t n = half - (off - r * half) < CMA_PIECE ? half - (off - r * half) : CMA_PIECE;
      struct iovec local = {scratch, n}, remote = {c->buf[o] + off, n};
      if (process_vm_readv(c->pid[o], &local, 1, &remote, 1, 0) != (ssize_t)n) return -errno;
      avg_into_both(buf + off, scratch, scratch, n);
      if (process_vm_writev(c->pid[o], &local, 1, &remote, 1, 0) != (ssize_t)n) return -errno;
    }
  } else {
    size_t h = x->chunk / 2, nchunks = x->bytes / x->chunk;
    for (uint64_t s = 0; s < nchunks + 2; s++) {
      if (s > 0) wait_step(&c->step[o].v, *step + (uint32_t)s, r); /* peer finished step s-1 */
      uint64_t k = *step + s;
      if (s < nchunks) memcpy(staged_slot(x, r, 0, k), buf + s * x->chunk + o * h, h);
      if (s >= 1 && s - 1 < nchunks)
        avg_into_both(buf + (s - 1) * x->chunk + r * h, staged_slot(x, o, 0, k - 1),
                      staged_slot(x, r, 1, k - 1), h);
      if (s >= 2) memcpy(buf + (s - 2) * x->chunk + o * h, staged_slot(x, o, 1, k - 2), h);
      atomic_store_explicit(&c->step[r].v, *step + (uint32_t)s + 1, memory_order_release);
    }
    *step += (uint32_t)(nchunks + 2);
    return 0;
  }
  *step += 1;
  atomic_store_explicit(&c->step[r].v, *step, memory_order_release);
  wait_step(&c->step[o].v, *step, r);
  return 0;
}

static float expected(size_t i) { return (float)(i % 251) + 0.5f; } /* avg of i%251 and +1 */

static int rank_main(run_t *x) {
  int r = x->rank, o = 1 - r;
  ctl_t *c = x->ctl;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(r, &cpus);
  if (sched_setaffinity(0, sizeof cpus, &cpus) != 0) {
    fprintf(stderr, "shm_ceiling: rank %d: cannot pin to CPU %d: %s\n", r, r, strerror(errno));
    return 1;
  }
  char *buf, *peer = NULL;
  if (x->mech == ZERO_COPY) {
    size_t stride = (x->bytes + 8192) & ~(size_t)4095;
    buf = x->shared + (size_t)r * stride + 512 + 384 * (size_t)r;
    peer = x->shared + (size_t)o * stride + 512 + 384 * (size_t)o;
  } else if (!(buf = private_buffer(x->bytes, x->thp, r))) {
    fprintf(stderr, "shm_ceiling: rank %d: cannot map %zu bytes: %s\n", r, x->bytes, strerror(errno));
    return 1;
  }
  static char scratch_area[CMA_PIECE + 4096] __attribute__((aligned(4096)));
  char *scratch = scratch_area + 2048;
  float *f = (float *)buf;
  for (size_t i = 0; i < x->bytes / 4; i++) f[i] = (float)(i % 251) + (float)r;
  c->buf[r] = buf;
  c->pid[r] = getpid();
  uint32_t step = 1; /* step 1: both ranks filled their buffers and published them */
  atomic_store_explicit(&c->step[r].v, step, memory_order_release);
  wait_step(&c->step[o].v, step, r);

  double t0 = 0;
  for (int it = 0; it < x->warmup + x->iters; it++) {
    if (it == x->warmup) t0 = now();
    int rc = one_call(x, buf, peer, scratch, &step);
    if (rc != 0) {
      fprintf(stderr, "shm_ceiling: rank %d: %s: %s\n", r, mech_name[x->mech], strerror(-rc));
      return 1;
    }
  }
  double t = (now() - t0) / x->iters;
  uint32_t wrong = 0;
  for (size_t i = 0; i < x->bytes / 4; i++) wrong += f[i] != expected(i);
  atomic_store(&c->wrong[r].v, wrong);
  step++;
  atomic_store_explicit(&c->step[r].v, step, memory_order_release);
  wait_step(&c->step[o].v, step, r);
  if (r == 0) {
    double algbw = (double)x->bytes / t / 1e9;
    printf("%12zu %10s%s %12.2f %8.2f %8.2f %8u\n", x->bytes, mech_name[x->mech],
           x->thp && x->mech != ZERO_COPY ? "+thp" : "    ", t * 1e6, algbw, algbw,
           wrong + atomic_load(&c->wrong[o].v));
    fflush(stdout);
  }
  return 0;
}

static int run_one(run_t *x) {
  size_t shared_len = 4096;
  if (x->mech == ZERO_COPY) shared_len = 2 * ((x->bytes + 8192) & ~(size_t)4095);
  if (x->mech == STAGED) {
    x->slot_size = ((x->chunk / 2 + 4096) & ~(size_t)4095) + 4096;
    shared_len = 4 * SLOTS * x->slot_size + 8192;
  }
  ctl_t *ctl = mmap(NULL, sizeof(ctl_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  x->shared = mmap(NULL, shared_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (ctl == MAP_FAILED || x->shared == MAP_FAILED) {
    fprintf(stderr, "shm_ceiling: cannot map %zu shared bytes: %s\n", shared_len, strerror(errno));
    return 1;
  }
  x->ctl = ctl;
  pid_t pids[2];
  for (int r = 0; r < 2; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      x->rank = r;
      _exit(rank_main(x));
    }
  }
  int failed = 0;
  for (int r = 0; r < 2; r++) {
    int st;
    if (waitpid(pids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      failed = 1;
      kill(pids[1 - r], SIGKILL); /* the other spins on it otherwise, until its 10 s deadline */
    }
  }
  munmap(ctl, sizeof(ctl_t));
  munmap(x->shared, shared_len);
  return failed;
}

static int parse_size(const char *flag, const char *v, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  int shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10, end++;
  else if (*end == 'M' || *end == 'm') shift = 20, end++;
  else if (*end == 'G' || *end == 'g') shift = 30, end++;
  if (errno || end == v || *end || n == 0 || n > (1ull << 40) >> shift) {
    fprintf(stderr, "shm_ceiling: %s: '%s' is not a size (like 4K, 1M, 64M)\n", flag, v);
    return -1;
  }
  *out = (size_t)(n << shift);
  return 0;
}

static int parse_int(const char *flag, const char *v, int lo, int *out) {
  char *end;
  long n = strtol(v, &end, 10);
  if (end == v || *end || n < lo || n > 1000000) {
    fprintf(stderr, "shm_ceiling: %s: '%s' is not a count >= %d\n", flag, v, lo);
    return -1;
  }
  *out = (int)n;
  return 0;
}

static void usage(FILE *to) {
  fprintf(to, "usage: shm_ceiling [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]\n"
              "                   [-m zero-copy|cma|staged|all] [--chunk BYTES] [--thp]\n");
}

int main(int argc, char **argv) {
  size_t min = 1u << 20, max = 64u << 20, chunk = 256u << 10;
  int factor = 64, iters = 20, warmup = 5, thp = 0, mech = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = 0;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--thp")) {
      thp = 1;
      continue;
    } else if (!v) {
      fprintf(stderr, "shm_ceiling: %s needs a value\n", a);
      usage(stderr);
      return 2;
    } else if (!strcmp(a, "-b")) bad = parse_size(a, v, &min);
    else if (!strcmp(a, "-e")) bad = parse_size(a, v, &max);
    else if (!strcmp(a, "--chunk")) bad = parse_size(a, v, &chunk);
    else if (!strcmp(a, "-f")) bad = parse_int(a, v, 2, &factor);
    else if (!strcmp(a, "-n")) bad = parse_int(a, v, 1, &iters);
    else if (!strcmp(a, "-w")) bad = parse_int(a, v, 0, &warmup);
    else if (!strcmp(a, "-m")) {
      mech = !strcmp(v, "all") ? -1 : -2;
      for (int m = 0; m < NMECH; m++)
        if (!strcmp(v, mech_name[m])) mech = m;
      if (mech == -2) {
        fprintf(stderr, "shm_ceiling: -m: '%s' is not zero-copy, cma, staged or all\n", v);
        return 2;
      }
    } else {
      fprintf(stderr, "shm_ceiling: unknown flag '%s'\n", a);
      usage(stderr);
      return 2;
    }
    if (bad) return 2;
    i++;
  }
  if (min > max) {
    fprintf(stderr, "shm_ceiling: -b %zu is above -e %zu\n", min, max);
    return 2;
  }
  if (chunk % 128) {
    fprintf(stderr, "shm_ceiling: --chunk %zu is not a multiple of 128 bytes\n", chunk);
    return 2;
  }
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
    fprintf(stderr, "shm_ceiling: needs 2 CPUs (one per rank), this host has 1\n");
    return 2;
  }
  printf("# shm_ceiling: 2 ranks pinned to CPUs 0 and 1, in place, float avg, spin waits, no library\n");
  printf("# %10s %10s     %12s %8s %8s %8s\n", "size (B)", "mechanism", "time (us)", "algbw", "busbw",
         "#wrong");
  fflush(stdout); /* the forked ranks would print a buffered header again */
  for (size_t bytes = min; bytes <= max; bytes *= (size_t)factor) {
    for (int m = 0; m < NMECH; m++) {
      if (mech >= 0 && m != mech) continue;
      run_t x = {.mech = m, .thp = thp, .bytes = bytes, .chunk = chunk, .iters = iters, .warmup = warmup};
      if (bytes % 128 || (m == STAGED && bytes % chunk)) {
        fprintf(stderr, "shm_ceiling: %zu bytes: %s needs a multiple of %zu\n", bytes, mech_name[m],
                m == STAGED ? chunk : (size_t)128);
        return 2;
      }
      if (run_one(&x)) return 1;
    }
    if (bytes > SIZE_MAX / (size_t)factor) break;
  }
  return 0;
}

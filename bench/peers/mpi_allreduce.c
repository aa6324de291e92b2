/* mpi_allreduce.c - the Open MPI peer of `cddp bench allreduce`: MPI_Allreduce over the same sizes, same columns. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Usage: mpirun -np 2 mpi_allreduce [-b MIN] [-e MAX] [-f FACTOR | -i INCR] [-w WARMUP] [-n ITERS]
 *        [-c 0|1] [-d float|double] [-o sum|max|min] [-t]. Sizes take K, M, G suffixes (powers of 1024).
 * -t: the buffer on transparent huge pages (2 MiB-aligned, MADV_HUGEPAGE), like `cddp bench --thp`.
 * In place (MPI_IN_PLACE), like DDP's gradient allreduce and `cddp bench allreduce`. */

static void usage(void) {
  fprintf(stderr, "usage: mpi_allreduce [-b MIN] [-e MAX] [-f FACTOR | -i INCR] [-w WARMUP] [-n ITERS] "
                  "[-c 0|1] [-d float|double] [-o sum|max|min] [-t]\n");
}

static int parse_size(const char *s, size_t *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || v < 0) return -1;
  size_t mul = 1;
  switch (*end) {
    case 'K': case 'k': mul = 1ull << 10; end++; break;
    case 'M': case 'm': mul = 1ull << 20; end++; break;
    case 'G': case 'g': mul = 1ull << 30; end++; break;
    default: break;
  }
  if (*end == 'i' || *end == 'I') end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return -1;
  *out = (size_t)(v * (double)mul);
  return 0;
}

/* Small integers: every sum over a few ranks is exact in float and double. */
static double value(int rank, size_t i) { return (double)(1 + (i + 3 * (size_t)rank) % 5); }

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  size_t minb = 32u << 20, maxb = 32u << 20, incr = 1u << 20;
  long factor = 0, warmup = 1, iters = 20, check = 1;
  int dbl = 0, thp = 0;
  MPI_Op op = MPI_SUM;
  const char *opname = "sum";
  int c;
  while ((c = getopt(argc, argv, "b:e:f:i:w:n:c:d:o:t")) != -1) {
    int bad = 0;
    switch (c) {
      case 'b': bad = parse_size(optarg, &minb); break;
      case 'e': bad = parse_size(optarg, &maxb); break;
      case 'f': factor = atol(optarg); bad = factor < 2; break;
      case 'i': bad = parse_size(optarg, &incr) || incr == 0; break;
      case 'w': warmup = atol(optarg); bad = warmup < 0; break;
      case 'n': iters = atol(optarg); bad = iters < 1; break;
      case 'c': check = atol(optarg); break;
      case 't': thp = 1; break;
      case 'd': dbl = !strcmp(optarg, "double"); bad = !dbl && strcmp(optarg, "float"); break;
      case 'o':
        opname = optarg;
        if (!strcmp(optarg, "sum")) op = MPI_SUM;
        else if (!strcmp(optarg, "max")) op = MPI_MAX;
        else if (!strcmp(optarg, "min")) op = MPI_MIN;
        else bad = 1;
        break;
      default: bad = 1;
    }
    if (bad) {
      if (rank == 0) usage();
      MPI_Finalize();
      return 2;
    }
  }
  if (minb > maxb) maxb = minb;
  size_t esz = dbl ? 8 : 4;
  MPI_Datatype dt = dbl ? MPI_DOUBLE : MPI_FLOAT;
  char *buf = NULL;
  if (thp) {
    size_t len = (maxb + esz + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    if (posix_memalign((void **)&buf, 2u << 20, len) == 0 && madvise(buf, len, MADV_HUGEPAGE) != 0)
      perror("mpi_allreduce: madvise(MADV_HUGEPAGE)");
  } else {
    buf = malloc(maxb + esz);
  }
  if (!buf) {
    fprintf(stderr, "mpi_allreduce: cannot allocate %zu bytes\n", maxb);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(buf, 0, maxb + esz);
  if (rank == 0) {
    int len;
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Get_library_version(ver, &len);
    ver[strcspn(ver, ",\n")] = 0;
    printf("# mpi_allreduce: %s, world %d, in place%s\n", ver, world, thp ? ", transparent huge pages" : "");
    printf("# minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %ld iters: %ld validation: %ld\n#\n",
           minb, maxb, factor ? (size_t)factor : incr, factor ? "factor" : "bytes", warmup, iters, check);
    printf("# %10s %12s %8s %6s %6s %10s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
           "time", "algbw", "busbw", "#wrong");
    printf("# %10s %12s %8s %6s %6s %10s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
           "(GB/s)", "(GB/s)", "");
  }
  double bw_sum = 0;
  int rows = 0;
  long wrong_total = 0;
  for (size_t size = minb; size <= maxb; size = factor ? size * (size_t)factor : size + incr) {
    size_t count = size / esz, bytes = count * esz;
    if (count == 0) {
      if (factor && size == 0) break;
      continue;
    }
    memset(buf, 0, bytes);  /* zeros: no growth over the timed iterations */
    for (long i = 0; i < warmup; i++) MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, dt, op, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < iters; i++) MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, dt, op, MPI_COMM_WORLD);
    double t = (MPI_Wtime() - t0) / (double)iters, tmax;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    long wrong = 0, wsum;
    if (check) {
      for (size_t i = 0; i < count; i++) {
        double v = value(rank, i);
        if (dbl) ((double *)buf)[i] = v;
        else ((float *)buf)[i] = (float)v;
      }
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, dt, op, MPI_COMM_WORLD);
      for (size_t i = 0; i < count; i++) {
        double want = value(0, i);
        for (int r = 1; r < world; r++) {
          double v = value(r, i);
          if (op == MPI_SUM) want += v;
          else if (op == MPI_MAX) want = v > want ? v : want;
          else want = v < want ? v : want;
        }
        double got = dbl ? ((double *)buf)[i] : ((float *)buf)[i];
        wrong += got != want;
      }
    }
    MPI_Allreduce(&wrong, &wsum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    wrong_total += wsum;
    double algbw = (double)bytes / tmax / 1e9, busbw = algbw * 2.0 * (world - 1) / world;
    bw_sum += busbw;
    rows++;
    if (rank == 0) {
      printf("  %10zu %12zu %8s %6s %6d %10.2f %7.2f %7.2f %6ld\n", bytes, count, dbl ? "double" : "float",
             opname, -1, tmax * 1e6, algbw, busbw, check ? wsum : -1L);
      fflush(stdout);
    }
    if (factor && size * (size_t)factor <= size) break;
  }
  if (rank == 0) {
    printf("# Out of bounds values : %ld %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %.4f\n#\n", rows ? bw_sum / rows : 0.0);
  }
  free(buf);
  MPI_Finalize();
  return wrong_total ? 1 : 0;
}

/* cmd_flight.c - `cddp flight DIR`: reads the ranks' flight records (the watchdog's dumps, and
 * torch's own flight-recorder dumps beside them) and says where they part: the first collective
 * two ranks called differently (a desync), who is behind, and who is stuck inside which one. */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/torch_fr.h"
#include "common/io.h"

#define MAX_RANKS 1024
#define MAX_RECS 64

typedef struct rec {
  unsigned long long seq, cseq, count;
  char op[48], dtype[16], redop[16], state[16];
  int root, world, round;
  double age_s, ms;
} rec_t;

typedef struct rank_dump {
  int rank, n;
  char where[160]; /* torch's: the user's frame of the last collective */
  rec_t r[MAX_RECS];
} rank_dump_t;

static void usage(FILE *f) {
  fprintf(f, "usage: cddp flight DIR\n\n"
             "Reads DIR/rank<R>.json, the flight records cddp run's watchdog writes when it finds a hung\n"
             "worker (--log-dir/flight, else $TMPDIR/cddp-flight-<run id>.XXXXXX), and torch's own flight-recorder\n"
             "dumps there (DIR/<prefix><R>, pickles: TORCH_FR_DUMP_TEMP_FILE), and prints each rank's last\n"
             "collective, the first collective two ranks called differently (a desync), the ranks that are\n"
             "behind and the ones stuck inside a collective. Exit 0: no desync, 1: a desync, 2: no records.\n");
}

/* One dump: its header, then a line per collective (as comm/flight.c writes them). A regular
 * file only, never blocking on a FIFO: the folder may hold anything. */
static int read_dump(const char *path, rank_dump_t *d) {
  int fd = cddp__open_regular(path);
  FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
  char line[1024];
  if (!f) {
    if (fd >= 0) close(fd);
    return -1;
  }
  d->n = 0;
  d->rank = -1;
  while (fgets(line, sizeof line, f)) {
    rec_t x;
    if (d->rank < 0 && sscanf(line, "{\"rank\": %d,", &d->rank) == 1) continue;
    if (sscanf(line, " {\"seq\": %llu, \"cseq\": %llu, \"op\": \"%23[^\"]\", \"dtype\": \"%15[^\"]\", \"redop\": "
               "\"%15[^\"]\", \"count\": %llu, \"root\": %d, \"world\": %d, \"round\": %d, \"state\": \"%15[^\"]\", "
               "\"started_s_ago\": %lf, \"ms\": %lf}", &x.seq, &x.cseq, x.op, x.dtype, x.redop, &x.count, &x.root,
               &x.world, &x.round, x.state, &x.age_s, &x.ms) == 12 && d->n < MAX_RECS) {
      cddp__printable(x.op), cddp__printable(x.dtype), cddp__printable(x.redop), cddp__printable(x.state);
      d->r[d->n++] = x;
    }
  }
  fclose(f);
  return d->rank >= 0 ? 0 : -1;
}

/* A torch dump as records of round 0: its default group's entries (each group numbers its own). */
static int read_torch(const char *path, int rank, rank_dump_t *d, char *err, size_t errlen) {
  cddp__fr_dump_t *t = malloc(sizeof *t);
  if (!t || cddp__torch_fr_read(path, t, err, errlen) != 0) {
    if (!t) snprintf(err, errlen, "out of memory");
    free(t);
    return -1;
  }
  int any_default = 0;
  for (int k = 0; k < t->n; k++) any_default |= !strcmp(t->e[k].group, "default_pg");
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  double now_s = (double)now.tv_sec + now.tv_nsec / 1e9;
  memset(d, 0, sizeof *d);
  d->rank = rank;
  for (int k = 0; k < t->n && d->n < MAX_RECS; k++) {
    const cddp__fr_entry_t *e = &t->e[k];
    if ((any_default && strcmp(e->group, "default_pg")) || e->seq < 0 || e->p2p) continue;
    rec_t *x = &d->r[d->n++];
    x->seq = x->cseq = (unsigned long long)e->seq;
    x->count = e->count < 0 ? 0 : (unsigned long long)e->count;
    x->root = -1;
    snprintf(x->op, sizeof x->op, "%s", e->op);
    snprintf(x->dtype, sizeof x->dtype, "%s", e->dtype);
    /* torch marks an entry retired once the work is done; until then the rank is inside it */
    snprintf(x->state, sizeof x->state, "%s", e->retired ? "completed" : "started");
    x->age_s = e->created_ns > 0 ? now_s - (double)e->created_ns / 1e9 : 0;
    snprintf(d->where, sizeof d->where, "%s", e->where);
    cddp__printable(x->op), cddp__printable(x->dtype), cddp__printable(d->where); /* another process's bytes */
  }
  free(t);
  return 0;
}

/* A torch dump's name: a prefix then the rank ("torch-fr-3"); -1 for any other name. */
static int torch_dump_rank(const char *name) {
  size_t n = strlen(name), k = n;
  while (k > 0 && isdigit((unsigned char)name[k - 1])) k--;
  if (k == n || n - k > 7 || !strncmp(name, "rank", 4)) return -1;
  return atoi(name + k);
}

static void describe(const rec_t *x, char *buf, size_t size) {
  if (!strcmp(x->op, "barrier")) snprintf(buf, size, "barrier #%llu", x->cseq);
  else if (!strcmp(x->op, "broadcast") && x->root >= 0)
    snprintf(buf, size, "broadcast #%llu (%llu %s from rank %d)", x->cseq, x->count, x->dtype, x->root);
  else if (!x->redop[0]) snprintf(buf, size, "%s #%llu (%llu %s)", x->op, x->cseq, x->count, x->dtype);
  else snprintf(buf, size, "%s #%llu (%llu %s, %s)", x->op, x->cseq, x->count, x->dtype, x->redop);
}

static int same_call(const rec_t *a, const rec_t *b) {
  return !strcmp(a->op, b->op) && !strcmp(a->dtype, b->dtype) && !strcmp(a->redop, b->redop) && a->count == b->count &&
         a->root == b->root;
}

static const rec_t *find(const rank_dump_t *d, int round, unsigned long long cseq) {
  for (int i = 0; i < d->n; i++)
    if (d->r[i].round == round && d->r[i].cseq == cseq) return &d->r[i];
  return NULL;
}

static const rec_t *last(const rank_dump_t *d) { return d->n ? &d->r[d->n - 1] : NULL; }

static int by_rank(const void *a, const void *b) {
  int x = ((const rank_dump_t *)a)->rank, y = ((const rank_dump_t *)b)->rank;
  return (x > y) - (x < y);
}

static int by_value(const void *a, const void *b) {
  unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
  return (x > y) - (x < y);
}

/* Prints one family of dumps (cddp's or torch's); returns 1 on a desync. */
static int report(rank_dump_t *d, int n, int torch) {
  qsort(d, (size_t)n, sizeof *d, by_rank);
  int round = -1, desync = 0;
  char a[400], b[400]; /* a call, and torch's frame after it */
  for (int i = 0; i < n; i++)
    if (last(&d[i]) && last(&d[i])->round > round) round = last(&d[i])->round;
  if (torch) printf("# %d ranks' torch flight-recorder dumps (the default group's collectives)\n", n);
  else printf("# %d ranks' records; the latest round is %d\n", n, round);
  for (int i = 0; i < n; i++) {
    const rec_t *x = last(&d[i]);
    if (!x) {
      printf("rank %d: no collective recorded\n", d[i].rank);
      continue;
    }
    describe(x, a, sizeof a);
    if (torch && d[i].where[0]) snprintf(a + strlen(a), sizeof a - strlen(a), " from %s", d[i].where);
    if (torch && !strcmp(x->state, "started")) printf("rank %d: %s not finished in torch's record, called %.1f s ago\n", d[i].rank, a, x->age_s);
    else if (torch) printf("rank %d: last %s, completed; called %.1f s ago\n", d[i].rank, a, x->age_s);
    else if (!strcmp(x->state, "started")) printf("rank %d: inside %s for %.1f s\n", d[i].rank, a, x->age_s);
    else printf("rank %d: last %s, %s %.1f s ago\n", d[i].rank, a, x->state, x->age_s - x->ms / 1e3);
  }
  /* the first collective number of the latest round that two ranks both recorded, differently;
   * only the numbers recorded are tried (the records are anyone's bytes: no range walked) */
  unsigned long long *seqs = malloc((size_t)n * MAX_RECS * sizeof *seqs);
  size_t ns = 0;
  for (int i = 0; seqs && i < n; i++)
    for (int k = 0; k < d[i].n; k++)
      if (d[i].r[k].round == round) seqs[ns++] = d[i].r[k].cseq;
  if (seqs) qsort(seqs, ns, sizeof *seqs, by_value);
  for (size_t j = 0; j < ns && !desync; j++) {
    unsigned long long c = seqs[j];
    if (j > 0 && c == seqs[j - 1]) continue;
    const rec_t *first = NULL;
    int first_rank = -1;
    for (int i = 0; i < n && !desync; i++) {
      const rec_t *x = find(&d[i], round, c);
      if (!x) continue;
      if (!first) {
        first = x, first_rank = d[i].rank;
      } else if (!same_call(first, x)) {
        describe(first, a, sizeof a);
        describe(x, b, sizeof b);
        printf("desync at collective #%llu of round %d: rank %d called %s, rank %d called %s\n", c, round, first_rank, a,
               d[i].rank, b);
        desync = 1;
      }
    }
  }
  free(seqs);
  /* who is behind: the ranks whose last collective of the round comes before the others' */
  unsigned long long top = 0;
  for (int i = 0; i < n; i++)
    if (last(&d[i]) && last(&d[i])->round == round && last(&d[i])->cseq > top) top = last(&d[i])->cseq;
  for (int i = 0; i < n; i++) {
    const rec_t *x = last(&d[i]);
    if (x && x->round == round && x->cseq < top) {
      describe(x, a, sizeof a);
      printf("rank %d is behind: its last collective is %s (%s); others reached #%llu\n", d[i].rank, a, x->state, top);
    }
  }
  if (!desync) printf("no desync: every collective two ranks both recorded matches\n");
  return desync;
}

int cddp__cmd_flight(int argc, char **argv) {
  const char *dir = NULL;
  int n_dir = 0;
  const cddp__cli_t cli = {.cmd = "flight", .usage = usage, .positional = &dir, .max_positional = 1, .n_positional = &n_dir};
  int parsed = cddp__flags_parse(&cli, argc, argv);
  if (parsed >= 0) return parsed;
  if (!dir) {
    fprintf(stderr, "cddp flight: DIR is required (the folder of the ranks' flight records)\n");
    return 2;
  }
  DIR *dh = opendir(dir);
  if (!dh) {
    fprintf(stderr, "cddp flight: cannot read %s (the folder of the ranks' flight records)\n", dir);
    return 2;
  }
  rank_dump_t *d = calloc(MAX_RANKS, sizeof *d), *t = calloc(MAX_RANKS, sizeof *t);
  int n = 0, nt = 0, rank;
  char path[4400], err[200];
  for (struct dirent *e; d && t && (e = readdir(dh));) {
    char tail[8];
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (sscanf(e->d_name, "rank%d.%7s", &rank, tail) == 2 && !strcmp(tail, "json")) {
      if (n == MAX_RANKS) continue;
      if (read_dump(path, &d[n]) == 0) n++;
      else fprintf(stderr, "cddp flight: %s is not a flight record; skipped\n", path);
    } else if ((rank = torch_dump_rank(e->d_name)) >= 0 && nt < MAX_RANKS) {
      if (read_torch(path, rank, &t[nt], err, sizeof err) == 0) nt++;
      else fprintf(stderr, "cddp flight: %s is not a torch flight-recorder dump (%s); skipped\n", path, err);
    }
  }
  closedir(dh);
  int desync = 0;
  if (n == 0 && nt == 0)
    fprintf(stderr, "cddp flight: no rank<R>.json flight records in %s (nor torch flight-recorder dumps)\n", dir);
  if (n > 0) desync |= report(d, n, 0);
  if (nt > 0) desync |= report(t, nt, 1);
  free(d);
  free(t);
  return n == 0 && nt == 0 ? 2 : desync;
}

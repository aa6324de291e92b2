/* torch_fr.h - torch's flight-recorder dumps (the pickled dict torch 2.x writes to
 * TORCH_FR_DUMP_TEMP_FILE<rank>), read by a bounded pickle subset reader that refuses anything
 * else with one line: no Python object is ever built, so a hostile file can only be refused. */
#ifndef CDDP_CLI_TORCH_FR_H
#define CDDP_CLI_TORCH_FR_H

#include <stddef.h>

#define CDDP__FR_MAX_ENTRIES 64             /* the last ones kept: where a job stopped, not its history */
#define CDDP__FR_MAX_BYTES (64u << 20)      /* a larger file is refused, never read */

typedef struct cddp__fr_entry {
  long long seq;        /* collective_seq_id (p2p_seq_id for a send/recv) */
  long long count;      /* elements of the first input tensor, -1 when not recorded */
  long long created_ns; /* time_created_ns: the wall clock at the call, 0 when not recorded */
  int p2p, retired;     /* a send/recv; torch saw it finish */
  char op[48];          /* profiling_name without the backend: "all_reduce" of "gloo:all_reduce" */
  char backend[16];     /* "gloo", "nccl", "" */
  char dtype[16];       /* input_dtypes[0] */
  char state[16];       /* "scheduled", "started", "completed" */
  char group[48];       /* process_group's name ("default_pg") */
  char where[160];      /* the innermost frame outside torch: "train_step (train.py:12)", "" */
} cddp__fr_entry_t;

typedef struct cddp__fr_dump {
  char version[16];     /* the dump format's "version" */
  long long total;      /* entries in the dump */
  int n;                /* the last n of them, in e[] */
  cddp__fr_entry_t e[CDDP__FR_MAX_ENTRIES];
} cddp__fr_dump_t;

/* Reads one dump from buf[0..len). Returns 0, or -1 with one line in err naming what is wrong
 * (an opcode outside the subset, a length past the end, a missing "entries" list). Never blocks;
 * memory it takes is bounded by a multiple of len and freed before it returns. */
int cddp__torch_fr_parse(const unsigned char *buf, size_t len, cddp__fr_dump_t *out, char *err, size_t errlen);

/* The same from a file: refuses one over CDDP__FR_MAX_BYTES or one that is not a pickle. */
int cddp__torch_fr_read(const char *path, cddp__fr_dump_t *out, char *err, size_t errlen);

#endif

/* program.h - what each worker runs: torchrun's rules for PROGRAM, checked before any start. */
#ifndef CDDP_LAUNCHER_PROGRAM_H
#define CDDP_LAUNCHER_PROGRAM_H

#include "cddp/cddp.h"
#include "launcher/options.h"

typedef struct cddp__program {
  char **argv;        /* NULL-terminated; what each worker execs (argv[0] a path, or a name on PATH) */
  int python;         /* 1: argv = INTERPRETER -u [-m] PROGRAM ARGS */
  char interp[4096];  /* the interpreter's path when python */
} cddp__program_t;

/* torchrun's rules: with --no-python PROGRAM runs as it is; with -m it is a module run by
 * Python; a PROGRAM ending in .py (or any, with --run-path) runs with Python (--python,
 * CDDP_PYTHON, else the Python its "#!" line names when it has the run bit, else python3 on
 * PATH); anything else runs as it is. Checks that it can run:
 * INVALID_ARG with one line naming PROGRAM and what to do (not found, not executable, no
 * interpreter, the interpreter lacks torch that the script, the -m module or its package imports,
 * or lacks the -m module).
 * Those last two spawn the interpreter once and block at most 30 s. prog: NULL-terminated. */
cddp_result_t cddp__program_resolve(const cddp_run_opts_t *o, char **prog, cddp__program_t *p);
void cddp__program_free(cddp__program_t *p);
/* Whether the script has a line "import torch...", "import os, torch" or "from torch...". */
int cddp__program_imports_torch(const char *script);
/* Whether a line of the script holds word (the first 20000 lines). */
int cddp__program_mentions(const char *script, const char *word);
/* For argv = PYTHON [-u -B -s -E -I -q...] SCRIPT|-m MODULE ARGS: the index of SCRIPT or of -m;
 * -1 otherwise, with why ("the interpreter flag -X", ...). */
int cddp__program_python_args(char *const *argv, char *why, size_t why_size);
/* torch's major version under interp, read from its version.py without importing it: 0 when
 * the interpreter has no torch, -1 when unknown; minor (may be NULL): its minor version, capped at
 * 19 (enough to tell apart the releases where a variable's name changed), 0 when unknown. Blocks
 * at most 30 s (usually 30 ms). */
int cddp__program_torch_major(const char *interp, int *minor);

#endif /* CDDP_LAUNCHER_PROGRAM_H */

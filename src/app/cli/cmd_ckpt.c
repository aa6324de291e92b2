/* cmd_ckpt.c - `cddp ckpt info|verify PATH`: inspect and check a checkpoint, or the newest one
 * under a run's checkpoint root or run folder. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cddp/ckpt.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: cddp ckpt info PATH     files, tensors with shapes, metadata, verify status\n"
          "       cddp ckpt verify PATH   exit 0 and 'ok ...', or exit 1 and the problem\n"
          "  PATH  a checkpoint directory (step-N), a checkpoint root holding step-N directories,\n"
          "        or a run folder of cddp train (its checkpoints/). Given a root or run folder,\n"
          "        verify checks the newest step-N (exit 1 when it is broken, as a resume would\n"
          "        skip it); info shows the newest complete one and reports broken newer ones\n");
}

/* Is path a checkpoint directory itself (rather than a root of them)? */
static int is_checkpoint_dir(const char *path) {
  char p[PATH_MAX];
  const char *base = strrchr(path, '/');
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') n--;
  if (n < strlen(path)) { /* "dir/" -> look at "dir" */
    snprintf(p, sizeof p, "%.*s", (int)n, path);
    return is_checkpoint_dir(p);
  }
  base = base ? base + 1 : path;
  if (!strncmp(base, "step-", 5) || !strncmp(base, ".tmp-", 5)) return 1;
  snprintf(p, sizeof p, "%s/MANIFEST", path);
  if (access(p, F_OK) == 0) return 1;
  snprintf(p, sizeof p, "%s/DONE", path);
  return access(p, F_OK) == 0;
}

int cddp__cmd_ckpt(int argc, char **argv) {
  if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    usage(stdout);
    return 0;
  }
  if (argc != 3 || (strcmp(argv[1], "info") != 0 && strcmp(argv[1], "verify") != 0)) {
    if (argc >= 2 && strcmp(argv[1], "info") != 0 && strcmp(argv[1], "verify") != 0)
      fprintf(stderr, "cddp ckpt: unknown subcommand '%s' (info PATH or verify PATH; see --help)\n", argv[1]);
    else
      fprintf(stderr, "cddp ckpt: expected 'info PATH' or 'verify PATH' (see --help)\n");
    return 2;
  }
  const char *cmd = argv[1], *path = argv[2];
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "cddp ckpt %s: %s: %s\n", cmd, path, strerror(errno));
    return 1;
  }
  if (!S_ISDIR(st.st_mode)) {
    fprintf(stderr, "cddp ckpt %s: %s is not a directory (a checkpoint is a step-N directory)\n", cmd, path);
    return 1;
  }
  char dir[PATH_MAX], root[PATH_MAX];
  int verify = !strcmp(cmd, "verify");
  snprintf(root, sizeof root, "%s/checkpoints", path); /* a run folder, as `cddp sample --ckpt` takes */
  if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode)) snprintf(root, sizeof root, "%s", path);
  if (is_checkpoint_dir(path)) {
    snprintf(dir, sizeof dir, "%s", path);
  } else if ((verify ? cddp_ckpt_find_newest : cddp_ckpt_find_latest)(root, dir, sizeof dir) != CDDP_OK) {
    fprintf(stderr, "cddp ckpt %s: %s\n", cmd, cddp_last_error());
    return 1;
  }
  if (!strcmp(cmd, "info")) {
    if (cddp_ckpt_print_info(dir, stdout) != CDDP_OK) {
      fflush(stdout);
      fprintf(stderr, "cddp ckpt info: %s\n", cddp_last_error());
      return 1;
    }
    return 0;
  }
  cddp_ckpt_t *c;
  if (cddp_ckpt_load(dir, &c) != CDDP_OK) {
    /* the newest of a root is what a resume wants: broken, it would silently take an older one */
    fprintf(stderr, "cddp ckpt verify: %s%s\n", cddp_last_error(),
            is_checkpoint_dir(path) ? "" : " (the newest under the root; --resume-from latest would fall back to an older one)");
    return 1;
  }
  const char *step = cddp_ckpt_meta(c, "cddp.step");
  printf("ok %s (step %s)\n", dir, step ? step : "?");
  cddp_ckpt_close(c);
  return 0;
}

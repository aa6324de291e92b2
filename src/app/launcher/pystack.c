/* pystack.c - a Python worker's stack from py-spy, and which frame is the user's own code: the
 * watchdog's "in sleepy_data_loader (train.py:7)" and its "ranks 0 wait in all_reduce". */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/knobs.h"
#include "launcher/pystack.h"

#define DUMP_MAX_BYTES (256 * 1024)

int cddp__pystack_take(pid_t pid, const char *path) {
  const char *spy = cddp__knob_str(CDDP_KNOB_PY_SPY);
  if (!spy[0]) spy = "py-spy";
  pid_t g = fork();
  if (g == 0) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (fd < 0 || null < 0) _exit(127);
    dup2(fd, STDOUT_FILENO), dup2(null, STDERR_FILENO);
    char p[32];
    snprintf(p, sizeof p, "%d", (int)pid);
    execlp("timeout", "timeout", "10", spy, "dump", "--nonblocking", "--full-filenames", "--pid", p, (char *)NULL);
    _exit(127);
  }
  int st = 0;
  if (g < 0 || waitpid(g, &st, 0) != g) return -1;
  struct stat sb;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 && stat(path, &sb) == 0 && sb.st_size > 0 ? 0 : -1;
}

/* A file of Python itself or of an installed package, not the user's own code. */
static int library_file(const char *file) {
  return file[0] == '<' || strstr(file, "/site-packages/") || strstr(file, "/dist-packages/") ||
         strstr(file, "/lib/python3") || strstr(file, "/lib64/python3");
}

/* A frame of torch.distributed's set-up: the group is being formed, so the ranks it waits for may
 * still be starting (importing torch on a loaded machine), not hung. */
static int setup_frame(const char *func, const char *loc) {
  static const char *const names[] = {"init_process_group", "new_group", "new_subgroups", "_store_based_barrier",
                                      "init_device_mesh", "_new_process_group_helper"};
  if (!strstr(loc, "/torch/distributed/")) return 0;
  if (strstr(loc, "/torch/distributed/rendezvous.py:")) return 1;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(func, names[i])) return 1;
  return 0;
}

/* Bytes outside printable ASCII (an escape sequence in a file or function name) become '?'. */
static void printable(char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < ' ' || (unsigned char)*s >= 127) *s = '?';
}

/* "    func (file:line)" -> func, file:line; 0 when the line is no frame. */
static int frame(char *line, char **func, char **loc) {
  if (strncmp(line, "    ", 4) != 0) return 0;
  char *open = strrchr(line, '('), *close = strrchr(line, ')');
  if (!open || !close || close < open || open == line + 4) return 0;
  *close = '\0';
  open[-1] = '\0';
  *func = line + 4, *loc = open + 1;
  return strchr(*loc, ':') != NULL;
}

int cddp__pystack_where(const char *path, cddp__pywhere_t *where) {
  memset(where, 0, sizeof *where);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[1024];
  size_t total = 0;
  int threads = 0, in_main = 0, user_found = 0, frames = 0;
  while (total < DUMP_MAX_BYTES && fgets(line, sizeof line, f)) {
    size_t n = strlen(line);
    total += n;
    if (n && line[n - 1] != '\n') /* a cut line: skip the rest of it */
      for (int c; (c = fgetc(f)) != EOF && c != '\n' && total < DUMP_MAX_BYTES;) total++;
    line[strcspn(line, "\n")] = '\0';
    if (!strncmp(line, "Thread ", 7)) { /* py-spy lists the main thread first; it says so when it knows */
      threads++;
      in_main = threads == 1 || strstr(line, "\"MainThread\"") != NULL;
      if (threads > 1 && in_main) memset(where, 0, sizeof *where), user_found = 0, frames = 0;
      continue;
    }
    char *func, *loc;
    if (!in_main || !frame(line, &func, &loc)) continue;
    frames++;
    where->setup |= setup_frame(func, loc);
    where->importing |= strstr(loc, "importlib._bootstrap") != NULL;
    if (!where->coll[0] && strstr(loc, "/torch/distributed/") && !user_found)
      snprintf(where->coll, sizeof where->coll, "%.47s", func);
    if (!user_found && !library_file(loc)) {
      const char *base = strrchr(loc, '/');
      snprintf(where->user, sizeof where->user, "%.80s (%.70s)", func, base ? base + 1 : loc);
      user_found = 1;
    }
  }
  fclose(f);
  printable(where->user), printable(where->coll); /* names the worker chose reach the terminal */
  return frames > 0 ? 0 : -1; /* a main thread without frames: py-spy read it mid-change (--nonblocking) */
}

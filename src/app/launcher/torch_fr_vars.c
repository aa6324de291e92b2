/* torch_fr_vars.c - torch's own flight recorder for torch 2.x workers: which variables the agent
 * sets by default, and the poke through torch's dump pipe (the watchdog's way to make a hung
 * rank write its records, where torch allows it). */
#include "launcher/torch_fr_vars.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher/workers.h"

/* Each row: the name torch 2.7+ reads first, the older name torch 2.2-2.6 reads (NCCL only),
 * the value. A user who set either name keeps both as they are: torch takes the first it finds.
 * Only the name the worker's torch reads is set: 2.7+ warns on each rank about an older one. */
static const struct { const char *name, *old_name, *value; } vars[] = {
    {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"},
    {"TORCH_FR_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT", "1"},
    {"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", NULL},   /* flight_dir/torch-fr- */
    {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE", NULL, NULL},                        /* flight_dir/torch-fr-pipe- */
};

int cddp__torch_fr_vars(const char *flight_dir, int torch_minor, char **out) {
  int old = torch_minor < CDDP__TORCH_FR_NEW_NAMES_MINOR;
  int n = 0, paths = 0;
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    if (getenv(vars[i].name) || (vars[i].old_name && getenv(vars[i].old_name))) continue;
    char value[4400];
    if (vars[i].value) snprintf(value, sizeof value, "%s", vars[i].value);
    else if (flight_dir && flight_dir[0])
      snprintf(value, sizeof value, "%s/%s", flight_dir, i == 2 ? CDDP__TORCH_FR_DUMP : CDDP__TORCH_FR_PIPE), paths++;
    else continue;
    if (asprintf(&out[n], "%s=%s", old && vars[i].old_name ? vars[i].old_name : vars[i].name, value) >= 0) n++;
  }
  if (paths && cddp__mkdir_p(flight_dir) != 0) {
    for (int i = 0; i < n; i++) free(out[i]);
    return 0; /* no folder: no paths into it, and no flight recorder half set */
  }
  return n;
}

int cddp__torch_fr_poke(const char *flight_dir, int rank) {
  char path[4400];
  struct stat st;
  if (!flight_dir || !flight_dir[0]) return 0;
  snprintf(path, sizeof path, "%s/%s%d.pipe", flight_dir, CDDP__TORCH_FR_PIPE, rank);
  int fd = open(path, O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC); /* ENXIO: nobody reads it */
  if (fd < 0) return 0;
  int ok = fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode) && write(fd, "1\n", 2) == 2;
  close(fd);
  return ok;
}

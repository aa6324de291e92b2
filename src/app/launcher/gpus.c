/* gpus.c - counts the GPUs a worker could use, without linking CUDA. */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "launcher/gpus.h"
#include "common/envp.h"

int cddp__gpus_visible(char **envp, char *how, size_t size) {
  const char *cvd = cddp__envp_get(envp, "CUDA_VISIBLE_DEVICES");
  if (cvd) {
    int n = 0;
    /* CUDA stops at the first invalid entry; -1 and NoDevFiles are the usual ways to hide all */
    for (const char *p = cvd; *p;) {
      size_t len = strcspn(p, ",");
      if (len == 0 || !strncmp(p, "-1", 2) || !strncmp(p, "NoDevFiles", len)) break;
      n++;
      p += len + (p[len] == ',');
    }
    snprintf(how, size, "CUDA_VISIBLE_DEVICES=%s", cvd);
    return n;
  }
  const char *dir = "/dev";
  int n = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    const char *s = e->d_name;
    if (strncmp(s, "nvidia", 6) || !s[6]) continue;
    int digits = 1;
    for (const char *c = s + 6; *c; c++) digits &= isdigit((unsigned char)*c) != 0;
    n += digits; /* nvidia0, nvidia1 ... (not nvidiactl, nvidia-uvm) */
  }
  if (d) closedir(d);
  snprintf(how, size, "CUDA_VISIBLE_DEVICES is unset and %s has %d nvidia<N> device nodes", dir, n);
  return n;
}

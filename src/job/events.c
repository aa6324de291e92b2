/* events.c - the agent's typed events through its membership pipe (events.h). */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "job/events.h"

_Static_assert(sizeof(cddp__agent_ev_t) <= PIPE_BUF, "an event is written atomically");

void cddp__agent_ev_send(int fd, const cddp__agent_ev_t *ev) {
  ssize_t w = write(fd, ev, sizeof *ev);
  (void)w; /* the reader is this process's main loop: a full pipe means it has enough to do */
}

void cddp__agent_ev_say(int fd, cddp__agent_ev_kind_t kind, int id, int n, int64_t value, const char *fmt, ...) {
  cddp__agent_ev_t ev = {.kind = kind, .id = id, .n = n, .value = value};
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ev.why, sizeof ev.why, fmt, ap);
    va_end(ap);
  }
  cddp__agent_ev_send(fd, &ev);
}

int cddp__agent_ev_recv(int fd, cddp__agent_ev_t *out, int max) {
  int k = 0;
  while (k < max) {
    /* whole events only: every write was one event, so the pipe holds a multiple of its size */
    ssize_t n = read(fd, &out[k], sizeof out[k]);
    if (n != (ssize_t)sizeof out[k]) break;
    if (out[k].kind < CDDP__AEV_LOST || out[k].kind > CDDP__AEV_STORE_MOVED) continue;
    out[k].why[sizeof out[k].why - 1] = '\0';
    k++;
  }
  return k;
}

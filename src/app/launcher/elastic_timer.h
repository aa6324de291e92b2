/* elastic_timer.h - the agent's side of torch.distributed.elastic.timer's FileTimerClient, as
 * torchrun's FileTimerServer: workers write one JSON request a line into a named pipe
 * (TORCHELASTIC_TIMER_FILE); a timer that expires names its worker, which is then killed. */
#ifndef CDDP_LAUNCHER_ELASTIC_TIMER_H
#define CDDP_LAUNCHER_ELASTIC_TIMER_H

#include <stddef.h>
#include <sys/types.h>

#define CDDP__ETIMER_LINE_MAX 4096 /* torch's client refuses a request over PIPE_BUF (4096) */
#define CDDP__ETIMER_MAX 1024      /* timers held at once; a request past that is dropped, said once */

typedef struct cddp__etimer_req {
  long long pid;
  char scope[128];        /* printable ASCII: a hostile scope cannot move the terminal */
  double expiration_time; /* wall clock (time.time()); < 0: release the scope */
  int signal;             /* <= 0: torch's "do not reap" */
} cddp__etimer_req_t;

typedef struct cddp__etimer cddp__etimer_t;

/* One request line (without its newline): 0, or -1 with one line in err. Never blocks. */
int cddp__etimer_parse(const char *line, size_t len, cddp__etimer_req_t *out, char *err, size_t errlen);

/* Makes the fifo path (mode 0600: a private folder's, or the user's own TORCHELASTIC_TIMER_FILE,
 * which torchrun keeps too) and opens it to read without blocking. A pipe of this user's already
 * there is made afresh; anything else there is refused. NULL with one line in cddp_last_error(). */
cddp__etimer_t *cddp__etimer_open(const char *path);
void cddp__etimer_close(cddp__etimer_t *t); /* NULL is fine; removes the fifo */
int cddp__etimer_fd(const cddp__etimer_t *t);

/* Reads what the pipe holds now and registers each request; a bad line is dropped with a
 * warning naming it. Never blocks. */
void cddp__etimer_read(cddp__etimer_t *t);

/* The earliest expiration time held (wall clock, s), or 0 when none. */
double cddp__etimer_next(const cddp__etimer_t *t);

/* One timer expired at now (wall clock, s): 1 with it in out (removed, with every other timer of
 * its pid), 0 when none has. */
int cddp__etimer_expired(cddp__etimer_t *t, double now, cddp__etimer_req_t *out);

/* Forgets the timers of pid (its worker exited: a reused pid must never be killed). */
void cddp__etimer_forget(cddp__etimer_t *t, pid_t pid);

#endif

/* sigguard.h - the agent's signals: SIGCHLD/SIGINT/SIGTERM/SIGHUP/SIGUSR1 arrive as bytes on a pipe, and a
 * guard thread ends the agent on a stop signal (INT, TERM, HUP) that comes while its main thread is
 * stuck in a blocking call (a store retry loop, a rendezvous wait) instead of in its own poll loop. */
#ifndef CDDP_LAUNCHER_SIGGUARD_H
#define CDDP_LAUNCHER_SIGGUARD_H

#include "cddp/cddp.h"
#include "launcher/workers.h"

/* How long a stop signal waits for the main thread to take it in its own loop (where it is
 * forwarded to the workers and posted to the other nodes) before the guard acts. */
#define CDDP__SIGGUARD_PATIENCE_MS 200

/* Installs handlers for the four signals (each writes its number, one byte, to a pipe), blocks
 * them in the calling thread (and so in every thread it starts later) and starts the guard, which
 * receives them. *sig_fd: the pipe's read end (non-blocking): one byte per signal. The guard starts
 * armed. host names this node in the guard's line. One per process. */
cddp_result_t cddp__sigguard_start(int grace_ms, const char *host, int *sig_fd);

/* The calling (main) thread reads sig_fd itself from now on (it enters its own poll loop); a stop
 * signal the guard took meanwhile is put back on the pipe for it. Does not block for long. */
void cddp__sigguard_hold(void);
/* ... and no longer: a stop signal that waits CDDP__SIGGUARD_PATIENCE_MS unread makes the guard
 * send it to the workers' process groups, SIGKILL them after grace_ms, print one line and _exit
 * with 128+signal. */
void cddp__sigguard_release(void);
/* The workers the guard stops when it acts (NULL: none). Set it to NULL before they are freed. */
void cddp__sigguard_workers(const cddp__workers_t *ws);

/* What the guard runs just before it ends the process itself (the agent's temporary folders:
 * an agent stopped while it waited on its peers leaves nothing in $TMPDIR). NULL: nothing. */
void cddp__sigguard_at_exit(void (*fn)(void *arg), void *arg);

/* The agent ends with code: waits for a guard that is acting (it ends the process), and turns a
 * stop signal that came since the agent last looked into one line and 128+signal. */
int cddp__sigguard_end(int code);

/* Reads one byte per signal from sig_fd (non-blocking): the first stop signal, 0 when only
 * SIGCHLD or SIGUSR1 (or nothing) was there. */
int cddp__sigguard_read(int sig_fd);
/* Whether a SIGUSR1 came since the last call (`kill -USR1` on the agent asks for the workers'
 * flight records, written at once; the workers go on). */
int cddp__sigguard_dump_asked(void);

#endif /* CDDP_LAUNCHER_SIGGUARD_H */

/* io.h - whole-buffer reads and writes on a blocking file or pipe: EINTR is retried here, once.
 * Sockets have theirs, with deadlines, in common/sock.h. And a process's state from /proc, and
 * the folder temporary folders go in. */
#ifndef CDDP_COMMON_IO_H
#define CDDP_COMMON_IO_H

#include <stddef.h>
#include <sys/types.h>

/* Writes all len bytes (write(2), in pieces of at most 1 GiB). 0, or -1 with errno set; a
 * descriptor that accepts nothing (write returns 0) fails with EIO. Blocks. */
int cddp__write_all(int fd, const void *buf, size_t len);
/* Reads until len bytes or end of file (read(2)). The bytes read (< len only at end of file),
 * or -1 with errno set. Blocks. */
ssize_t cddp__read_all(int fd, void *buf, size_t len);

/* A small file (a /proc entry) into buf, NUL-terminated, at most size - 1 bytes: its length, or -1
 * when it cannot be opened or is empty. */
ssize_t cddp__read_small(const char *path, char *buf, size_t size);
/* The state letter of process pid on this host, from /proc/PID/stat ('R', 'S', 'T': stopped,
 * 't': traced, 'Z': a zombie, dead but not yet reaped, ...), or 0 when there is none. */
char cddp__proc_state(pid_t pid);
/* 1 when process pid is stopped (SIGSTOP, a debugger): any of its threads shows 'T' or 't'. The
 * first letter alone can lag: a thread inside a long system call (D) stops only when it returns,
 * and a leader that called pthread_exit shows 'Z' while the rest of the process runs or stops. */
int cddp__proc_stopped(pid_t pid);
/* Opens path for reading when it is a regular file, never blocking on a FIFO or a device: for a
 * file another process wrote, in a folder that may hold anything. The descriptor (O_CLOEXEC), or
 * -1 with errno (EINVAL: not a regular file). */
int cddp__open_regular(const char *path);
/* Makes s (NUL-terminated) safe to print: a control byte (an escape sequence) or a byte outside
 * ASCII becomes '?'. For text read from the store or another process's file. */
void cddp__printable(char *s);
/* The folder for this process's private temporary folders: $TMPDIR when it names a folder it can
 * write into, else /tmp, as Python's tempfile does; an unusable $TMPDIR is warned of once. A
 * missing one must not quietly turn off what lives there (the watchdog's flight pages). */
const char *cddp__tmp_base(void);

#endif /* CDDP_COMMON_IO_H */

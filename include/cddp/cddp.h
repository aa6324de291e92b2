/* cddp.h - public entry point of libcddp: result codes, errors, version, environment bootstrap. */
#ifndef CDDP_CDDP_H
#define CDDP_CDDP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
/* what this header declares is libcddp's API: exported from libcddp.so, which hides the rest */
#pragma GCC visibility push(default)

/* the Makefile's VERSION (the soname, cddp.pc); make refuses to build when these differ */
#define CDDP_VERSION_MAJOR 0
#define CDDP_VERSION_MINOR 2
#define CDDP_VERSION_PATCH 0
#define CDDP_VERSION_STRING "0.2.0"

/* One result type for the whole library. The comment says how a caller recovers.
 * REMOTE, TIMEOUT and ABORTED on a communicator mean: abort it, join the next
 * rendezvous round and build a new one (elastic re-forming). */
#define CDDP_RESULT_MAP(X)                                                          \
  X(OK, 0, "success")                                                               \
  X(SYSTEM, 1, "system call failed (see errno text in the message)")                \
  X(INTERNAL, 2, "internal error (a bug in cddp)")                                  \
  X(INVALID_ARG, 3, "invalid argument")                                             \
  X(INVALID_USAGE, 4, "invalid usage (wrong order of calls, feature not built)")    \
  X(REMOTE, 5, "a remote peer failed or closed the connection (re-form the comm)")  \
  X(TIMEOUT, 6, "timed out (re-form the comm, or retry later)")                     \
  X(ABORTED, 7, "aborted (re-form the comm)")                                       \
  X(NOT_FOUND, 8, "not found")                                                      \
  X(AUTH, 9, "authentication failed (wrong or missing CDDP_TOKEN)")

typedef enum cddp_result {
#define CDDP_RESULT_ENUM(name, val, text) CDDP_##name = val,
  CDDP_RESULT_MAP(CDDP_RESULT_ENUM)
#undef CDDP_RESULT_ENUM
  CDDP_RESULT_COUNT
} cddp_result_t;

/* Short name ("TIMEOUT") and description of a result code. Never NULL. */
const char *cddp_result_name(cddp_result_t r);
const char *cddp_strerror(cddp_result_t r);

/* One line of detail about the last error raised on the calling thread, e.g.
 * "recv from rank 1 (host vm): connection closed". Empty string when none.
 * The pointer stays valid until the thread's next failing cddp call. */
const char *cddp_last_error(void);

const char *cddp_version(void);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif

#endif /* CDDP_CDDP_H */

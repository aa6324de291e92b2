/* log.c - formats "[seconds] host:pid [rank] CDDP LEVEL SUB file:line message" lines on stderr. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common/knobs.h"
#include "common/log.h"
#include "common/launcher.h" /* the rank a launcher gave: one decision, common/launcher.c */

int cddp__log_level = -1;
unsigned cddp__log_subsys = CDDP_SUB_ALL;
static int log_rank = -1;
static int log_time; /* CDDP_DEBUG_TIMESTAMP */
static char log_host[64];
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static unsigned subsys_bit(const char *name, size_t len) {
#define CDDP_SUBSYS_MATCH(n, bit) \
  if (len == strlen(#n) && strncasecmp(name, #n, len) == 0) return 1u << (bit);
  CDDP_SUBSYS_MAP(CDDP_SUBSYS_MATCH)
#undef CDDP_SUBSYS_MATCH
  if (len == 3 && strncasecmp(name, "ALL", 3) == 0) return CDDP_SUB_ALL;
  return 0;
}

static const char *subsys_name(unsigned sub) {
#define CDDP_SUBSYS_NAME(n, bit) \
  if (sub == (1u << (bit))) return #n;
  CDDP_SUBSYS_MAP(CDDP_SUBSYS_NAME)
#undef CDDP_SUBSYS_NAME
  return "ALL";
}

/* NCCL_DEBUG_SUBSYS names cddp has no subsystem of its own for: their nearest, or 0 (ignored:
 * they mean something to NCCL only). */
static unsigned nccl_subsys_bit(const char *name, size_t len) {
  static const struct { const char *nccl; unsigned bits; } map[] = {
      {"COLL", CDDP_SUB_COMM}, {"P2P", CDDP_SUB_COMM}, {"BOOTSTRAP", CDDP_SUB_STORE | CDDP_SUB_RDZV}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (len == strlen(map[i].nccl) && strncasecmp(name, map[i].nccl, len) == 0) return map[i].bits;
  return subsys_bit(name, len);
}

static void init_once(void) {
  const char *lvl = cddp__knob_str(CDDP_KNOB_DEBUG), *lvl_src = cddp__knob_source(CDDP_KNOB_DEBUG);
  int nccl_level = lvl_src && strcmp(lvl_src, cddp__knob_var(CDDP_KNOB_DEBUG));
  int level = CDDP_LOG_WARN;
  if (strcasecmp(lvl, "INFO") == 0) level = CDDP_LOG_INFO;
  else if (strcasecmp(lvl, "TRACE") == 0) level = CDDP_LOG_TRACE;
  else if (strcasecmp(lvl, "NONE") == 0 || strcasecmp(lvl, "OFF") == 0) level = CDDP_LOG_NONE;
  else if (nccl_level && strcasecmp(lvl, "VERSION") == 0) level = CDDP_LOG_WARN;
  else if (strcasecmp(lvl, "WARN") != 0 && lvl[0])
    fprintf(stderr, "cddp: %s=%s is not one of WARN, INFO, TRACE, NONE; using WARN\n", lvl_src, lvl);

  const char *subs = cddp__knob_str(CDDP_KNOB_DEBUG_SUBSYS), *subs_src = cddp__knob_source(CDDP_KNOB_DEBUG_SUBSYS);
  int nccl_subs = subs_src && strcmp(subs_src, cddp__knob_var(CDDP_KNOB_DEBUG_SUBSYS));
  unsigned mask = CDDP_SUB_ALL;
  if (subs[0]) {
    int exclude = subs[0] == '^';
    mask = exclude ? CDDP_SUB_ALL : 0;
    const char *p = subs + exclude;
    while (*p) {
      size_t len = strcspn(p, ",");
      unsigned bit = nccl_subs ? nccl_subsys_bit(p, len) : subsys_bit(p, len);
      if (!bit && len && !nccl_subs) fprintf(stderr, "cddp: CDDP_DEBUG_SUBSYS names unknown subsystem '%.*s'\n", (int)len, p);
      mask = exclude ? (mask & ~bit) : (mask | bit);
      p += len + (p[len] == ',');
    }
  }
  if (gethostname(log_host, sizeof log_host) != 0) strcpy(log_host, "?");
  log_host[sizeof log_host - 1] = '\0';
  if (log_rank < 0) log_rank = cddp__launcher_rank(environ); /* until cddp_env_read says */
  log_time = cddp__knob_int(CDDP_KNOB_DEBUG_TIMESTAMP) != 0;
  cddp__log_subsys = mask;
  __atomic_store_n(&cddp__log_level, level, __ATOMIC_RELEASE);
  /* said where a user of NCCL looks: the settings they gave NCCL steer cddp's logs too */
  if (nccl_level) CDDP_INFO(CDDP_SUB_ENV, "log level from %s=%s (CDDP_DEBUG is unset)", lvl_src, lvl);
  if (nccl_subs) CDDP_INFO(CDDP_SUB_ENV, "subsystems from %s=%s (CDDP_DEBUG_SUBSYS is unset)", subs_src, subs);
}

void cddp__log_init(void) { pthread_once(&log_once, init_once); }

void cddp__log_set_rank(int rank) { log_rank = rank; }

void cddp__log(int level, unsigned sub, const char *file, int line, const char *fmt, ...) {
  static const char *names[] = {"NONE", "WARN", "INFO", "TRACE"};
  char msg[1024], when[32] = "";
  int n;
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  if (log_time) { /* the wall clock: the one an agent and its workers (and torch's own lines) share */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(when, sizeof when, "%lld.%06ld ", (long long)ts.tv_sec, ts.tv_nsec / 1000);
  }
  if (log_rank >= 0)
    n = snprintf(msg, sizeof msg, "%s%s:%d [%d] CDDP %s %s %s:%d ", when, log_host, (int)getpid(), log_rank,
                 names[level], subsys_name(sub), base, line);
  else
    n = snprintf(msg, sizeof msg, "%s%s:%d CDDP %s %s %s:%d ", when, log_host, (int)getpid(), names[level],
                 subsys_name(sub), base, line);
  if (n < 0 || (size_t)n >= sizeof msg) n = 0;
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(msg + n, sizeof msg - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t room = sizeof msg - (size_t)n - 2;
  size_t len = (size_t)n + (m < 0 ? 0 : ((size_t)m < room ? (size_t)m : room));
  msg[len++] = '\n';
  /* one write() per line so lines of concurrent threads and processes don't interleave */
  ssize_t w = write(STDERR_FILENO, msg, len);
  (void)w;
}

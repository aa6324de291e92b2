/* log.h - one log facility: levels and subsystems switched on from CDDP_DEBUG / CDDP_DEBUG_SUBSYS. */
#ifndef CDDP_COMMON_LOG_H
#define CDDP_COMMON_LOG_H

enum cddp_log_level { CDDP_LOG_NONE = 0, CDDP_LOG_WARN = 1, CDDP_LOG_INFO = 2, CDDP_LOG_TRACE = 3 };

/* Subsystems, one bit each; CDDP_DEBUG_SUBSYS=STORE,COMM (or ^STORE to exclude, ALL). */
#define CDDP_SUBSYS_MAP(X) \
  X(INIT, 0) X(STORE, 1) X(RDZV, 2) X(RUN, 3) X(COMM, 4) X(SHM, 5) X(NET, 6) X(BENCH, 7) \
  X(ERR, 8) X(ENV, 9) X(TRAIN, 10) X(DDP, 11)
enum cddp_log_subsys {
#define CDDP_SUBSYS_ENUM(name, bit) CDDP_SUB_##name = 1u << (bit),
  CDDP_SUBSYS_MAP(CDDP_SUBSYS_ENUM)
#undef CDDP_SUBSYS_ENUM
  CDDP_SUB_ALL = ~0u
};

extern int cddp__log_level;        /* -1 until initialised from the environment */
extern unsigned cddp__log_subsys;  /* enabled subsystems for INFO/TRACE */
void cddp__log_init(void);
void cddp__log(int level, unsigned sub, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Rank shown in every line's prefix ("host:pid [rank]"); -1 hides it. */
void cddp__log_set_rank(int rank);

static inline int cddp__log_enabled(int level, unsigned sub) {
  int current = __atomic_load_n(&cddp__log_level, __ATOMIC_ACQUIRE);
  if (__builtin_expect(current < 0, 0)) {
    cddp__log_init();
    current = __atomic_load_n(&cddp__log_level, __ATOMIC_ACQUIRE);
  }
  return level <= current && (level == CDDP_LOG_WARN || (sub & cddp__log_subsys));
}

/* The level is checked before the arguments are evaluated. */
#define CDDP_WARN(...)                                                          \
  do {                                                                          \
    if (cddp__log_enabled(CDDP_LOG_WARN, CDDP_SUB_ALL))                         \
      cddp__log(CDDP_LOG_WARN, CDDP_SUB_ALL, __FILE__, __LINE__, __VA_ARGS__);  \
  } while (0)
#define CDDP_INFO(sub, ...)                                                     \
  do {                                                                          \
    if (cddp__log_enabled(CDDP_LOG_INFO, (sub)))                                \
      cddp__log(CDDP_LOG_INFO, (sub), __FILE__, __LINE__, __VA_ARGS__);         \
  } while (0)
#define CDDP_TRACE(sub, ...)                                                    \
  do {                                                                          \
    if (cddp__log_enabled(CDDP_LOG_TRACE, (sub)))                               \
      cddp__log(CDDP_LOG_TRACE, (sub), __FILE__, __LINE__, __VA_ARGS__);        \
  } while (0)

#endif /* CDDP_COMMON_LOG_H */

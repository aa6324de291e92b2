/* layer_blas.c - makes OpenBLAS use this CPU's vector units: its DYNAMIC_ARCH build (0.3.21)
 * does not recognise newer Xeons and falls back to Prescott (SSE3) kernels, 4-5x slower. */
#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/cpu.h"
#include "common/log.h"
#include "trainer/layers.h"

/* OpenBLAS DYNAMIC_ARCH internals (exported by libopenblas): the core table is chosen in
 * gotoblas_dynamic_init() from OPENBLAS_CORETYPE or CPUID. Weak, so that a BLAS without them
 * still links (then nothing is changed). */
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));

static pthread_once_t once = PTHREAD_ONCE_INIT;

static int is_one_of(const char *name, const char *const *list) {
  for (; *list; list++)
    if (strcasecmp(name, *list) == 0) return 1;
  return 0;
}

static void select_core(void) {
  const char *env = getenv("OPENBLAS_CORETYPE");
  const char *have = openblas_get_corename();
  if (env && *env) return; /* the user chose */
  if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit || !have) return;
  static const char *const avx512_cores[] = {"skylakex", "cooperlake", "sapphirerapids", NULL};
  static const char *const avx2_cores[] = {"haswell",  "skylakex", "cooperlake", "sapphirerapids",
                                           "zen",      NULL};
  const char *want = NULL;
  if (cddp__cpu_has(CDDP_CPU_AVX512F | CDDP_CPU_AVX512BW | CDDP_CPU_AVX512VL | CDDP_CPU_AVX512DQ)) {
    if (!is_one_of(have, avx512_cores)) want = "SkylakeX";
  } else if (cddp__cpu_has(CDDP_CPU_AVX2 | CDDP_CPU_FMA)) {
    if (!is_one_of(have, avx2_cores)) want = "Haswell";
  }
  if (!want) return;
  /* Re-run OpenBLAS's own selection with the type forced, then restore the environment so
   * child processes detect for themselves. */
  setenv("OPENBLAS_CORETYPE", want, 1);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
  CDDP_INFO(CDDP_SUB_TRAIN, "OpenBLAS detected core %s; switched to %s kernels", have,
            openblas_get_corename());
}

void cddp__blas_select_core(void) { pthread_once(&once, select_core); }

/* At load, before main: setenv must not race another thread's getenv, and no thread exists
 * yet (libopenblas, a dependency, is initialised before us). Any program that links the model
 * gets the right kernels even for BLAS calls made before cddp__model_create. */
__attribute__((constructor)) static void select_at_load(void) { cddp__blas_select_core(); }

/* vwidths.h - compiles the kernel body header named by VBODY once per vector width: AVX-512
 * (suffix _avx512), AVX2+FMA (_avx2) and SSE (_sse), each with its target attribute, so one
 * source gives every width and the caller picks at run time. Before including it:
 *   #define VBODY "trainer/layer_x_body.h"
 * The body sees VF (its float vector type), W (lanes), ATTR, and NAME(fn, SFX) for its names. */
#include "trainer/vmath.h"

#ifndef CDDP_TRAIN_VWIDTHS_TYPES
#define CDDP_TRAIN_VWIDTHS_TYPES
#define NAME2(a, b) a##_##b
#define NAME(a, b) NAME2(a, b)
typedef float v16f __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
#endif

#define VF v16f
#define W 16
#define SFX avx512
#define ATTR __attribute__((target("avx512f")))
#include VBODY
#undef VF
#undef W
#undef SFX
#undef ATTR

#define VF v8f
#define W 8
#define SFX avx2
#define ATTR __attribute__((target("avx2,fma")))
#include VBODY
#undef VF
#undef W
#undef SFX
#undef ATTR

#define VF cddp_v4f
#define W 4
#define SFX sse
#define ATTR
#include VBODY
#undef VF
#undef W
#undef SFX
#undef ATTR
#undef VBODY

/* nccl.c - the nccl backend: every collective is NCCL's on device buffers, enqueued on a
 * stream (the caller's, cddp__nccl_use_stream, or the backend's own) and polled to the end so
 * that cddp's timeout and abort still hold: either one calls ncclCommAbort. NCCL and the CUDA
 * driver are loaded with dlopen, so cddp runs where neither is installed and refuses the
 * backend in one line saying what is missing. Without NCCL's header at build time
 * (CDDP_HAVE_NCCL 0) only the "not built" error. Run at world size 1 on one H100; two ranks
 * not yet (docs/gpu.md). */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/nccl.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/log.h"

#if !CDDP_HAVE_NCCL

cddp_result_t cddp__nccl_available(void) {
  return cddp__fail(CDDP_INVALID_USAGE,
                    "backend 'nccl' is not built into this cddp (no CUDA toolkit with NCCL at build time, or "
                    "NO_CUDA=1; docs/gpu.md)");
}
static cddp_result_t unbuilt_init(const cddp__comm_ctx_t *ctx, void **state) {
  *state = NULL;
  return cddp__nccl_available();
}
static cddp_result_t unbuilt_run(void *state, const cddp__coll_t *coll) { return cddp__nccl_available(); }
static void unbuilt_destroy(void *state) {}
void cddp__nccl_use_stream(void *state, void *stream) {}

const cddp__transport_t cddp__transport_nccl = {
    .name = "nccl", .init = unbuilt_init, .run = unbuilt_run, .destroy = unbuilt_destroy};

#else /* CDDP_HAVE_NCCL */

#include <cuda.h>
#include <dlfcn.h>
#include <nccl.h>

_Static_assert(sizeof(ncclUniqueId) == CDDP__NCCL_ID_BYTES, "NCCL's unique id size");

/* The driver's and NCCL's entry points, typed by their headers. */
static struct {
  int loaded;
  char why[320];
  int version;
  __typeof__(&cuInit) Init;
  __typeof__(&cuDeviceGetCount) DeviceGetCount;
  __typeof__(&cuDeviceGet) DeviceGet;
  __typeof__(&cuDeviceGetName) DeviceGetName;
  __typeof__(&cuDeviceGetPCIBusId) DeviceGetPCIBusId;
  __typeof__(&cuDevicePrimaryCtxRetain) PrimaryCtxRetain;
  __typeof__(&cuDevicePrimaryCtxRelease) PrimaryCtxRelease;
  __typeof__(&cuCtxGetCurrent) CtxGetCurrent;
  __typeof__(&cuCtxSetCurrent) CtxSetCurrent;
  __typeof__(&cuCtxGetDevice) CtxGetDevice;
  __typeof__(&cuStreamCreate) StreamCreate;
  __typeof__(&cuStreamQuery) StreamQuery;
  __typeof__(&cuStreamDestroy) StreamDestroy;
  __typeof__(&cuMemAlloc) MemAlloc;
  __typeof__(&cuMemFree) MemFree;
  __typeof__(&cuMemcpyDtoDAsync) MemcpyDtoDAsync;
  __typeof__(&cuGetErrorString) GetErrorString;
  __typeof__(&ncclGetVersion) GetVersion;
  __typeof__(&ncclGetUniqueId) GetUniqueId;
  __typeof__(&ncclCommInitRankConfig) CommInitRankConfig;
  __typeof__(&ncclCommGetAsyncError) CommGetAsyncError;
  __typeof__(&ncclCommFinalize) CommFinalize;
  __typeof__(&ncclCommDestroy) CommDestroy;
  __typeof__(&ncclCommAbort) CommAbort;
  __typeof__(&ncclGetErrorString) GetErrorString_;
  __typeof__(&ncclGetLastError) GetLastError;
  __typeof__(&ncclAllReduce) AllReduce;
  __typeof__(&ncclReduceScatter) ReduceScatter;
  __typeof__(&ncclAllGather) AllGather;
  __typeof__(&ncclBroadcast) Broadcast;
} L;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void *open_lib(const char *name) {
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", CDDP_CUDA_LIBDIR, name);
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  return h;
}

static const char *cu_text(CUresult r) {
  const char *s = NULL;
  return L.GetErrorString && L.GetErrorString(r, &s) == CUDA_SUCCESS && s ? s : "unknown CUDA error";
}

#define SYM(lib, field, name)                                                          \
  if (!(*(void **)&L.field = dlsym(lib, name))) {                                      \
    snprintf(L.why, sizeof L.why, "cannot run: %s lacks %s", #lib, name);              \
    return;                                                                            \
  }

/* Driver first (no GPU is the usual reason), then NCCL. */
static void load(void) {
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cuda) {
    snprintf(L.why, sizeof L.why, "needs a GPU: no NVIDIA driver (libcuda.so.1 not found)");
    return;
  }
  SYM(cuda, Init, "cuInit");
  SYM(cuda, GetErrorString, "cuGetErrorString");
  SYM(cuda, DeviceGetCount, "cuDeviceGetCount");
  SYM(cuda, DeviceGet, "cuDeviceGet");
  SYM(cuda, DeviceGetName, "cuDeviceGetName");
  SYM(cuda, DeviceGetPCIBusId, "cuDeviceGetPCIBusId");
  SYM(cuda, PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  SYM(cuda, PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  SYM(cuda, CtxGetCurrent, "cuCtxGetCurrent");
  SYM(cuda, CtxSetCurrent, "cuCtxSetCurrent");
  SYM(cuda, CtxGetDevice, "cuCtxGetDevice");
  SYM(cuda, StreamCreate, "cuStreamCreate");
  SYM(cuda, StreamQuery, "cuStreamQuery");
  SYM(cuda, StreamDestroy, "cuStreamDestroy_v2");
  SYM(cuda, MemAlloc, "cuMemAlloc_v2");
  SYM(cuda, MemFree, "cuMemFree_v2");
  SYM(cuda, MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  CUresult r = L.Init(0);
  int n = 0;
  if (r == CUDA_SUCCESS) r = L.DeviceGetCount(&n);
  if (r == CUDA_ERROR_NO_DEVICE || (r == CUDA_SUCCESS && n == 0)) {
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    snprintf(L.why, sizeof L.why, "needs a GPU: none is visible%s%.40s%s", cvd ? " (CUDA_VISIBLE_DEVICES='" : "",
             cvd ? cvd : "", cvd ? "')" : "");
    return;
  }
  if (r != CUDA_SUCCESS) {
    snprintf(L.why, sizeof L.why, "needs a GPU: the NVIDIA driver failed: %s", cu_text(r));
    return;
  }
  void *nccl = open_lib("libnccl.so.2");
  if (!nccl) {
    snprintf(L.why, sizeof L.why, "needs NCCL: libnccl.so.2 not found (nor in %s)", CDDP_CUDA_LIBDIR);
    return;
  }
  SYM(nccl, GetVersion, "ncclGetVersion");
  SYM(nccl, GetUniqueId, "ncclGetUniqueId");
  SYM(nccl, CommInitRankConfig, "ncclCommInitRankConfig");
  SYM(nccl, CommGetAsyncError, "ncclCommGetAsyncError");
  SYM(nccl, CommFinalize, "ncclCommFinalize");
  SYM(nccl, CommDestroy, "ncclCommDestroy");
  SYM(nccl, CommAbort, "ncclCommAbort");
  SYM(nccl, GetErrorString_, "ncclGetErrorString");
  SYM(nccl, GetLastError, "ncclGetLastError");
  SYM(nccl, AllReduce, "ncclAllReduce");
  SYM(nccl, ReduceScatter, "ncclReduceScatter");
  SYM(nccl, AllGather, "ncclAllGather");
  SYM(nccl, Broadcast, "ncclBroadcast");
  L.GetVersion(&L.version);
  L.loaded = 1;
}
#undef SYM

cddp_result_t cddp__nccl_available(void) {
  pthread_once(&load_once, load);
  return L.loaded ? CDDP_OK : cddp__fail(CDDP_INVALID_USAGE, "backend 'nccl' %s", L.why);
}

typedef struct nccl_state {
  const cddp__comm_ctx_t *ctx;
  CUcontext cuctx;
  CUdevice dev;
  int retained; /* we retained the primary context (no context was current at init) */
  CUstream own, stream;
  ncclComm_t comm;
  int failed; /* a collective failed, timed out or was aborted: the comm was aborted */
  CUdeviceptr stage;
  size_t stage_bytes;
} nccl_state_t;

static void abort_comm(nccl_state_t *s) {
  s->failed = 1;
  if (s->comm) L.CommAbort(s->comm);
  s->comm = NULL;
}

static cddp_result_t nccl_fail(nccl_state_t *s, ncclResult_t r, const char *what) {
  const char *last = s->comm && L.GetLastError ? L.GetLastError(s->comm) : "";
  char msg[200];
  snprintf(msg, sizeof msg, "%s%s%.150s", L.GetErrorString_(r), last && last[0] ? ": " : "", last ? last : "");
  abort_comm(s);
  return cddp__fail(CDDP_REMOTE, "backend nccl: rank %d: %s failed: %s", s->ctx->rank, what, msg);
}

/* Until the communicator is ready (init) or the stream has run the collective too. */
static cddp_result_t wait_done(nccl_state_t *s, uint64_t deadline, const char *what, int stream_too) {
  for (unsigned long it = 0;; it++) {
    ncclResult_t a = ncclSuccess;
    ncclResult_t q = L.CommGetAsyncError(s->comm, &a);
    if (q != ncclSuccess) return nccl_fail(s, q, what);
    if (a != ncclSuccess && a != ncclInProgress) return nccl_fail(s, a, what);
    if (a == ncclSuccess) {
      if (!stream_too) return CDDP_OK;
      CUresult c = L.StreamQuery(s->stream);
      if (c == CUDA_SUCCESS) return CDDP_OK;
      if (c != CUDA_ERROR_NOT_READY) {
        abort_comm(s);
        return cddp__fail(CDDP_REMOTE, "backend nccl: rank %d: %s: the stream failed: %s", s->ctx->rank, what,
                          cu_text(c));
      }
    }
    if (cddp__aborted(s->ctx)) {
      abort_comm(s);
      return cddp__fail(CDDP_ABORTED, "backend nccl: rank %d: %s aborted (ncclCommAbort called)", s->ctx->rank, what);
    }
    if (cddp__now_coarse_ns() > deadline) {
      abort_comm(s);
      return cddp__fail(CDDP_TIMEOUT,
                        "backend nccl: rank %d of %d: %s did not complete within %d ms (NCCL does not say which "
                        "peer is late; CDDP_TIMEOUT_MS); ncclCommAbort called",
                        s->ctx->rank, s->ctx->world, what, s->ctx->cfg->timeout_ms);
    }
    if (it > 2000) usleep(50); /* a long collective: stop spinning */
    else sched_yield();
  }
}

static cddp_result_t make_id(void *arg, unsigned char id[CDDP__NCCL_ID_BYTES]) {
  ncclUniqueId u;
  ncclResult_t r = L.GetUniqueId(&u);
  if (r != ncclSuccess) return cddp__fail(CDDP_SYSTEM, "backend nccl: ncclGetUniqueId failed: %s", L.GetErrorString_(r));
  memcpy(id, &u, sizeof u);
  return CDDP_OK;
}

/* The device: the calling thread's current context (the trainer bound its GPU), else the
 * primary context of GPU LOCAL_RANK modulo the visible ones. */
static cddp_result_t pick_device(nccl_state_t *s) {
  CUcontext cur = NULL;
  if (L.CtxGetCurrent(&cur) == CUDA_SUCCESS && cur) {
    s->cuctx = cur;
    return L.CtxGetDevice(&s->dev) == CUDA_SUCCESS ? CDDP_OK
                                                    : cddp__fail(CDDP_SYSTEM, "backend nccl: cuCtxGetDevice failed");
  }
  int n = 0;
  const char *lr = getenv("LOCAL_RANK");
  L.DeviceGetCount(&n);
  int ordinal = (lr ? atoi(lr) : 0) % (n > 0 ? n : 1);
  CUresult r = L.DeviceGet(&s->dev, ordinal);
  if (r == CUDA_SUCCESS) r = L.PrimaryCtxRetain(&s->cuctx, s->dev);
  if (r == CUDA_SUCCESS) s->retained = 1, r = L.CtxSetCurrent(s->cuctx);
  return r == CUDA_SUCCESS ? CDDP_OK
                           : cddp__fail(CDDP_SYSTEM, "backend nccl: CUDA device %d: %s", ordinal, cu_text(r));
}

static void nccl_destroy(void *state);

static cddp_result_t nccl_init(const cddp__comm_ctx_t *ctx, void **out) {
  *out = NULL;
  CDDP_CHECK(cddp__nccl_available());
  nccl_state_t *s = calloc(1, sizeof *s);
  if (!s) return cddp__fail(CDDP_SYSTEM, "backend nccl: out of memory");
  s->ctx = ctx;
  cddp_result_t ret = pick_device(s);
  char bus[32] = "?", name[96] = "?";
  if (ret == CDDP_OK) {
    L.DeviceGetPCIBusId(bus, sizeof bus, s->dev);
    L.DeviceGetName(name, sizeof name, s->dev);
    CUresult r = L.StreamCreate(&s->own, CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS) ret = cddp__fail(CDDP_SYSTEM, "backend nccl: cuStreamCreate: %s", cu_text(r));
    s->stream = s->own;
  }
  unsigned char id[CDDP__NCCL_ID_BYTES];
  if (ret == CDDP_OK) ret = cddp__nccl_rendezvous(ctx, bus, make_id, NULL, id);
  if (ret == CDDP_OK) {
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* init and every call return at once: cddp polls, bounded by its timeout */
    ncclResult_t r = L.CommInitRankConfig(&s->comm, ctx->world, uid, ctx->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) ret = nccl_fail(s, r, "ncclCommInitRankConfig");
    else ret = wait_done(s, cddp__deadline_ms(ctx->cfg->timeout_ms), "ncclCommInitRankConfig", 0);
  }
  if (ret != CDDP_OK) {
    nccl_destroy(s);
    return ret;
  }
  CDDP_INFO(CDDP_SUB_COMM,
            "backend nccl: NCCL %d.%d.%d, rank %d of %d on GPU %s (%s); NCCL_DEBUG=INFO shows the transports "
            "NCCL chose",
            L.version / 10000, L.version / 100 % 100, L.version % 100, ctx->rank, ctx->world, bus, name);
  *out = s;
  return CDDP_OK;
}

static ncclDataType_t nccl_type(cddp_dtype_t dt) {
  switch (dt) {
    case CDDP_F64: return ncclFloat64;
    case CDDP_BF16: return ncclBfloat16;
    case CDDP_I32: return ncclInt32;
    case CDDP_I64: return ncclInt64;
    case CDDP_F16: return ncclFloat16;
    default: return ncclFloat32;
  }
}

static ncclRedOp_t nccl_op(cddp_redop_t op) {
  switch (op) {
    case CDDP_AVG: return ncclAvg;
    case CDDP_MAX: return ncclMax;
    case CDDP_MIN: return ncclMin;
    default: return ncclSum;
  }
}

/* The backend's device buffer of at least bytes (grown, kept): NULL with *ret set when the
 * GPU has no room. */
static void *stage(nccl_state_t *s, size_t bytes, cddp_result_t *ret) {
  if (s->stage_bytes < bytes) {
    if (s->stage) L.MemFree(s->stage);
    s->stage = 0, s->stage_bytes = 0;
    CUresult r = L.MemAlloc(&s->stage, bytes);
    if (r != CUDA_SUCCESS) {
      s->stage = 0;
      *ret = cddp__fail(CDDP_SYSTEM, "backend nccl: cannot stage %zu bytes on the GPU: %s", bytes, cu_text(r));
      return NULL;
    }
    s->stage_bytes = bytes;
  }
  return (void *)(uintptr_t)s->stage;
}

/* A device copy of send, for cddp's in-place forms NCCL does not have (cddp: send == recv,
 * NCCL: the rank's block inside recv). */
static const void *staged(nccl_state_t *s, const void *send, size_t bytes, cddp_result_t *ret) {
  void *d = stage(s, bytes, ret);
  if (!d) return NULL;
  CUresult r = L.MemcpyDtoDAsync((CUdeviceptr)(uintptr_t)d, (CUdeviceptr)(uintptr_t)send, bytes, s->stream);
  if (r == CUDA_SUCCESS) return d;
  *ret = cddp__fail(CDDP_SYSTEM, "backend nccl: staging copy: %s", cu_text(r));
  return NULL;
}

static int overlaps(const void *a, size_t an, const void *b, size_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + bn && y < x + an;
}

static cddp_result_t nccl_run(void *state, const cddp__coll_t *c) {
  nccl_state_t *s = state;
  if (s->failed || !s->comm)
    return cddp__fail(CDDP_REMOTE, "backend nccl: rank %d: the communicator failed before", s->ctx->rank);
  L.CtxSetCurrent(s->cuctx); /* the progress thread, too */
  const size_t es = cddp_dtype_size(c->dt), W = (size_t)s->ctx->world, me = (size_t)s->ctx->rank;
  const ncclDataType_t dt = nccl_type(c->dt);
  const void *send = c->send;
  cddp_result_t ret = CDDP_OK;
  ncclResult_t r = ncclSuccess;
  const char *what = "ncclAllReduce";
  switch (c->kind) {
    case CDDP__ALLREDUCE:
      r = L.AllReduce(send, c->recv, c->count, dt, nccl_op(c->op), s->comm, s->stream);
      break;
    case CDDP__REDUCE_SCATTER:
      what = "ncclReduceScatter";
      if (overlaps(send, W * c->count * es, c->recv, c->count * es) && c->recv != (const char *)send + me * c->count * es)
        send = staged(s, send, W * c->count * es, &ret);
      if (send) r = L.ReduceScatter(send, c->recv, c->count, dt, nccl_op(c->op), s->comm, s->stream);
      break;
    case CDDP__ALLGATHER:
      what = "ncclAllGather";
      if (overlaps(send, c->count * es, c->recv, W * c->count * es) && send != (const char *)c->recv + me * c->count * es)
        send = staged(s, send, c->count * es, &ret);
      if (send) r = L.AllGather(send, c->recv, c->count, dt, s->comm, s->stream);
      break;
    case CDDP__BROADCAST:
      what = "ncclBroadcast";
      r = L.Broadcast(c->recv, c->recv, c->count, dt, c->root, s->comm, s->stream);
      break;
    case CDDP__BARRIER: { /* NCCL has none: a one-float all-reduce on the staging buffer */
      what = "barrier (ncclAllReduce of one float)";
      void *one = stage(s, sizeof(float), &ret);
      if (one) r = L.AllReduce(one, one, 1, ncclFloat32, ncclSum, s->comm, s->stream);
      break;
    }
  }
  if (ret != CDDP_OK) return ret;
  if (r != ncclSuccess && r != ncclInProgress) return nccl_fail(s, r, what);
  return wait_done(s, c->deadline, what, 1);
}

static void nccl_destroy(void *state) {
  nccl_state_t *s = state;
  if (!s) return;
  if (s->cuctx) L.CtxSetCurrent(s->cuctx);
  if (s->comm && !s->failed && !cddp__aborted(s->ctx)) {
    /* finalize flushes what was issued (bounded like a collective), then destroy */
    ncclResult_t f = L.CommFinalize(s->comm);
    if ((f == ncclSuccess || f == ncclInProgress) &&
        wait_done(s, cddp__deadline_ms(s->ctx->cfg->timeout_ms), "ncclCommFinalize", 0) == CDDP_OK) {
      L.CommDestroy(s->comm);
      s->comm = NULL;
    }
  }
  if (s->comm) abort_comm(s);
  if (s->stage) L.MemFree(s->stage);
  if (s->own) L.StreamDestroy(s->own);
  if (s->retained) L.PrimaryCtxRelease(s->dev);
  free(s);
}

static cddp_result_t nccl_mem_alloc(void *state, size_t bytes, void **ptr) {
  nccl_state_t *s = state;
  CUdeviceptr p = 0;
  L.CtxSetCurrent(s->cuctx);
  CUresult r = L.MemAlloc(&p, bytes ? bytes : 1);
  if (r != CUDA_SUCCESS) return cddp__fail(CDDP_SYSTEM, "backend nccl: cannot allocate %zu bytes on the GPU: %s", bytes, cu_text(r));
  *ptr = (void *)(uintptr_t)p;
  return CDDP_OK;
}

static cddp_result_t nccl_mem_free(void *state, void *ptr) {
  nccl_state_t *s = state;
  L.CtxSetCurrent(s->cuctx);
  CUresult r = L.MemFree((CUdeviceptr)(uintptr_t)ptr);
  return r == CUDA_SUCCESS ? CDDP_OK : cddp__fail(CDDP_SYSTEM, "backend nccl: cuMemFree: %s", cu_text(r));
}

void cddp__nccl_use_stream(void *state, void *stream) {
  nccl_state_t *s = state;
  if (s) s->stream = stream ? (CUstream)stream : s->own;
}

/* wake: none needed, run() polls *aborted between its looks at the stream */
const cddp__transport_t cddp__transport_nccl = {.name = "nccl",
                                                .init = nccl_init,
                                                .run = nccl_run,
                                                .destroy = nccl_destroy,
                                                .mem_alloc = nccl_mem_alloc,
                                                .mem_free = nccl_mem_free};

#endif /* CDDP_HAVE_NCCL */

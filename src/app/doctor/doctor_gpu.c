/* doctor_gpu.c - the GPUs of this host as `cddp doctor` reports them: count, model, memory,
 * driver and CUDA version, and how each GPU reaches GPU 0 (nvidia-smi topo's words), read
 * through NVML loaded with dlopen; without it, one plain line: "no NVIDIA driver". */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "doctor/doctor.h"

/* NVML's ABI, as nvml.h declares it (the header is not part of the CUDA toolkit here). */
typedef int nvml_ret_t; /* NVML_SUCCESS is 0 */
typedef struct nvml_device *nvml_device_t;
typedef struct nvml_memory {
  unsigned long long total, free, used;
} nvml_memory_t;

static const char *topo_word(int level) {
  switch (level) { /* nvmlGpuTopologyLevel_t */
    case 0: return "same board";
    case 10: return "PIX";
    case 20: return "PXB";
    case 30: return "PHB";
    case 40: return "NODE";
    case 50: return "SYS";
    default: return "?";
  }
}

#define APPEND(...)                                                                       \
  do {                                                                                    \
    if (off < cap) off += (size_t)snprintf(out + off, cap - off, __VA_ARGS__);            \
  } while (0)

void cddp__doc_gpus(char *out, size_t cap) {
  size_t off = 0;
  out[0] = '\0';
  void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    APPEND("none: no NVIDIA driver (libnvidia-ml.so.1 not found)");
    return;
  }
  nvml_ret_t (*init)(void) = (nvml_ret_t(*)(void))dlsym(lib, "nvmlInit_v2");
  nvml_ret_t (*shutdown)(void) = (nvml_ret_t(*)(void))dlsym(lib, "nvmlShutdown");
  nvml_ret_t (*count)(unsigned *) = (nvml_ret_t(*)(unsigned *))dlsym(lib, "nvmlDeviceGetCount_v2");
  nvml_ret_t (*handle)(unsigned, nvml_device_t *) =
      (nvml_ret_t(*)(unsigned, nvml_device_t *))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
  nvml_ret_t (*name)(nvml_device_t, char *, unsigned) =
      (nvml_ret_t(*)(nvml_device_t, char *, unsigned))dlsym(lib, "nvmlDeviceGetName");
  nvml_ret_t (*memory)(nvml_device_t, nvml_memory_t *) =
      (nvml_ret_t(*)(nvml_device_t, nvml_memory_t *))dlsym(lib, "nvmlDeviceGetMemoryInfo");
  nvml_ret_t (*driver)(char *, unsigned) = (nvml_ret_t(*)(char *, unsigned))dlsym(lib, "nvmlSystemGetDriverVersion");
  nvml_ret_t (*cuda)(int *) = (nvml_ret_t(*)(int *))dlsym(lib, "nvmlSystemGetCudaDriverVersion_v2");
  nvml_ret_t (*topo)(nvml_device_t, nvml_device_t, int *) =
      (nvml_ret_t(*)(nvml_device_t, nvml_device_t, int *))dlsym(lib, "nvmlDeviceGetTopologyCommonAncestor");
  const char *(*errstr)(nvml_ret_t) = (const char *(*)(nvml_ret_t))dlsym(lib, "nvmlErrorString");
  unsigned n = 0;
  nvml_ret_t r = init && shutdown && count && handle && name && memory && driver && cuda && errstr ? init() : -1;
  if (r != 0) {
    APPEND("none: NVML did not start (%s)", r == -1 ? "libnvidia-ml.so.1 lacks a function" : errstr(r));
    dlclose(lib);
    return;
  }
  char drv[80] = "?";
  int cv = 0;
  driver(drv, sizeof drv);
  cuda(&cv);
  r = count(&n);
  if (r != 0 || n == 0) {
    APPEND("none visible to NVML (driver %s)", drv);
  } else {
    APPEND("%u (driver %s, CUDA %d.%d):", n, drv, cv / 1000, cv % 1000 / 10);
    nvml_device_t d0 = NULL;
    for (unsigned i = 0; i < n; i++) {
      nvml_device_t d = NULL;
      char model[96] = "?";
      nvml_memory_t mem = {0, 0, 0};
      if (handle(i, &d) != 0) continue;
      if (i == 0) d0 = d;
      name(d, model, sizeof model);
      memory(d, &mem);
      APPEND("%s %u %s %llu MiB", i ? "," : "", i, model, mem.total >> 20);
      int level = -1;
      if (i > 0 && d0 && topo && topo(d0, d, &level) == 0) APPEND(" (%s to GPU 0)", topo_word(level));
    }
  }
  shutdown();
  dlclose(lib);
}

/* test_device.c - train.device's choice as a pure function: one GPU per local rank modulo the
 * visible GPUs (ranks may share one), CUDA_VISIBLE_DEVICES' numbering, and the refusals. */
#include <math.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "trainer/config.h"
#include "trainer/device.h"
#include "trainer/ops.h"

static cddp_cuda_probe_t probe(cddp_cuda_status_t st, int n) {
  cddp_cuda_probe_t p = {.status = st, .count = n};
  strcpy(p.text, "unknown error");
  return p;
}

TEST(cpu_is_cpu_whatever_is_visible) {
  cddp_cuda_probe_t p = probe(CDDP_CUDA_OK, 8);
  cddp_device_choice_t c;
  CHECK_OK(cddp__device_choose(CDDP_DEVICE_CPU, &p, 3, 4, NULL, &c));
  CHECK_EQ(c.kind, CDDP_DEVICE_CPU);
  CHECK_EQ(c.ordinal, -1);
}

TEST(one_gpu_per_local_rank_modulo_the_visible) {
  cddp_cuda_probe_t p = probe(CDDP_CUDA_OK, 4);
  cddp_device_choice_t c;
  for (int lr = 0; lr < 8; lr++) {
    CHECK_OK(cddp__device_choose(CDDP_DEVICE_CUDA, &p, lr, 8, NULL, &c));
    CHECK_EQ(c.kind, CDDP_DEVICE_CUDA);
    CHECK_EQ(c.ordinal, lr % 4);
    CHECK_EQ(c.sharing, 1);
  }
  CHECK_OK(cddp__device_choose(CDDP_DEVICE_AUTO, &p, 2, 4, NULL, &c));
  CHECK_EQ(c.kind, CDDP_DEVICE_CUDA);
  CHECK_EQ(c.ordinal, 2);
  CHECK_EQ(c.sharing, 0);
  CHECK(strcmp(c.physical, "2") == 0);
}

TEST(two_ranks_share_the_one_gpu) {
  cddp_cuda_probe_t p = probe(CDDP_CUDA_OK, 1);
  cddp_device_choice_t a, b;
  CHECK_OK(cddp__device_choose(CDDP_DEVICE_CUDA, &p, 0, 2, NULL, &a));
  CHECK_OK(cddp__device_choose(CDDP_DEVICE_CUDA, &p, 1, 2, NULL, &b));
  CHECK_EQ(a.ordinal, 0);
  CHECK_EQ(b.ordinal, 0);
  CHECK(a.sharing && b.sharing);
}

TEST(cuda_visible_devices_names_the_physical_gpu) {
  cddp_cuda_probe_t p = probe(CDDP_CUDA_OK, 2); /* the runtime sees 2 of "5,7" */
  cddp_device_choice_t c;
  CHECK_OK(cddp__device_choose(CDDP_DEVICE_CUDA, &p, 1, 2, "5,7", &c));
  CHECK_EQ(c.ordinal, 1);
  CHECK(strcmp(c.physical, "7") == 0);
  CHECK_OK(cddp__device_choose(CDDP_DEVICE_CUDA, &p, 0, 2, "GPU-8f2a,GPU-11c0", &c));
  CHECK(strcmp(c.physical, "GPU-8f2a") == 0);
}

TEST(cuda_without_a_gpu_is_refused_naming_the_key_and_why) {
  static const struct { cddp_cuda_status_t st; const char *cvd, *why; } cases[] = {
      {CDDP_CUDA_NO_DRIVER, NULL, "no NVIDIA driver"},
      {CDDP_CUDA_NO_DEVICE, "", "CUDA_VISIBLE_DEVICES=''"},
      {CDDP_CUDA_NO_DEVICE, NULL, "no GPU visible"},
      {CDDP_CUDA_NOT_BUILT, NULL, "built without CUDA"},
      {CDDP_CUDA_ERROR, NULL, "unknown error"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cddp_cuda_probe_t p = probe(cases[i].st, 0);
    cddp_device_choice_t c;
    CHECK_RESULT(cddp__device_choose(CDDP_DEVICE_CUDA, &p, 0, 1, cases[i].cvd, &c), CDDP_INVALID_ARG);
    const char *e = cddp_last_error();
    if (!strstr(e, "train.device") || !strstr(e, cases[i].why) || strchr(e, '\n'))
      TEST_FAIL("case %zu: '%s' lacks train.device or '%s', or spans lines", i, e, cases[i].why);
    /* auto takes the CPU instead, and keeps the reason for its log line */
    CHECK_OK(cddp__device_choose(CDDP_DEVICE_AUTO, &p, 0, 1, cases[i].cvd, &c));
    CHECK_EQ(c.kind, CDDP_DEVICE_CPU);
    CHECK(strstr(c.why_cpu, cases[i].why) != NULL);
  }
}

/* Here (no driver, or a build without CUDA) the trainer's resolve refuses cuda and runs auto
 * on the CPU. */
TEST(resolve_refuses_cuda_and_auto_runs_on_the_cpu) {
  cddp_device_choice_t c;
  unsetenv("CDDP_DEVICE_EMULATE");
  CHECK_RESULT(cddp__device_resolve(CDDP_DEVICE_CUDA, &c), CDDP_INVALID_ARG);
  CHECK(strncmp(cddp_last_error(), "train.device: cuda", 18) == 0);
  CHECK_OK(cddp__device_resolve(CDDP_DEVICE_AUTO, &c));
  CHECK_EQ(c.kind, CDDP_DEVICE_CPU);
  CHECK(c.why_cpu[0] != '\0');
}

TEST(the_config_key_parses_and_rejects) {
  cddp_train_config_t c;
  cddp__config_defaults(&c);
  CHECK_EQ(c.device, CDDP_DEVICE_AUTO);
  const char *set[] = {"train.device=cpu"};
  CHECK_OK(cddp__config_load(&c, NULL, set, 1));
  CHECK_EQ(c.device, CDDP_DEVICE_CPU);
  const char *bad[] = {"train.device=tpu"};
  CHECK_RESULT(cddp__config_load(&c, NULL, bad, 1), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "train.device") != NULL);
}

/* CDDP_DEVICE_EMULATE=1 with no GPU: cuda and auto take the emulated device's table; with a
 * GPU the GPU. */
TEST(the_emulated_device_stands_in_for_a_missing_gpu) {
  cddp_cuda_probe_t p;
  cddp__cuda_probe(&p);
  setenv("CDDP_DEVICE_EMULATE", "1", 1);
  cddp_device_choice_t c;
  CHECK_OK(cddp__device_resolve(CDDP_DEVICE_CUDA, &c));
  CHECK_EQ(c.kind, CDDP_DEVICE_CUDA);
  CHECK_EQ(c.emulated, p.status != CDDP_CUDA_OK);
  CHECK(cddp__device_ops(&c) == (p.status == CDDP_CUDA_OK ? cddp__ops_for(CDDP_DEVICE_CUDA) : &cddp__ops_emu));
  CHECK_OK(cddp__device_resolve(CDDP_DEVICE_AUTO, &c));
  CHECK(cddp__device_ops(&c) == (p.status == CDDP_CUDA_OK ? cddp__ops_for(CDDP_DEVICE_CUDA) : &cddp__ops_emu));
  CHECK_OK(cddp__device_resolve(CDDP_DEVICE_CPU, &c));
  CHECK(cddp__device_ops(&c) == &cddp__ops_cpu);
  unsetenv("CDDP_DEVICE_EMULATE");
}

/* The emulated device's memory is not the host's: a host load through it faults (what makes
 * a missed to_host in the trainer a crash in the tests, not a silent read), while its own
 * copies and kernels reach it. */
TEST(the_emulated_devices_memory_faults_on_host_access) {
  const cddp_ops_t *e = &cddp__ops_emu;
  float *d = e->alloc(4 * sizeof(float)), h[4] = {1, 2, 3, 4}, back[4] = {0};
  CHECK(d != NULL);
  e->to_device(d, h, sizeof h);
  e->add_into(d, d, 4);
  e->to_host(back, d, sizeof back);
  CHECK(back[0] == 2 && back[3] == 8);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL); /* a sanitizer's handler would report and exit instead */
    signal(SIGBUS, SIG_DFL);
    volatile float x = d[1]; /* this read must fault */
    (void)x;
    _exit(0);
  }
  int st = 0;
  CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  /* the sanitizer's shadow lookup of the address may fail first, its own way: never a return */
  CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 0));
#else
  CHECK(WIFSIGNALED(st) && (WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS));
#endif
  e->release(d);
}

/* An async copy lands only once its event is waited on (or the stream synced): a forward
 * that forgot the wait would read the old bytes, and the bit-for-bit tests would fail. */
TEST(the_emulated_device_delays_an_async_copy_until_its_wait) {
  const cddp_ops_t *e = &cddp__ops_emu;
  float *d = e->alloc(4 * sizeof(float)), h[4] = {1, 2, 3, 4}, back[4] = {0};
  void *done = e->event_create(), *other = e->event_create();
  CHECK(d != NULL && done != NULL && other != NULL);
  e->to_device_async(d, h, sizeof h, done);
  e->event_wait(other); /* another event's wait does not run this copy */
  e->to_host(back, d, sizeof back);
  CHECK(back[0] == 0 && back[3] == 0);
  e->event_wait(done);
  e->to_host(back, d, sizeof back);
  CHECK(back[0] == 1 && back[3] == 4);
  h[0] = 9;
  e->to_device_async(d, h, sizeof h, done);
  e->sync(); /* a sync runs every queued copy */
  e->to_host(back, d, sizeof back);
  CHECK(back[0] == 9);
  e->event_destroy(other), e->event_destroy(done);
  e->release(d);
}

/* The CPU table's async copy is done when it returns (one stream): today's bits. */
TEST(the_cpu_tables_async_copy_is_immediate) {
  const cddp_ops_t *c = &cddp__ops_cpu;
  float d[2] = {0}, h[2] = {5, 6};
  void *done = c->event_create();
  CHECK(done != NULL);
  c->to_device_async(d, h, sizeof h, done);
  CHECK(d[0] == 5 && d[1] == 6);
  c->event_wait(done), c->event_destroy(done);
}

/* A bucket's copy to the host on the comm stream gives the bytes as of its compute mark only
 * when it was queued right after the mark, and shows them only at event_sync: a missing or
 * early mark, or a host read before the sync, gives NaN, and the trainer's bits fail. */
TEST(the_emulated_comm_copy_needs_its_mark_and_its_sync) {
  const cddp_ops_t *e = &cddp__ops_emu;
  float *d = e->alloc(4 * sizeof(float)), h[4] = {1, 2, 3, 4}, back[4] = {0};
  void *ready = e->event_create(), *done = e->event_create();
  CHECK(d != NULL && ready != NULL && done != NULL);
  e->to_device(d, h, sizeof h);
  e->event_record(ready);
  e->to_host_async(back, d, sizeof back, ready, done);
  CHECK(isnan(back[0])); /* the host has not waited yet */
  e->event_sync(done);
  CHECK(back[0] == 1 && back[3] == 4);
  e->event_record(ready);
  e->fill_zero(d, sizeof h); /* work queued after the mark: the copy may race it */
  e->to_host_async(back, d, sizeof back, ready, done);
  e->event_sync(done);
  CHECK(isnan(back[0]) && isnan(back[3]));
  e->to_host_async(back, d, sizeof back, NULL, done); /* no mark at all */
  e->sync(); /* a sync waits for the comm stream too */
  CHECK(isnan(back[1]));
  e->event_destroy(ready), e->event_destroy(done);
  e->release(d);
}

/* The CPU table's comm copy is done when it returns (one stream). */
TEST(the_cpu_tables_comm_copy_is_immediate) {
  const cddp_ops_t *c = &cddp__ops_cpu;
  float d[2] = {7, 8}, h[2] = {0};
  void *ev = c->event_create();
  CHECK(ev != NULL);
  c->event_record(ev);
  c->to_host_async(h, d, sizeof h, ev, ev);
  CHECK(h[0] == 7 && h[1] == 8);
  c->event_sync(ev), c->event_destroy(ev);
}

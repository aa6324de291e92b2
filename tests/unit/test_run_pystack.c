/* test_run_pystack.c - where a Python worker is, from py-spy's dump (launcher/pystack.c): the user's
 * innermost frame and the torch.distributed call it waits in, under torch 1.13's and 2.x's
 * layouts, the main thread picked among several, a group's set-up and an import told apart from a
 * collective, and text that is no dump or is hostile. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launcher/pystack.h"
#include "test.h"

static int where_of(const char *text, size_t len, cddp__pywhere_t *w) {
  char path[] = "/tmp/cddp-pystack-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  CHECK(write(fd, text, len) == (ssize_t)len);
  close(fd);
  int r = cddp__pystack_where(path, w);
  unlink(path);
  return r;
}
#define WHERE(text, w) where_of(text, strlen(text), w)

/* torch 1.13 (Debian's dist-packages): rank 0 waits in all_reduce, called from the user's main */
TEST(pystack_torch113_waiting) {
  cddp__pywhere_t w;
  CHECK_EQ(WHERE("Process 1: /usr/bin/python3 -u hang.py sleep\nPython v3.11.2 (/usr/bin/python3.11)\n\n"
                 "Thread 1 (idle): \"MainThread\"\n"
                 "    all_reduce (/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:1541)\n"
                 "    main (/tmp/x/hang.py:31)\n    <module> (/tmp/x/hang.py:39)\n", &w), 0);
  if (strcmp(w.coll, "all_reduce") || strcmp(w.user, "main (hang.py:31)")) TEST_FAIL("'%s' '%s'", w.coll, w.user);
}

/* torch 2.x (a venv's site-packages): c10d_logger's wrapper outside all_reduce; the sleeper's own
 * frame below a frame of the standard library */
TEST(pystack_torch2_and_sleeper) {
  cddp__pywhere_t w;
  CHECK_EQ(WHERE("Thread 7 (idle): \"MainThread\"\n"
                 "    all_reduce (/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:2950)\n"
                 "    wrapper (/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py:81)\n"
                 "    main (/w/train.py:30)\n", &w), 0);
  if (strcmp(w.coll, "all_reduce") || strcmp(w.user, "main (train.py:30)")) TEST_FAIL("'%s' '%s'", w.coll, w.user);
  CHECK_EQ(WHERE("Thread 8 (idle): \"MainThread\"\n    wait (/usr/lib/python3.11/threading.py:320)\n"
                 "    sleepy_data_loader (/w/train.py:7)\n    main (/w/train.py:29)\n", &w), 0);
  if (w.coll[0] || strcmp(w.user, "sleepy_data_loader (train.py:7)")) TEST_FAIL("'%s' '%s'", w.coll, w.user);
}

/* the thread py-spy names MainThread counts, not a helper thread listed before it */
TEST(pystack_main_thread_picked) {
  cddp__pywhere_t w;
  CHECK_EQ(WHERE("Thread 9 (idle): \"pin_memory\"\n    worker (/w/loader.py:5)\n"
                 "Thread 8 (idle): \"MainThread\"\n    step (/w/train.py:12)\n", &w), 0);
  if (strcmp(w.user, "step (train.py:12)")) TEST_FAIL("'%s'", w.user);
}

/* a rank forming the group waits for ranks still starting: set-up, not a collective; a rank still
 * importing torch says so; a collective after set-up is no set-up */
TEST(pystack_setup_and_import) {
  cddp__pywhere_t w;
  CHECK_EQ(WHERE("Thread 3 (idle): \"MainThread\"\n"
                 "    _create_gloo_process_group (/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:2101)\n"
                 "    _new_process_group_helper (/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:2050)\n"
                 "    init_process_group (/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:1790)\n"
                 "    wrapper (/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py:81)\n"
                 "    main (/w/hang.py:26)\n", &w), 0);
  if (!w.setup || w.importing || strcmp(w.coll, "_create_gloo_process_group")) TEST_FAIL("%d %d '%s'", w.setup, w.importing, w.coll);
  CHECK_EQ(WHERE("Thread 3 (idle): \"MainThread\"\n"
                 "    _create_c10d_store (/usr/lib/python3/dist-packages/torch/distributed/rendezvous.py:155)\n"
                 "    _env_rendezvous_handler (/usr/lib/python3/dist-packages/torch/distributed/rendezvous.py:244)\n"
                 "    main (/w/hang.py:26)\n", &w), 0);
  CHECK(w.setup);
  CHECK_EQ(WHERE("Thread 4 (active): \"MainThread\"\n"
                 "    <module> (/v/lib/python3.11/site-packages/torch/__init__.py:290)\n"
                 "    _call_with_frames_removed (<frozen importlib._bootstrap>:241)\n"
                 "    exec_module (<frozen importlib._bootstrap_external>:940)\n"
                 "    _find_and_load (<frozen importlib._bootstrap>:1178)\n"
                 "    <module> (/w/hang.py:7)\n", &w), 0);
  if (!w.importing || w.setup || strcmp(w.user, "<module> (hang.py:7)")) TEST_FAIL("%d %d '%s'", w.importing, w.setup, w.user);
  CHECK_EQ(WHERE("Thread 1 (idle): \"MainThread\"\n"
                 "    all_reduce (/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:1541)\n"
                 "    main (/tmp/x/hang.py:31)\n", &w), 0);
  CHECK(!w.setup && !w.importing);
}

/* no dump (py-spy's error text), malformed frames, a huge line: -1 or nothing named, never past a buffer */
TEST(pystack_hostile) {
  cddp__pywhere_t w;
  CHECK_EQ(WHERE("Error: Failed to find python version from target process\n", &w), -1);
  CHECK_EQ(WHERE("Thread 1 (idle)\n    (\n    f (nocolon)\n    ) x (\n", &w), -1);
  CHECK(!w.user[0] && !w.coll[0]);
  CHECK_EQ(WHERE("Thread 27617 (active+gil): \"MainThread\"\nThread 2 (idle): \"t\"\n    f (/w/x.py:1)\n", &w), -1); /* torn */
  size_t n = 300000;
  char *big = malloc(n + 64);
  CHECK(big != NULL);
  strcpy(big, "Thread 1 (idle)\n    ");
  memset(big + 20, 'a', n);
  strcpy(big + 20 + n, " (/w/x.py:1)\n");
  CHECK_EQ(where_of(big, strlen(big), &w), -1); /* its one frame cut: none read */
  CHECK(strlen(w.user) < sizeof w.user);
  free(big);
}

/* a frame whose names carry an escape sequence: the hang line the terminal shows gets '?' instead */
TEST(pystack_escape_in_names) {
  cddp__pywhere_t w;
  CHECK_EQ(WHERE("Thread 1 (idle): \"MainThread\"\n    \x1b]0;x\astep\xc3\xa9 (/w/\x1b[2Jtrain.py:12)\n", &w), 0);
  if (strcmp(w.user, "?]0;x?step?? (?[2Jtrain.py:12)")) TEST_FAIL("'%s'", w.user);
}

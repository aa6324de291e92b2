/* test_doctor.c - cddp doctor's parts: the round-robin schedule, the info text form, the probe
 * sockets on loopback (ok, refused, wrong peer, measured), and the report's problem lines. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doctor/doctor.h"
#include "test.h"

TEST(doctor_schedule_meets_every_pair_once) {
  for (int n = 1; n <= 9; n++) {
    int met[9][9] = {{0}};
    for (int r = 0; r < cddp__doc_rounds(n); r++)
      for (int i = 0; i < n; i++) {
        int p = cddp__doc_partner(n, r, i);
        if (p < 0) continue;
        CHECK(p != i && p < n);
        CHECK_EQ(cddp__doc_partner(n, r, p), i); /* symmetric: one pair per rank per round */
        met[i][p]++;
      }
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++) CHECK_EQ(met[i][j], i == j ? 0 : 1);
  }
  CHECK_EQ(cddp__doc_rounds(4), 3);
  CHECK_EQ(cddp__doc_rounds(5), 5);
}

TEST(doctor_info_round_trip) {
  cddp__doc_info_t a, b;
  memset(&a, 0, sizeof a);
  a.rank = 3, a.port = 4242, a.port_lo = 1000, a.port_hi = 2000;
  strcpy(a.host, "h3"), strcpy(a.spec, "bogus0"), strcpy(a.why, "CDDP_SOCKET_IFNAME=bogus0 matches nothing usable");
  strcpy(a.spec_error, "CDDP_SOCKET_IFNAME=bogus0 matches no interface that is up (present: lo, eth0)");
  strcpy(a.chosen, "eth0"), strcpy(a.chosen_addr, "10.0.0.3"), strcpy(a.suggest, "eth0");
  a.nif = 2;
  strcpy(a.ifs[0].name, "lo"), strcpy(a.ifs[0].addr, "127.0.0.1"), a.ifs[0].up = 1, a.ifs[0].loopback = 1;
  strcpy(a.ifs[1].name, "eth0"), strcpy(a.ifs[1].addr, "10.0.0.3");
  a.cfg_state = 1, a.cfg_hash = 0xfeedfacecafef00dull, a.nkeys = 3;
  a.keys[0] = 1, a.keys[1] = 0, a.keys[2] = 0xffffffffffffffffull;
  strcpy(a.gpus, "2 (driver 550.54, CUDA 12.4): 0 NVIDIA H100 81559 MiB, 1 NVIDIA H100 81559 MiB (NODE to GPU 0)");
  size_t len;
  char *t = cddp__doc_info_encode(&a, &len);
  CHECK(t && len == strlen(t));
  CHECK_OK(cddp__doc_info_decode(t, &b));
  free(t);
  CHECK_EQ(b.rank, 3);
  CHECK_EQ(b.port, 4242);
  CHECK_EQ(b.port_hi, 2000);
  CHECK(!strcmp(b.spec_error, a.spec_error) && !strcmp(b.why, a.why) && !strcmp(b.chosen_addr, "10.0.0.3"));
  CHECK_EQ(b.nif, 2);
  CHECK(!strcmp(b.gpus, a.gpus));
  CHECK(!strcmp(b.ifs[1].name, "eth0") && b.ifs[0].loopback && !b.ifs[1].up);
  CHECK(b.cfg_hash == a.cfg_hash && b.nkeys == 3 && b.keys[1] == 0 && b.keys[2] == a.keys[2]);
  CHECK_RESULT(cddp__doc_info_decode("rank 1\n", &b), CDDP_INVALID_ARG);
  CHECK_RESULT(cddp__doc_info_decode("doctor 1\nrank x\n", &b), CDDP_INVALID_ARG);
  CHECK_RESULT(cddp__doc_info_decode("doctor 1\ncfg 1 0 2\nkey 1\nkey 2\nkey 3\n", &b), CDDP_INVALID_ARG);
}

TEST(doctor_probe_on_loopback) {
  cddp__doc_server_t *s;
  CHECK_OK(cddp__doc_server_start(&s, "127.0.0.1", 7, 2000));
  int port = cddp__doc_server_port(s);
  /* a port nobody listens on: the server's, after it stops, is the one we know is free */
  cddp__doc_server_t *gone;
  CHECK_OK(cddp__doc_server_start(&gone, "127.0.0.1", 8, 2000));
  int dead = cddp__doc_server_port(gone);
  cddp__doc_server_stop(gone);
  const char *addr[3] = {"127.0.0.1", "127.0.0.1", "127.0.0.1"};
  int ports[3] = {port, dead, port}, ranks[3] = {7, 8, 9};
  cddp__doc_reach_t r[3];
  cddp__doc_probe_all(3, addr, ports, ranks, 0, 1000, r);
  CHECK_EQ(r[0], CDDP__REACH_OK);
  CHECK_EQ(r[1], CDDP__REACH_REFUSED);
  CHECK_EQ(r[2], CDDP__REACH_WRONG_PEER); /* rank 7 answered where rank 9 was expected */
  cddp__doc_meas_t m;
  cddp__doc_measure("127.0.0.1", port, 7, 0, 20, 1 << 20, 2000, &m);
  CHECK(m.ok);
  CHECK(m.lat_us > 0 && m.bw_to > 0 && m.bw_from > 0);
  CHECK(m.offset_ms > -5 && m.offset_ms < 5); /* one clock */
  cddp__doc_measure("127.0.0.1", dead, 8, 0, 20, 1 << 20, 1000, &m);
  CHECK(!m.ok && strstr(m.err, "connection refused"));
  cddp__doc_server_stop(s);
}

/* three hosts, one rank each; rank 2's host is cut off, rank 1's CDDP_SOCKET_IFNAME names nothing */
TEST(doctor_report_names_problems) {
  cddp__doc_info_t in[3];
  memset(in, 0, sizeof in);
  for (int i = 0; i < 3; i++) {
    in[i].rank = i, in[i].present = 1, in[i].port = 5000 + i, in[i].port_lo = 32768, in[i].port_hi = 60999;
    snprintf(in[i].host, sizeof in[i].host, "h%d", i + 1);
    snprintf(in[i].chosen_addr, sizeof in[i].chosen_addr, "10.0.0.%d", i + 1);
    strcpy(in[i].chosen, "eth0"), strcpy(in[i].suggest, "eth0"), strcpy(in[i].why, "routes to the master");
    in[i].nif = 2;
    strcpy(in[i].ifs[0].name, "lo"), strcpy(in[i].ifs[0].addr, "127.0.0.1"), in[i].ifs[0].up = in[i].ifs[0].loopback = 1;
    strcpy(in[i].ifs[1].name, "eth0"), strcpy(in[i].ifs[1].addr, in[i].chosen_addr), in[i].ifs[1].up = 1;
  }
  strcpy(in[1].spec, "bogus0"), strcpy(in[1].spec_error, "CDDP_SOCKET_IFNAME=bogus0 matches no interface");
  cddp__doc_reach_t reach[9];
  for (int i = 0; i < 9; i++) reach[i] = CDDP__REACH_OK;
  reach[0 * 3 + 2] = reach[1 * 3 + 2] = reach[2 * 3 + 0] = reach[2 * 3 + 1] = CDDP__REACH_TIMEOUT;
  cddp__doc_meas_t meas[9];
  memset(meas, 0, sizeof meas);
  meas[0 * 3 + 1] = (cddp__doc_meas_t){.ok = 1, .lat_us = 10, .offset_ms = 900, .offset_err_ms = 0.1, .bw_to = 9, .bw_from = 8};
  int missing[1] = {3};
  cddp__doc_job_t job = {.world = 4, .n = 3, .info = in, .reach = reach, .meas = meas, .missing = missing, .nmissing = 1,
                         .wait_s = 5, .store = "10.0.0.1:29500", .iters = 50, .bytes = 1 << 20, .max_offset_ms = 500};
  char *buf = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&buf, &size);
  int problems = cddp__doc_report(&job, f);
  fclose(f);
  CHECK_EQ(problems, 4);
  CHECK(strstr(buf, "problem: rank 3 did not report within 5.0 s"));
  CHECK(strstr(buf, "problem: interface bogus0 chosen by CDDP_SOCKET_IFNAME does not exist on host h2 (it has: lo, eth0) -> set CDDP_SOCKET_IFNAME=eth0"));
  CHECK(strstr(buf, "problem: host h3 (10.0.0.3) is cut off"));
  CHECK(strstr(buf, "problem: host h2's clock is 900.0 ms ahead of rank 0's"));
  CHECK(!strstr(buf, "cannot reach rank")); /* the cut-off line stands for its pairs */
  CHECK(strstr(buf, "reachability: 2 of 6 connections ok"));
  free(buf);
}

/* Here there is no NVIDIA driver: one plain line says so (a GPU machine lists its GPUs). */
TEST(gpus_line_names_the_gpus_or_says_why_there_are_none) {
  char g[448];
  cddp__doc_gpus(g, sizeof g);
  CHECK(g[0] != '\0' && !strchr(g, '\n'));
  void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml) dlclose(nvml);
  if (!nvml && strcmp(g, "none: no NVIDIA driver (libnvidia-ml.so.1 not found)"))
    TEST_FAIL("without libnvidia-ml.so.1: '%s'", g);
  if (nvml && strncmp(g, "none", 4) && !strstr(g, "MiB")) TEST_FAIL("with NVML: '%s' lists no GPU memory", g);
}

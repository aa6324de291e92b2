/* test_comm_peers.c - the communicator's peer exchange: one record per rank, one list from rank
 * 0 that every other rank reads once (O(N) store requests, not N per rank); the list read as
 * hostile input; every rank ends with the same table; a rank that never comes is named. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cddp/store.h"
#include "comm/peers.h"
#include "test.h"

static cddp__peer_t peer(const char *host, const char *id, int pid) {
  cddp__peer_t p = {.pid = pid};
  snprintf(p.host, sizeof p.host, "%s", host);
  snprintf(p.host_id, sizeof p.host_id, "%s", id);
  return p;
}

TEST(record_round_trip_and_malformed) {
  cddp__peer_t me = peer("node7", "boot-1/net:[4026531840]", 4242), back;
  char buf[300];
  int chk = -1;
  size_t n = cddp__peer_record_format(&me, 1, buf, sizeof buf);
  CHECK(n > 0);
  CHECK_EQ(cddp__peer_record_parse(buf, n, &back, &chk), 0);
  CHECK(!strcmp(back.host, "node7") && !strcmp(back.host_id, me.host_id) && back.pid == 4242 && chk == 1);
  CHECK_EQ(cddp__peer_record_parse("h\nid\n77", 7, &back, &chk), 0); /* no check field: off */
  CHECK_EQ(chk, 0);
  CHECK_EQ(back.pid, 77);
  const char *bad[] = {"h\nid", "h\nid\nx7\n1", "h\nid\n7\n2", "h\nid\n-7\n1", "h\nid\n99999999999\n1", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK_EQ(cddp__peer_record_parse(bad[i], strlen(bad[i]), &back, &chk), -1);
  char longhost[200];
  memset(longhost, 'a', sizeof longhost);
  memcpy(longhost + 100, "\nid\n1\n1", 7);
  CHECK_EQ(cddp__peer_record_parse(longhost, 107, &back, &chk), -1); /* 100 bytes of host: no room */
  CHECK_EQ(cddp__peer_record_parse("h\0x\nid\n1\n1", 10, &back, &chk), -1);
}

TEST(list_round_trip_each_host_once) {
  enum { W = 6 };
  cddp__peer_t in[W], out[W];
  for (int r = 0; r < W; r++) in[r] = peer(r % 3 == 2 ? "b" : "a", r % 3 == 2 ? "id-b" : "id-a", 100 + r);
  size_t len = 0;
  char *list = cddp__peer_list_format(in, W, 1, &len);
  CHECK(list != NULL);
  CHECK(!strncmp(list, "peers 6 2 1\n", 12)); /* two hosts, named once each */
  int chk = 0;
  const char *why = "";
  CHECK_EQ(cddp__peer_list_parse(list, len, W, out, &chk, &why), 0);
  CHECK_EQ(chk, 1);
  for (int r = 0; r < W; r++)
    CHECK(!strcmp(out[r].host, in[r].host) && !strcmp(out[r].host_id, in[r].host_id) && out[r].pid == in[r].pid);
  CHECK(len < 12 + 2 * 10 + W * 8); /* a rank costs a host index and a pid */
  free(list);
  cddp__peer_t odd = peer("my host", "id\twith\ttabs", 5); /* the separators cannot be in a name */
  list = cddp__peer_list_format(&odd, 1, 0, &len);
  CHECK_EQ(cddp__peer_list_parse(list, len, 1, out, &chk, &why), 0);
  CHECK(!strcmp(out[0].host, "my_host") && !strcmp(out[0].host_id, "id_with_tabs") && chk == 0);
  free(list);
}

TEST(hostile_lists_are_refused) {
  cddp__peer_t out[4];
  int chk;
  const char *why = "";
  const struct {
    const char *text, *why;
  } bad[] = {
      {"", "no header"},
      {"peer 2 1 1\nid h\n0 1\n0 2\n", "no header"},
      {"peers 3 1 1\nid h\n0 1\n0 2\n", "not for this communicator"}, /* world 3, not 2 */
      {"peers 2 3 1\nid h\nid h\nid h\n0 1\n0 2\n", "not for this communicator"}, /* more hosts than ranks */
      {"peers 2 0 1\n0 1\n0 2\n", "not for this communicator"},
      {"peers 2 1 7\nid h\n0 1\n0 2\n", "not for this communicator"}, /* check is 0 or 1 */
      {"peers 2 1 1\nid\n0 1\n0 2\n", "host line"},
      {"peers 2 1 1\nid h x\n0 1\n0 2\n", "host line"},
      {"peers 2 1 1\nid h\tx\n0 1\n0 2\n", "host line"}, /* a control character in a name */
      {"peers 2 1 1\nid \n0 1\n0 2\n", "host line"},
      {"peers 2 1 1\nid h\n1 1\n0 2\n", "rank line"}, /* host index out of range */
      {"peers 2 1 1\nid h\n0 -1\n0 2\n", "rank line"},
      {"peers 2 1 1\nid h\n0 1\n", "rank line"}, /* a rank missing */
      {"peers 2 1 1\nid h\n0 1\n0 2", "rank line"}, /* no last newline */
      {"peers 2 1 1\nid h\n0 1 \n0 2\n", "rank line"},
      {"peers 2 1 1\nid h\n0 1\n0 2\n0 3\n", "bytes after"},
      {"peers 99999999999999999999 1 1\nid h\n", "not for this communicator"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int r = cddp__peer_list_parse(bad[i].text, strlen(bad[i].text), 2, out, &chk, &why);
    if (r != -1 || !strstr(why, bad[i].why)) fprintf(stderr, "case %zu: r %d why '%s'\n", i, r, why);
    CHECK_EQ(r, -1);
    CHECK(strstr(why, bad[i].why) != NULL);
  }
  char host[300] = "peers 1 1 0\nid ";
  memset(host + strlen(host), 'h', 200); /* a host name longer than any */
  strcpy(host + 215, "\n0 1\n");
  CHECK_EQ(cddp__peer_list_parse(host, strlen(host), 1, out, &chk, &why), -1);
  CHECK_EQ(cddp__peer_list_parse("peers 1 1 0\ni\0d h\n0 1\n", 22, 1, out, &chk, &why), -1);
}

/* ---- the exchange, ranks as threads over one in-memory store ---- */

enum { XW = 5 };
static cddp_store_t *xstore;
static cddp__peer_t xout[XW][XW];
static int xcheck[XW], xmissing = -1;
static cddp_result_t xres[XW];
static char xerr[XW][300];

static void *exchange_rank(void *arg) {
  int r = (int)(intptr_t)arg;
  char host[16], id[16];
  snprintf(host, sizeof host, "host%d", r / 2);
  snprintf(id, sizeof id, "id%d", r / 2);
  /* rank 0's pid is alive on "its host" (a dead one is refused at once: test_comm_shm_fail) */
  cddp__peer_t me = peer(host, id, r ? 1000 + r : (int)getpid());
  xres[r] = cddp__peers_exchange(xstore, r, XW, 0, xmissing >= 0 ? 600 : 20000, &me, r != 3, xout[r], &xcheck[r]);
  snprintf(xerr[r], sizeof xerr[r], "%s", xres[r] == CDDP_OK ? "" : cddp_last_error());
  return NULL;
}

static void run_exchange(void) {
  pthread_t th[XW];
  CHECK_OK(cddp_store_mem_create(&xstore));
  for (int r = 0; r < XW; r++)
    if (r != xmissing) CHECK(pthread_create(&th[r], NULL, exchange_rank, (void *)(intptr_t)r) == 0);
  for (int r = 0; r < XW; r++)
    if (r != xmissing) pthread_join(th[r], NULL);
}

TEST(every_rank_holds_the_same_table) {
  xmissing = -1;
  run_exchange();
  for (int r = 0; r < XW; r++) {
    CHECK_OK(xres[r]);
    CHECK_EQ(xcheck[r], 0); /* rank 3 has the desync check off: off for all */
    for (int q = 0; q < XW; q++) {
      CHECK_EQ(xout[r][q].pid, q ? 1000 + q : (int)getpid());
      CHECK(!strcmp(xout[r][q].host_id, xout[0][q].host_id) && !strcmp(xout[r][q].host, xout[0][q].host));
    }
  }
  CHECK(!strcmp(xout[4][2].host, "host1") && !strcmp(xout[1][4].host_id, "id2"));
  cddp_store_close(xstore);
}

TEST(a_rank_that_never_comes_is_named) {
  xmissing = 3;
  run_exchange();
  for (int r = 0; r < XW; r++) {
    if (r == 3) continue;
    CHECK_EQ(xres[r], CDDP_TIMEOUT);
    CHECK(strstr(xerr[r], "rank 3 of 5 (round 0) never joined the communicator") != NULL);
  }
  cddp_store_close(xstore);
}

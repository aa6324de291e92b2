/* test_store_failover.c - a TCP client whose store's server dies moves to the peer that takes
 * over (a later epoch), repeats its call there with its will, never goes back to an old epoch,
 * and fails with one line when nobody takes over. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cddp/store.h"
#include "common/clock.h"
#include "store/failover.h"
#include "store/store_internal.h"
#include "test.h"

#define TOKEN "failover-token"

static void publish(cddp_store_t *s, int64_t epoch, const int *ids, const int *ports, int n) {
  cddp__peers_t p = {.epoch = epoch, .n = n};
  for (int i = 0; i < n; i++) {
    p.p[i].id = ids[i], p.p[i].port = ports[i];
    snprintf(p.p[i].host, sizeof p.p[i].host, "127.0.0.1");
  }
  char buf[4096];
  size_t len = cddp__peers_format(&p, buf, sizeof buf);
  CHECK(len > 0);
  CHECK_OK(cddp_store_set(s, CDDP__PEERS_KEY, buf, len));
}

TEST(peers_format_and_parse) {
  cddp__peers_t p;
  const char *t = "epoch 3\n0 10.0.0.1 29400\n2 fe80::1 40000";
  CHECK_EQ(cddp__peers_parse(t, strlen(t), &p), 0);
  CHECK(p.epoch == 3 && p.n == 2 && p.p[1].id == 2 && p.p[1].port == 40000 && !strcmp(p.p[1].host, "fe80::1"));
  CHECK_EQ(cddp__peers_find(&p, "10.0.0.1", 29400), 0);
  CHECK_EQ(cddp__peers_find(&p, "10.0.0.1", 1), -1);
  char buf[256];
  size_t n = cddp__peers_format(&p, buf, sizeof buf);
  CHECK(n == strlen(t) && !memcmp(buf, t, n));
  const char *bad[] = {"", "epoch", "epoch -1", "epoch 1\n0 h", "epoch 1\n0 h 70000", "epoch 1\nx h 1", "epoch 1 x"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK_EQ(cddp__peers_parse(bad[i], strlen(bad[i]), &p), -1);
  CHECK_EQ(cddp__peers_parse("epoch 0", 7, &p), 0);
  CHECK_EQ(p.n, 0);
}

typedef struct takeover {
  int port, delay_ms, epoch;
} takeover_t;

/* The standby at port takes over after delay_ms: the state, then the list at a later epoch. */
static void *take_over(void *arg) {
  takeover_t *t = arg;
  usleep((useconds_t)t->delay_ms * 1000);
  cddp_store_t *s;
  if (cddp_store_tcp_connect(&s, "127.0.0.1", t->port, TOKEN, 5000) != CDDP_OK) return NULL;
  (void)cddp_store_set(s, "k", "2", 1);
  cddp__peers_t p = {.epoch = t->epoch, .n = 1};
  p.p[0].id = 1, p.p[0].port = t->port;
  snprintf(p.p[0].host, sizeof p.p[0].host, "127.0.0.1");
  char buf[256];
  size_t len = cddp__peers_format(&p, buf, sizeof buf);
  (void)cddp_store_set(s, CDDP__PEERS_KEY, buf, len);
  cddp_store_close(s);
  return NULL;
}

static int hook_calls;
static int64_t hook_epoch = -1;
static void on_lost(const char *host, int port, int64_t epoch, void *arg) {
  (void)host, (void)port, (void)arg;
  __atomic_add_fetch(&hook_calls, 1, __ATOMIC_SEQ_CST);
  __atomic_store_n(&hook_epoch, epoch, __ATOMIC_SEQ_CST);
}

TEST(a_client_moves_to_the_peer_that_takes_over) {
  cddp_store_server_t *a, *b;
  CHECK_OK(cddp_store_server_start(&a, "127.0.0.1", 0, TOKEN));
  CHECK_OK(cddp_store_server_start(&b, "127.0.0.1", 0, TOKEN));
  int pa = cddp_store_server_port(a), pb = cddp_store_server_port(b);
  cddp_store_t *admin, *c, *w;
  CHECK_OK(cddp_store_tcp_connect(&admin, "127.0.0.1", pa, TOKEN, 5000));
  int ids[] = {0, 1}, ports[] = {pa, pb};
  publish(admin, 10, ids, ports, 2);
  cddp_store_close(admin);
  cddp__failover_set_hook(on_lost, NULL);
  CHECK_OK(cddp_store_tcp_connect(&c, "127.0.0.1", pa, TOKEN, 5000));
  CHECK_OK(cddp_store_tcp_connect(&w, "127.0.0.1", pa, TOKEN, 5000));
  CHECK_OK(cddp__store_tcp_will(w, "dead/w", "gone", 4));
  CHECK_OK(cddp_store_set(c, "k", "1", 1));
  /* the host dies; the standby takes over 300 ms later, at epoch 11 */
  cddp_store_server_stop(a);
  takeover_t t = {.port = pb, .delay_ms = 300, .epoch = 11};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, take_over, &t) == 0);
  uint64_t t0 = cddp__now_ns();
  void *v = NULL;
  size_t n = 0;
  /* a blocking get, repeated at the new host: it sees what the new host holds */
  CHECK_OK(cddp_store_get(c, "k", &v, &n, 5000));
  double ms = (cddp__now_ns() - t0) / 1e6;
  CHECK(n == 1 && !memcmp(v, "2", 1));
  free(v);
  CHECK(ms >= 250 && ms < 3000 * cddp_test_scale());
  pthread_join(th, NULL);
  CHECK_EQ(__atomic_load_n(&hook_calls, __ATOMIC_SEQ_CST), 1); /* once per lost epoch */
  CHECK_EQ(__atomic_load_n(&hook_epoch, __ATOMIC_SEQ_CST), 10);
  cddp__peers_t view;
  CHECK_EQ(cddp__failover_view(&view), 0);
  CHECK(view.epoch == 11 && view.n == 1 && view.p[0].port == pb);
  /* the will moves with its client: w's first call after the loss moves it, then its crash fires it */
  int64_t x;
  CHECK_OK(cddp_store_add(w, "n", 1, &x));
  cddp__store_tcp_abandon(w);
  cddp_store_t *check;
  CHECK_OK(cddp_store_tcp_connect(&check, "127.0.0.1", pb, TOKEN, 5000));
  CHECK_OK(cddp_store_get(check, "dead/w", &v, &n, 2000));
  CHECK(n == 4 && !memcmp(v, "gone", 4));
  free(v);
  cddp_store_close(check);
  cddp_store_close(c);
  cddp_store_server_stop(b);
  cddp__failover_set_hook(NULL, NULL);
}

TEST(an_old_epoch_is_never_taken_and_nobody_taking_over_is_one_line) {
  setenv("CDDP_STORE_FAILOVER_MS", "800", 1);
  cddp_store_server_t *a, *old;
  CHECK_OK(cddp_store_server_start(&a, "127.0.0.1", 0, TOKEN));
  CHECK_OK(cddp_store_server_start(&old, "127.0.0.1", 0, TOKEN));
  int pa = cddp_store_server_port(a), po = cddp_store_server_port(old);
  cddp_store_t *admin, *c;
  int ids[] = {0, 1}, ports[] = {pa, po};
  CHECK_OK(cddp_store_tcp_connect(&admin, "127.0.0.1", po, TOKEN, 5000));
  publish(admin, 20, ids, ports, 2); /* a server that still claims the epoch being left */
  cddp_store_close(admin);
  CHECK_OK(cddp_store_tcp_connect(&admin, "127.0.0.1", pa, TOKEN, 5000));
  publish(admin, 20, ids, ports, 2);
  cddp_store_close(admin);
  CHECK_OK(cddp_store_tcp_connect(&c, "127.0.0.1", pa, TOKEN, 5000));
  cddp_store_server_stop(a);
  uint64_t t0 = cddp__now_ns();
  int64_t x;
  CHECK_RESULT(cddp_store_add(c, "n", 1, &x), CDDP_REMOTE);
  double ms = (cddp__now_ns() - t0) / 1e6;
  char ep[64];
  snprintf(ep, sizeof ep, "127.0.0.1:%d lost", pa);
  CHECK(strstr(cddp_last_error(), ep) && strstr(cddp_last_error(), "CDDP_STORE_FAILOVER_MS"));
  CHECK(ms >= 700 && ms < 3000 * cddp_test_scale());
  /* the next call looks again, and fails the same way */
  CHECK_RESULT(cddp_store_add(c, "n", 1, &x), CDDP_REMOTE);
  cddp_store_close(c);
  cddp_store_server_stop(old);
  unsetenv("CDDP_STORE_FAILOVER_MS");
}

TEST(a_store_without_a_peers_list_does_not_move) {
  cddp_store_server_t *a;
  CHECK_OK(cddp_store_server_start(&a, "127.0.0.1", 0, TOKEN));
  cddp_store_t *c;
  CHECK_OK(cddp_store_tcp_connect(&c, "127.0.0.1", cddp_store_server_port(a), TOKEN, 5000));
  cddp_store_server_stop(a);
  uint64_t t0 = cddp__now_ns();
  int64_t x;
  CHECK_RESULT(cddp_store_add(c, "n", 1, &x), CDDP_REMOTE);
  CHECK((cddp__now_ns() - t0) / 1e6 < 500); /* at once, as before failover existed */
  cddp_store_close(c);
}

TEST(an_idle_client_leaves_an_old_host_that_still_answers) {
  cddp_store_server_t *a, *b;
  CHECK_OK(cddp_store_server_start(&a, "127.0.0.1", 0, TOKEN));
  CHECK_OK(cddp_store_server_start(&b, "127.0.0.1", 0, TOKEN));
  int pa = cddp_store_server_port(a), pb = cddp_store_server_port(b);
  cddp_store_t *admin, *idle, *check;
  int ids[] = {0, 1}, ports[] = {pa, pb};
  CHECK_OK(cddp_store_tcp_connect(&admin, "127.0.0.1", pa, TOKEN, 5000));
  publish(admin, 30, ids, ports, 2);
  CHECK_OK(cddp_store_tcp_connect(&idle, "127.0.0.1", pa, TOKEN, 5000));
  /* b takes over while a, cut off or frozen, still runs; another client of this process moved */
  CHECK_OK(cddp_store_tcp_connect(&check, "127.0.0.1", pb, TOKEN, 5000));
  int ids2[] = {1}, ports2[] = {pb};
  publish(check, 31, ids2, ports2, 1);
  cddp__peers_t moved = {.epoch = 31, .n = 1};
  moved.p[0].id = 1, moved.p[0].port = pb;
  snprintf(moved.p[0].host, sizeof moved.p[0].host, "127.0.0.1");
  cddp__failover_note(&moved);
  /* the idle client's next write lands at b, never at a */
  CHECK_OK(cddp_store_set(idle, "written", "1", 1));
  void *v = NULL;
  size_t n = 0;
  CHECK_OK(cddp_store_get(check, "written", &v, &n, 0));
  free(v);
  CHECK_RESULT(cddp_store_get(admin, "written", &v, &n, 0), CDDP_TIMEOUT);
  cddp_store_close(idle);
  cddp_store_close(check);
  cddp_store_close(admin);
  cddp_store_server_stop(a);
  cddp_store_server_stop(b);
}

TEST(a_client_pointed_at_a_standby_goes_to_the_store_it_names) {
  cddp_store_server_t *a, *b, *c;
  CHECK_OK(cddp_store_server_start(&a, "127.0.0.1", 0, TOKEN));
  CHECK_OK(cddp_store_server_start(&b, "127.0.0.1", 0, TOKEN));
  CHECK_OK(cddp_store_server_start(&c, "127.0.0.1", 0, TOKEN));
  int pa = cddp_store_server_port(a), pb = cddp_store_server_port(b), pc = cddp_store_server_port(c);
  int ids[] = {0, 1}, ports[] = {pa, pb};
  cddp_store_t *admin_a, *admin_b, *cl, *here;
  CHECK_OK(cddp__store_tcp_connect_here(&admin_a, "127.0.0.1", pa, TOKEN, 5000));
  CHECK_OK(cddp__store_tcp_connect_here(&admin_b, "127.0.0.1", pb, TOKEN, 5000));
  publish(admin_a, 40, ids, ports, 2);
  publish(admin_b, 40, ids, ports, 2); /* b's copy names a first */
  CHECK_OK(cddp_store_tcp_connect(&cl, "127.0.0.1", pb, TOKEN, 5000));
  CHECK_OK(cddp_store_set(cl, "via-b", "1", 1));
  void *v = NULL;
  size_t n = 0;
  CHECK_OK(cddp_store_get(admin_a, "via-b", &v, &n, 0)); /* it landed at the store, a */
  free(v);
  CHECK_OK(cddp__store_tcp_connect_here(&here, "127.0.0.1", pb, TOKEN, 5000)); /* this one stays at b */
  CHECK_OK(cddp_store_set(here, "at-b", "1", 1));
  CHECK_OK(cddp_store_get(admin_b, "at-b", &v, &n, 0));
  free(v);
  cddp_store_close(here);
  cddp_store_close(cl);
  /* a listed standby whose store does not answer: one line, no silent use of the standby */
  cddp_store_server_stop(a);
  cddp_store_t *bad = NULL;
  CHECK_RESULT(cddp_store_tcp_connect(&bad, "127.0.0.1", pb, TOKEN, 2000), CDDP_REMOTE);
  CHECK(bad == NULL && strstr(cddp_last_error(), "is a standby"));
  /* the store names b first although it is not b (the store's host lists itself just after a
   * standby did; or another name for it): b does not answer as the store, so c stays the store */
  cddp_store_t *admin_c, *cc;
  CHECK_OK(cddp__store_tcp_connect_here(&admin_c, "127.0.0.1", pc, TOKEN, 5000));
  int ids2[] = {1}, ports2[] = {pb};
  cddp_store_set(admin_b, CDDP__PEERS_KEY, "epoch 50", 8); /* b: a standby with no copy yet */
  publish(admin_c, 50, ids2, ports2, 1); /* later than any list this process read */
  CHECK_OK(cddp_store_tcp_connect(&cc, "127.0.0.1", pc, TOKEN, 5000));
  CHECK_OK(cddp_store_set(cc, "at-c", "1", 1));
  CHECK_OK(cddp_store_get(admin_c, "at-c", &v, &n, 0));
  free(v);
  cddp_store_close(cc);
  cddp_store_close(admin_a);
  cddp_store_close(admin_b);
  cddp_store_close(admin_c);
  cddp_store_server_stop(b);
  cddp_store_server_stop(c);
}

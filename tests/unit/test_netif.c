/* test_netif.c - CDDP_SOCKET_IFNAME matching and interface picking over a fake interface list. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "comm/netif.h"
#include "common/sock.h"
#include "test.h"

static cddp__netif_t mk(const char *name, const char *ip, int up, int loopback) {
  cddp__netif_t e;
  memset(&e, 0, sizeof e);
  strcpy(e.name, name);
  if (strchr(ip, ':')) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&e.addr;
    a->sin6_family = AF_INET6;
    CHECK(inet_pton(AF_INET6, ip, &a->sin6_addr) == 1);
    e.addrlen = sizeof *a;
  } else {
    struct sockaddr_in *a = (struct sockaddr_in *)&e.addr;
    a->sin_family = AF_INET;
    CHECK(inet_pton(AF_INET, ip, &a->sin_addr) == 1);
    e.addrlen = sizeof *a;
  }
  e.up = up, e.loopback = loopback;
  return e;
}

TEST(netif_match_forms) {
  CHECK(cddp__netif_match(NULL, "eth0"));
  CHECK(cddp__netif_match("", "eth0"));
  CHECK(cddp__netif_match("eth", "eth0"));
  CHECK(cddp__netif_match("eth", "eth10"));
  CHECK(!cddp__netif_match("eth", "ib0"));
  CHECK(cddp__netif_match("eth0,ib", "ib1"));
  CHECK(cddp__netif_match("eth0,ib", "eth0"));
  CHECK(cddp__netif_match("eth0,ib", "eth01")); /* prefix form */
  CHECK(!cddp__netif_match("=eth0", "eth01"));  /* exact form */
  CHECK(cddp__netif_match("=eth0,eth1", "eth1"));
  CHECK(!cddp__netif_match("=eth0,eth1", "eth"));
  CHECK(!cddp__netif_match("^lo,docker", "lo"));
  CHECK(!cddp__netif_match("^lo,docker", "docker0"));
  CHECK(cddp__netif_match("^lo,docker", "eth0"));
  CHECK(cddp__netif_match("^=lo", "lo0"));
  CHECK(!cddp__netif_match("^=lo", "lo"));
  CHECK(cddp__netif_match("^", "eth0")); /* excludes nothing */
  CHECK(!cddp__netif_match(",", "eth0")); /* empty entries match nothing */
}

static cddp__netif_t list[8];
static int nlist;
static void fake_list(void) {
  nlist = 0;
  list[nlist++] = mk("lo", "127.0.0.1", 1, 1);
  list[nlist++] = mk("docker0", "172.17.0.1", 1, 0);
  list[nlist++] = mk("eth0", "fd00::2", 1, 0);
  list[nlist++] = mk("eth0", "192.0.2.2", 1, 0);
  list[nlist++] = mk("eth1", "10.0.0.5", 0, 0); /* down */
  list[nlist++] = mk("ib0", "10.1.0.5", 1, 0);
}

static const char *pick(const char *spec, const char *route_ip) {
  cddp__netif_t r = mk("x", route_ip ? route_ip : "0.0.0.0", 1, 0);
  int idx = -1;
  CHECK_OK(cddp__netif_pick(list, nlist, spec, route_ip ? (struct sockaddr *)&r.addr : NULL, &idx));
  CHECK(idx >= 0 && idx < nlist);
  static char buf[64];
  char ip[48];
  snprintf(buf, sizeof buf, "%s/%s", list[idx].name,
           cddp__sockaddr_ip((struct sockaddr *)&list[idx].addr, ip, sizeof ip));
  return buf;
}

TEST(netif_pick_rules) {
  fake_list();
  /* spec: first up match, IPv4 before IPv6 */
  CHECK(strcmp(pick("eth", NULL), "eth0/192.0.2.2") == 0);
  CHECK(strcmp(pick("ib,eth", NULL), "eth0/192.0.2.2") == 0); /* system order, not spec order */
  CHECK(strcmp(pick("=ib0", NULL), "ib0/10.1.0.5") == 0);
  CHECK(strcmp(pick("^lo,docker,eth", NULL), "ib0/10.1.0.5") == 0);
  CHECK(strcmp(pick("^=lo", NULL), "docker0/172.17.0.1") == 0);
  CHECK(strcmp(pick("lo", NULL), "lo/127.0.0.1") == 0);
  /* spec wins over the route */
  CHECK(strcmp(pick("ib", "192.0.2.2"), "ib0/10.1.0.5") == 0);
  /* no spec: the interface holding the route's source address */
  CHECK(strcmp(pick(NULL, "10.1.0.5"), "ib0/10.1.0.5") == 0);
  CHECK(strcmp(pick("", "fd00::2"), "eth0/fd00::2") == 0);
  CHECK(strcmp(pick(NULL, "127.0.0.1"), "lo/127.0.0.1") == 0);
  /* no spec, no route: first up non-loopback IPv4 */
  CHECK(strcmp(pick(NULL, NULL), "docker0/172.17.0.1") == 0);
  CHECK(strcmp(pick(NULL, "203.0.113.9"), "docker0/172.17.0.1") == 0); /* route src not ours */
  /* only loopback left */
  nlist = 1;
  CHECK(strcmp(pick(NULL, NULL), "lo/127.0.0.1") == 0);
}

TEST(netif_no_match_names_value_and_interfaces) {
  fake_list();
  int idx = -1;
  CHECK_RESULT(cddp__netif_pick(list, nlist, "wlan", NULL, &idx), CDDP_INVALID_ARG);
  const char *e = cddp_last_error();
  CHECK(strstr(e, "CDDP_SOCKET_IFNAME=wlan") != NULL);
  CHECK(strstr(e, "lo, docker0, eth0, eth1 (down), ib0") != NULL);
  CHECK_RESULT(cddp__netif_pick(list, nlist, "=eth1", NULL, &idx), CDDP_INVALID_ARG); /* down */
  CHECK_RESULT(cddp__netif_pick(list, nlist, "^lo,docker,eth,ib", NULL, &idx), CDDP_INVALID_ARG);
}

TEST(netif_master_host_from_env) {
  char buf[256];
  unsetenv("MASTER_ADDR");
  unsetenv("CDDP_STORE");
  CHECK(cddp__netif_master_host(buf, sizeof buf) == NULL);
  setenv("CDDP_STORE", "tcp://node7:29400", 1);
  CHECK(strcmp(cddp__netif_master_host(buf, sizeof buf), "node7") == 0);
  setenv("CDDP_STORE", "[fd00::1]:29400", 1);
  CHECK(strcmp(cddp__netif_master_host(buf, sizeof buf), "fd00::1") == 0);
  setenv("CDDP_STORE", "file:/tmp/x", 1);
  CHECK(cddp__netif_master_host(buf, sizeof buf) == NULL);
  setenv("MASTER_ADDR", "10.0.0.1", 1);
  CHECK(strcmp(cddp__netif_master_host(buf, sizeof buf), "10.0.0.1") == 0);
}

/* The real system: loopback routes to itself; a bad spec fails naming the value. */
TEST(netif_choose_on_this_host) {
  cddp__netif_t e;
  struct sockaddr_storage src;
  char ip[64];
  CHECK_OK(cddp__netif_route_src("127.0.0.1", &src));
  CHECK(strcmp(cddp__sockaddr_ip((struct sockaddr *)&src, ip, sizeof ip), "127.0.0.1") == 0);
  unsetenv("CDDP_SOCKET_IFNAME");
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  CHECK_OK(cddp__netif_choose(&e));
  CHECK(e.loopback);
  setenv("CDDP_SOCKET_IFNAME", "=nosuchif0", 1);
  CHECK_RESULT(cddp__netif_choose(&e), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "=nosuchif0") != NULL);
  CHECK(strstr(cddp_last_error(), "lo") != NULL);
  setenv("CDDP_SOCKET_IFNAME", "lo", 1);
  CHECK_OK(cddp__netif_choose(&e));
  CHECK(strcmp(e.name, "lo") == 0);
}

/* netif.c - interface selection for TCP: CDDP_SOCKET_IFNAME, route to the master, fallbacks. */
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/netif.h"
#include "common/check.h"
#include "common/knobs.h"
#include "common/sock.h"
#include "common/envp.h"
#include "common/launcher.h"

extern char **environ;

int cddp__netif_match(const char *spec, const char *name) {
  if (!spec || !*spec) return 1;
  int exclude = 0, exact = 0;
  if (*spec == '^') exclude = 1, spec++;
  if (*spec == '=') exact = 1, spec++;
  int hit = 0;
  for (const char *p = spec; *p && !hit;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > 0) {
      if (exact) hit = strlen(name) == len && strncmp(name, p, len) == 0;
      else hit = strncmp(name, p, len) == 0;
    }
    p += len + (end ? 1 : 0);
  }
  return exclude ? !hit : hit;
}

static int same_ip(const struct sockaddr *a, const struct sockaddr *b) {
  if (a->sa_family != b->sa_family) return 0;
  if (a->sa_family == AF_INET)
    return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
           ((const struct sockaddr_in *)b)->sin_addr.s_addr;
  if (a->sa_family == AF_INET6)
    return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
  return 0;
}

/* First up entry accepted by want(), IPv4 before IPv6; -1 if none. */
static int first_where(const cddp__netif_t *list, int n, const char *spec, int nonloop) {
  for (int fam = 0; fam < 2; fam++)
    for (int i = 0; i < n; i++) {
      if (!list[i].up || (list[i].addr.ss_family == AF_INET) != (fam == 0)) continue;
      if (nonloop && list[i].loopback) continue;
      if (!cddp__netif_match(spec, list[i].name)) continue;
      return i;
    }
  return -1;
}

cddp_result_t cddp__netif_pick(const cddp__netif_t *list, int n, const char *spec,
                               const struct sockaddr *route_src, int *index) {
  if (spec && *spec) {
    int i = first_where(list, n, spec, 0);
    if (i >= 0) return *index = i, CDDP_OK;
    char present[512] = "";
    size_t off = 0;
    for (int j = 0; j < n && off < sizeof present; j++) {
      int dup = 0;
      for (int k = 0; k < j; k++) dup |= strcmp(list[k].name, list[j].name) == 0;
      if (dup) continue;
      off += (size_t)snprintf(present + off, sizeof present - off, "%s%s%s", off ? ", " : "",
                              list[j].name, list[j].up ? "" : " (down)");
    }
    const char *var = cddp__knob_source(CDDP_KNOB_SOCKET_IFNAME);
    return cddp__fail(CDDP_INVALID_ARG, "%s=%s matches no interface that is up (present: %s)",
                      var ? var : "CDDP_SOCKET_IFNAME", spec, off ? present : "none");
  }
  if (route_src)
    for (int i = 0; i < n; i++)
      if (list[i].up && same_ip((const struct sockaddr *)&list[i].addr, route_src))
        return *index = i, CDDP_OK;
  int i = first_where(list, n, NULL, 1);
  if (i < 0) i = first_where(list, n, NULL, 0);
  if (i < 0) return cddp__fail(CDDP_SYSTEM, "no network interface is up (not even loopback)");
  *index = i;
  return CDDP_OK;
}

cddp_result_t cddp__netif_list(cddp__netif_t *list, int max, int *n) {
  struct ifaddrs *ifa = NULL;
  if (getifaddrs(&ifa) != 0) return cddp__fail_errno(CDDP_SYSTEM, "getifaddrs");
  int k = 0;
  for (struct ifaddrs *p = ifa; p && k < max; p = p->ifa_next) {
    if (!p->ifa_addr || !p->ifa_name) continue;
    int fam = p->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if (fam == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)p->ifa_addr)->sin6_addr))
      continue; /* would need a scope id in every peer's address */
    cddp__netif_t *e = &list[k++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", p->ifa_name);
    e->addrlen = fam == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    memcpy(&e->addr, p->ifa_addr, e->addrlen);
    e->up = (p->ifa_flags & IFF_UP) != 0;
    e->loopback = (p->ifa_flags & IFF_LOOPBACK) != 0;
  }
  freeifaddrs(ifa);
  *n = k;
  return CDDP_OK;
}

cddp_result_t cddp__netif_route_src(const char *host, struct sockaddr_storage *src) {
  cddp_result_t r = cddp__sock_route_src(host, 9, src);
  if (r == CDDP_OK) return r;
  return cddp__fail(CDDP_NOT_FOUND, r == CDDP_REMOTE ? "no route to master host %s" : "master host %s does not resolve",
                    host);
}

const char *cddp__netif_master_host(char *buf, size_t size) {
  const char *m = getenv("MASTER_ADDR");
  if (m && *m) return snprintf(buf, size, "%s", m), buf;
  if (cddp__launcher_detect(environ) != CDDP_ENV_AGENT) return NULL;
  int port;
  if (cddp__envp_hostport("CDDP_STORE", getenv("CDDP_STORE"), buf, size, &port) == CDDP_OK) return buf;
  cddp__clear_error(); /* a file: or mem: store, or a bad value cddp_env_read names: no master host */
  return NULL;
}

cddp_result_t cddp__netif_choose(cddp__netif_t *out) {
  cddp__netif_t list[CDDP__NETIF_MAX];
  int n = 0, idx = -1;
  CDDP_CHECK(cddp__netif_list(list, CDDP__NETIF_MAX, &n));
  const char *spec = cddp__knob_str(CDDP_KNOB_SOCKET_IFNAME);
  struct sockaddr_storage src;
  const struct sockaddr *route = NULL;
  char host[256], ip[64];
  const char *why = cddp__knob_source(CDDP_KNOB_SOCKET_IFNAME); /* CDDP_, else NCCL_ / GLOO_SOCKET_IFNAME */
  if (!*spec) {
    const char *master = cddp__netif_master_host(host, sizeof host);
    why = "first interface that is up";
    if (master && cddp__netif_route_src(master, &src) == CDDP_OK) {
      route = (const struct sockaddr *)&src;
      why = "routes to the master";
    }
  }
  CDDP_CHECK(cddp__netif_pick(list, n, spec, route, &idx));
  if (route && !spec[0] && !(list[idx].up && same_ip((const struct sockaddr *)&list[idx].addr, route)))
    why = "first interface that is up (no interface holds the route's source)";
  *out = list[idx];
  CDDP_INFO(CDDP_SUB_NET, "NET/Socket: using %s %s (%s%s%s)", out->name,
            cddp__sockaddr_ip((struct sockaddr *)&out->addr, ip, sizeof ip), why,
            route ? ", master " : "", route ? host : "");
  return CDDP_OK;
}

/* doctor_info.c - what one rank of `cddp doctor` knows about itself, and its text form in the store. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/netif.h"
#include "common/check.h"
#include "common/knobs.h"
#include "common/sock.h"
#include "doctor/doctor.h"

static void copy(char *dst, size_t size, const char *src) { /* truncating strcpy */
  size_t n = src ? strlen(src) : 0;
  if (n >= size) n = size - 1;
  if (n) memcpy(dst, src, n);
  dst[n] = 0;
}

/* The kernel's ephemeral port range: where cddp's TCP transport (port 0) ends up listening. */
static void port_range(int *lo, int *hi) {
  *lo = 32768, *hi = 60999;
  FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  if (!f) return;
  if (fscanf(f, "%d %d", lo, hi) != 2) *lo = 32768, *hi = 60999;
  fclose(f);
}

cddp_result_t cddp__doc_info_local(cddp__doc_info_t *in) {
  int rank = in->rank;
  memset(in, 0, sizeof *in);
  in->rank = rank, in->present = 1;
  if (gethostname(in->host, sizeof in->host) != 0) copy(in->host, sizeof in->host, "?");
  in->host[sizeof in->host - 1] = 0;
  port_range(&in->port_lo, &in->port_hi);

  cddp__netif_t list[CDDP__NETIF_MAX];
  int n = 0;
  CDDP_CHECK(cddp__netif_list(list, CDDP__NETIF_MAX, &n));
  for (int i = 0; i < n && in->nif < CDDP__DOC_MAX_IFS; i++) {
    cddp__doc_if_t *e = &in->ifs[in->nif++];
    copy(e->name, sizeof e->name, list[i].name);
    cddp__sockaddr_ip((struct sockaddr *)&list[i].addr, e->addr, sizeof e->addr);
    e->up = list[i].up, e->loopback = list[i].loopback;
  }

  /* the same inputs cddp__netif_choose uses, kept apart so the report can say which decided */
  copy(in->spec, sizeof in->spec, cddp__knob_str(CDDP_KNOB_SOCKET_IFNAME));
  char host[256];
  struct sockaddr_storage src;
  const struct sockaddr *route = NULL;
  const char *master = cddp__netif_master_host(host, sizeof host);
  if (master) {
    copy(in->master, sizeof in->master, master);
    if (cddp__netif_route_src(master, &src) == CDDP_OK) {
      route = (const struct sockaddr *)&src;
      cddp__sockaddr_ip(route, in->route, sizeof in->route);
    }
  }
  int plain = -1, idx = -1;
  CDDP_CHECK(cddp__netif_pick(list, n, NULL, route, &plain));
  copy(in->suggest, sizeof in->suggest, list[plain].name);
  if (in->spec[0]) {
    if (cddp__netif_pick(list, n, in->spec, route, &idx) == CDDP_OK) {
      snprintf(in->why, sizeof in->why, "CDDP_SOCKET_IFNAME=%s", in->spec);
    } else {
      copy(in->spec_error, sizeof in->spec_error, cddp_last_error());
      idx = plain;
    }
  }
  if (idx < 0) {
    idx = plain;
    if (route) {
      char ip[64];
      cddp__sockaddr_ip((struct sockaddr *)&list[idx].addr, ip, sizeof ip);
      if (!strcmp(ip, in->route)) snprintf(in->why, sizeof in->why, "routes to the master %s", in->master);
      else snprintf(in->why, sizeof in->why, "first interface that is up (no interface holds %s, the route to %s)",
                    in->route, in->master);
    } else if (master) {
      snprintf(in->why, sizeof in->why, "first interface that is up (no route to the master %s)", in->master);
    } else {
      snprintf(in->why, sizeof in->why, "first interface that is up (no master known)");
    }
  }
  if (in->spec_error[0])
    snprintf(in->why, sizeof in->why, "CDDP_SOCKET_IFNAME=%s matches nothing usable; the doctor probes from %s",
             in->spec, list[idx].name);
  copy(in->chosen, sizeof in->chosen, list[idx].name);
  cddp__sockaddr_ip((struct sockaddr *)&list[idx].addr, in->chosen_addr, sizeof in->chosen_addr);
  return CDDP_OK;
}

/* ---- text form: "key value" lines; strings run to the end of the line ---- */

static void put_str(FILE *f, const char *key, const char *v) {
  fprintf(f, "%s ", key);
  for (const char *p = v; *p; p++) fputc(*p == '\n' ? ' ' : *p, f);
  fputc('\n', f);
}

char *cddp__doc_info_encode(const cddp__doc_info_t *in, size_t *len) {
  char *buf = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&buf, &size);
  if (!f) return NULL;
  fprintf(f, "doctor 1\nrank %d\nport %d\nports %d %d\n", in->rank, in->port, in->port_lo, in->port_hi);
  put_str(f, "host", in->host);
  put_str(f, "spec", in->spec);
  put_str(f, "master", in->master);
  put_str(f, "route", in->route);
  put_str(f, "chosen", in->chosen);
  put_str(f, "chosen_addr", in->chosen_addr);
  put_str(f, "why", in->why);
  put_str(f, "spec_error", in->spec_error);
  put_str(f, "suggest", in->suggest);
  for (int i = 0; i < in->nif; i++)
    fprintf(f, "if %s %s %d %d\n", in->ifs[i].name, in->ifs[i].addr, in->ifs[i].up, in->ifs[i].loopback);
  fprintf(f, "cfg %d %016" PRIx64 " %d\n", in->cfg_state, in->cfg_hash, in->nkeys);
  for (int i = 0; i < in->nkeys; i++) fprintf(f, "key %016" PRIx64 "\n", in->keys[i]);
  put_str(f, "cfg_err", in->cfg_err);
  put_str(f, "gpus", in->gpus);
  fclose(f);
  *len = size;
  return buf;
}

cddp_result_t cddp__doc_info_decode(const char *text, cddp__doc_info_t *in) {
  memset(in, 0, sizeof *in);
  int line = 0, seen_magic = 0, nk = 0;
  for (const char *p = text; *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    char l[1024];
    if (len >= sizeof l) return cddp__fail(CDDP_INVALID_ARG, "doctor info line %d is too long", line + 1);
    memcpy(l, p, len);
    l[len] = 0;
    p += len + (nl ? 1 : 0);
    line++;
    char *sp = strchr(l, ' ');
    const char *v = sp ? sp + 1 : "";
    if (sp) *sp = 0;
    int ok = 1;
    if (!strcmp(l, "doctor")) seen_magic = !strcmp(v, "1");
    else if (!strcmp(l, "rank")) ok = sscanf(v, "%d", &in->rank) == 1;
    else if (!strcmp(l, "port")) ok = sscanf(v, "%d", &in->port) == 1;
    else if (!strcmp(l, "ports")) ok = sscanf(v, "%d %d", &in->port_lo, &in->port_hi) == 2;
    else if (!strcmp(l, "host")) copy(in->host, sizeof in->host, v);
    else if (!strcmp(l, "spec")) copy(in->spec, sizeof in->spec, v);
    else if (!strcmp(l, "master")) copy(in->master, sizeof in->master, v);
    else if (!strcmp(l, "route")) copy(in->route, sizeof in->route, v);
    else if (!strcmp(l, "chosen")) copy(in->chosen, sizeof in->chosen, v);
    else if (!strcmp(l, "chosen_addr")) copy(in->chosen_addr, sizeof in->chosen_addr, v);
    else if (!strcmp(l, "why")) copy(in->why, sizeof in->why, v);
    else if (!strcmp(l, "spec_error")) copy(in->spec_error, sizeof in->spec_error, v);
    else if (!strcmp(l, "suggest")) copy(in->suggest, sizeof in->suggest, v);
    else if (!strcmp(l, "cfg_err")) copy(in->cfg_err, sizeof in->cfg_err, v);
    else if (!strcmp(l, "gpus")) copy(in->gpus, sizeof in->gpus, v);
    else if (!strcmp(l, "cfg")) ok = sscanf(v, "%d %" SCNx64 " %d", &in->cfg_state, &in->cfg_hash, &in->nkeys) == 3 &&
                                     in->nkeys >= 0 && in->nkeys <= CDDP__DOC_MAX_KEYS;
    else if (!strcmp(l, "key")) /* keys follow "cfg" in schema order */
      ok = nk < in->nkeys && sscanf(v, "%" SCNx64, &in->keys[nk++]) == 1;
    else if (!strcmp(l, "if")) {
      cddp__doc_if_t e;
      memset(&e, 0, sizeof e);
      char name[64];
      ok = sscanf(v, "%63s %63s %d %d", name, e.addr, &e.up, &e.loopback) == 4;
      copy(e.name, sizeof e.name, name);
      if (ok && in->nif < CDDP__DOC_MAX_IFS) in->ifs[in->nif++] = e;
    }
    if (!ok) return cddp__fail(CDDP_INVALID_ARG, "doctor info line %d ('%s') is malformed", line, l);
  }
  if (!seen_magic) return cddp__fail(CDDP_INVALID_ARG, "not a doctor info (no 'doctor 1' line)");
  in->present = 1;
  return CDDP_OK;
}

const char *cddp__doc_reach_str(cddp__doc_reach_t r) {
  switch (r) {
    case CDDP__REACH_OK: return "ok";
    case CDDP__REACH_REFUSED: return "connection refused";
    case CDDP__REACH_TIMEOUT: return "connection timed out";
    case CDDP__REACH_NOROUTE: return "no route to host";
    case CDDP__REACH_NETUNREACH: return "network unreachable";
    case CDDP__REACH_WRONG_PEER: return "answered, but not as the doctor of that rank";
    case CDDP__REACH_OTHER: return "connect failed";
    default: return "not tried";
  }
}

int cddp__doc_rounds(int n) { return n < 2 ? 0 : (n % 2 ? n : n - 1); }

int cddp__doc_partner(int n, int round, int i) {
  int m = n % 2 ? n + 1 : n; /* odd: a bye seat m-1 */
  if (n < 2 || i < 0 || i >= n) return -1;
  /* circle method: seat 0 fixed, the others rotate; position of member i in this round */
  int pos = i == 0 ? 0 : 1 + ((i - 1 + round) % (m - 1));
  int opp = m - 1 - pos;
  int j = opp == 0 ? 0 : 1 + ((opp - 1 - round) % (m - 1) + (m - 1)) % (m - 1);
  return j >= n ? -1 : j;
}

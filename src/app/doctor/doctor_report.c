/* doctor_report.c - rank 0's report of `cddp doctor`: hosts, interfaces, reachability, latency
 * and bandwidth matrices, clock offsets, config agreement, and one line per problem saying what to do. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/netif.h"
#include "doctor/doctor.h"

typedef struct host {
  char key[600];   /* hostname plus its non-loopback addresses: netns hosts share a hostname */
  char label[200];
  int first;       /* member index of its first rank */
  int nranks;
} host_t;

typedef struct rep {
  const cddp__doc_job_t *j;
  FILE *out;
  int problems;
  host_t *hosts;
  int nhosts;
  int *host_of; /* member -> host index */
} rep_t;

static void host_key(const cddp__doc_info_t *in, char *buf, size_t size) {
  size_t off = (size_t)snprintf(buf, size, "%s", in->host);
  for (int i = 0; i < in->nif && off < size; i++)
    if (!in->ifs[i].loopback) off += (size_t)snprintf(buf + off, size - off, "|%s", in->ifs[i].addr);
}

static void problem(rep_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(rep_t *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(r->out, "problem: ");
  vfprintf(r->out, fmt, ap);
  fprintf(r->out, "\n");
  va_end(ap);
  r->problems++;
}

static const cddp__doc_info_t *I(rep_t *r, int m) { return &r->j->info[m]; }
static const char *H(rep_t *r, int m) { return r->hosts[r->host_of[m]].label; }

static void group_hosts(rep_t *r) {
  int n = r->j->n;
  for (int m = 0; m < n; m++) {
    char key[600];
    host_key(I(r, m), key, sizeof key);
    int h = 0;
    while (h < r->nhosts && strcmp(r->hosts[h].key, key)) h++;
    if (h == r->nhosts) {
      host_t *e = &r->hosts[r->nhosts++];
      snprintf(e->key, sizeof e->key, "%s", key);
      e->first = m;
    }
    r->hosts[h].nranks++;
    r->host_of[m] = h;
  }
  for (int h = 0; h < r->nhosts; h++) { /* "name" when unique, else "name[address]" */
    const cddp__doc_info_t *in = I(r, r->hosts[h].first);
    int dup = 0;
    for (int k = 0; k < r->nhosts; k++) dup |= k != h && !strcmp(I(r, r->hosts[k].first)->host, in->host);
    if (dup) snprintf(r->hosts[h].label, sizeof r->hosts[h].label, "%s[%s]", in->host, in->chosen_addr);
    else snprintf(r->hosts[h].label, sizeof r->hosts[h].label, "%s", in->host);
  }
}

/* The interface to suggest on a host: the rules' pick without CDDP_SOCKET_IFNAME, or, when
 * that is loopback in a job across hosts, the first up non-loopback interface. */
static const char *suggest(rep_t *r, int m) {
  const cddp__doc_info_t *in = I(r, m);
  for (int i = 0; i < in->nif; i++)
    if (!strcmp(in->ifs[i].name, in->suggest) && (!in->ifs[i].loopback || r->nhosts < 2)) return in->suggest;
  for (int i = 0; i < in->nif; i++)
    if (in->ifs[i].up && !in->ifs[i].loopback) return in->ifs[i].name;
  return in->suggest;
}

static void hosts_section(rep_t *r) {
  fprintf(r->out, "hosts:\n");
  for (int h = 0; h < r->nhosts; h++) {
    int f = r->hosts[h].first;
    const cddp__doc_info_t *in = I(r, f);
    fprintf(r->out, "  %s: rank", r->hosts[h].label);
    for (int m = 0, c = 0; m < r->j->n; m++)
      if (r->host_of[m] == h) fprintf(r->out, "%s%d", c++ ? "," : " ", I(r, m)->rank);
    fprintf(r->out, "\n    interfaces:");
    for (int i = 0; i < in->nif; i++)
      fprintf(r->out, "%s %s %s %s", i ? "," : "", in->ifs[i].name, in->ifs[i].addr, in->ifs[i].up ? "up" : "down");
    fprintf(r->out, "\n    chosen: %s %s (%s)\n", in->chosen, in->chosen_addr, in->why);
    if (in->gpus[0]) fprintf(r->out, "    gpus: %s\n", in->gpus);
    for (int m = 0; m < r->j->n; m++)
      if (r->host_of[m] == h && m != f && strcmp(I(r, m)->chosen_addr, in->chosen_addr))
        fprintf(r->out, "    rank %d chose %s %s (%s)\n", I(r, m)->rank, I(r, m)->chosen, I(r, m)->chosen_addr, I(r, m)->why);
  }
}

static void interface_problems(rep_t *r) {
  for (int h = 0; h < r->nhosts; h++) {
    int f = r->hosts[h].first;
    const cddp__doc_info_t *in = I(r, f);
    if (in->spec_error[0]) {
      char down[200] = "";
      size_t off = 0;
      for (int i = 0; i < in->nif && off < sizeof down; i++)
        if (!in->ifs[i].up && cddp__netif_match(in->spec, in->ifs[i].name))
          off += (size_t)snprintf(down + off, sizeof down - off, "%s%s", off ? "," : "", in->ifs[i].name);
      char present[200] = "";
      for (int i = 0, o = 0; i < in->nif && o < (int)sizeof present; i++) {
        int dup = 0; /* an interface with IPv4 and IPv6 appears twice */
        for (int k = 0; k < i; k++) dup |= !strcmp(in->ifs[k].name, in->ifs[i].name);
        if (!dup) o += snprintf(present + o, sizeof present - (size_t)o, "%s%s", o ? ", " : "", in->ifs[i].name);
      }
      if (off)
        problem(r, "interface %s chosen by CDDP_SOCKET_IFNAME=%s is down on host %s -> bring it up (ip link set %s up) "
                   "or set CDDP_SOCKET_IFNAME=%s", down, in->spec, r->hosts[h].label, down, suggest(r, f));
      else
        problem(r, "interface %s chosen by CDDP_SOCKET_IFNAME does not exist on host %s (it has: %s) -> set "
                   "CDDP_SOCKET_IFNAME=%s there (or unset it: %s is the interface that routes to the master)",
                in->spec, r->hosts[h].label, present, suggest(r, f), in->suggest);
    } else if (r->nhosts > 1) {
      for (int i = 0; i < in->nif; i++)
        if (!strcmp(in->ifs[i].name, in->chosen) && in->ifs[i].loopback)
          problem(r, "host %s would use %s (%s), which other hosts cannot reach -> set CDDP_SOCKET_IFNAME=%s on %s",
                  r->hosts[h].label, in->chosen, in->chosen_addr, suggest(r, f), r->hosts[h].label);
    }
  }
}

static const char *advice(cddp__doc_reach_t k) {
  switch (k) {
    case CDDP__REACH_TIMEOUT: return "packets are dropped on the way: check the link (cable, switch port) and firewall between the two hosts";
    case CDDP__REACH_REFUSED: return "the port is closed to this peer: a firewall rejects it, or the address belongs to another machine";
    case CDDP__REACH_NOROUTE:
    case CDDP__REACH_NETUNREACH: return "no route: check the sender's routes and that the receiver's address is on a network it can reach (CDDP_SOCKET_IFNAME)";
    case CDDP__REACH_WRONG_PEER: return "another process answered at that address: duplicate address or NAT between the hosts";
    default: return "check the link and firewall between the two hosts";
  }
}

static int reach(rep_t *r, int a, int b) { return r->j->reach[a * r->j->n + b]; }

/* A host is cut off when no connection between it and any other host works either way. */
static int cut_off(rep_t *r, int h) {
  int cross = 0;
  for (int a = 0; a < r->j->n; a++)
    for (int b = 0; b < r->j->n; b++) {
      int ha = r->host_of[a], hb = r->host_of[b];
      if (ha == hb || (ha != h && hb != h)) continue;
      cross++;
      if (reach(r, a, b) == CDDP__REACH_OK) return 0;
    }
  return cross > 0 && r->nhosts > 2;
}

static void reach_section(rep_t *r) {
  int n = r->j->n, good = 0, tried = 0;
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++)
      if (a != b) tried++, good += reach(r, a, b) == CDDP__REACH_OK;
  fprintf(r->out, "reachability: %d of %d connections ok (each rank to every other rank's doctor port)\n", good, tried);
  int *cut = calloc((size_t)r->nhosts, sizeof *cut);
  for (int h = 0; h < r->nhosts && cut; h++)
    if ((cut[h] = cut_off(r, h))) {
      const cddp__doc_info_t *in = I(r, r->hosts[h].first);
      problem(r, "host %s (%s) is cut off: it reaches no other host and no host reaches it -> check its link "
                 "(is %s up and plugged in?) and its firewall; cddp needs TCP ports %d-%d open between hosts",
              r->hosts[h].label, in->chosen_addr, in->chosen, in->port_lo, in->port_hi);
    }
  /* one line per (sender host, receiver host, failure kind) */
  for (int ha = 0; ha < r->nhosts; ha++)
    for (int hb = 0; hb < r->nhosts; hb++)
      for (int k = CDDP__REACH_REFUSED; k <= CDDP__REACH_OTHER; k++) {
        if (cut && (cut[ha] || cut[hb]) && ha != hb) continue;
        char from[256] = "", to[256] = "";
        size_t fo = 0, to_off = 0;
        int pairs = 0, last_a = -1, last_b = -1;
        for (int a = 0; a < n; a++)
          for (int b = 0; b < n; b++) {
            if (a == b || r->host_of[a] != ha || r->host_of[b] != hb || reach(r, a, b) != k) continue;
            pairs++;
            last_a = a, last_b = b;
          }
        if (!pairs) continue;
        for (int a = 0; a < n; a++) {
          int any = 0;
          for (int b = 0; b < n; b++) any |= a != b && r->host_of[a] == ha && r->host_of[b] == hb && reach(r, a, b) == k;
          if (any && fo < sizeof from) fo += (size_t)snprintf(from + fo, sizeof from - fo, "%s%d", fo ? "," : "", I(r, a)->rank);
        }
        for (int b = 0; b < n; b++) {
          int any = 0;
          for (int a = 0; a < n; a++) any |= a != b && r->host_of[a] == ha && r->host_of[b] == hb && reach(r, a, b) == k;
          if (any && to_off < sizeof to)
            to_off += (size_t)snprintf(to + to_off, sizeof to - to_off, "%s%d", to_off ? "," : "", I(r, b)->rank);
        }
        const cddp__doc_info_t *ia = I(r, last_a), *ib = I(r, last_b);
        problem(r, "rank%s %s (host %s, %s) cannot reach rank%s %s (host %s, %s:%d%s): %s -> %s; cddp needs TCP "
                   "ports %d-%d on %s open to %s",
                strchr(from, ',') ? "s" : "", from, H(r, last_a), ia->chosen_addr, strchr(to, ',') ? "s" : "", to,
                H(r, last_b), ib->chosen_addr, ib->port, strchr(to, ',') ? ", ..." : "", cddp__doc_reach_str((cddp__doc_reach_t)k),
                advice((cddp__doc_reach_t)k), ib->port_lo, ib->port_hi, H(r, last_b), H(r, last_a));
      }
  free(cut);
}

static void matrix(rep_t *r, const char *title, int lat) {
  int n = r->j->n;
  fprintf(r->out, "%s\n  %8s", title, "from\\to");
  for (int b = 0; b < n; b++) fprintf(r->out, " %8d", I(r, b)->rank);
  fprintf(r->out, "\n");
  for (int a = 0; a < n; a++) {
    fprintf(r->out, "  %8d", I(r, a)->rank);
    for (int b = 0; b < n; b++) {
      if (a == b) {
        fprintf(r->out, " %8s", "-");
        continue;
      }
      const cddp__doc_meas_t *m = &r->j->meas[a * n + b];
      int fwd = m->ok;
      if (!fwd) m = &r->j->meas[b * n + a];
      if (!m->ok) {
        fprintf(r->out, " %8s", "x");
        continue;
      }
      double v = lat ? m->lat_us : fwd ? m->bw_to : m->bw_from;
      fprintf(r->out, lat ? " %8.1f" : " %8.2f", v);
    }
    fprintf(r->out, "\n");
  }
}

static void measure_section(rep_t *r) {
  int n = r->j->n;
  if (!r->j->meas || n < 2) return;
  char t[200];
  snprintf(t, sizeof t, "latency, us (half the median round trip of %d 16-byte ping-pongs):", r->j->iters);
  matrix(r, t, 1);
  if (r->j->bytes) {
    snprintf(t, sizeof t, "bandwidth, Gbit/s (%.0f MiB one way, one pair at a time; row sends, column receives):",
             (double)r->j->bytes / (1 << 20));
    matrix(r, t, 0);
  }
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++) {
      const cddp__doc_meas_t *m = &r->j->meas[a * n + b];
      if (a == b || m->ok || !m->err[0]) continue;
      problem(r, "measuring rank %d (host %s) -> rank %d (host %s, %s:%d) failed: %s -> the link connects but does not "
                 "carry traffic reliably: check MTU, packet loss and rate limits between %s and %s",
              I(r, a)->rank, H(r, a), I(r, b)->rank, H(r, b), I(r, b)->chosen_addr, I(r, b)->port, m->err, H(r, a), H(r, b));
    }
  /* clock offsets: measured by member 0 (rank 0 is the lower rank of all its pairs) */
  fprintf(r->out, "clock offset vs rank 0 (NTP-style, from the fastest ping-pong):\n");
  for (int h = 0; h < r->nhosts; h++) {
    int f = r->hosts[h].first;
    if (r->host_of[0] == h) {
      fprintf(r->out, "  %s: 0 (rank 0's host)\n", r->hosts[h].label);
      continue;
    }
    const cddp__doc_meas_t *m = &r->j->meas[0 * n + f];
    if (!m->ok) {
      fprintf(r->out, "  %s: unknown (no ping-pong with rank 0)\n", r->hosts[h].label);
      continue;
    }
    double off = fabs(m->offset_ms) < 0.0005 ? 0 : m->offset_ms; /* no "-0.000" */
    fprintf(r->out, "  %s: %+.3f ms (+-%.3f)\n", r->hosts[h].label, off, m->offset_err_ms);
    if (fabs(m->offset_ms) - m->offset_err_ms > r->j->max_offset_ms)
      problem(r, "host %s's clock is %.1f ms %s rank 0's -> synchronise the clocks (chrony or ntpd on every host); "
                 "logs and timeouts compare them", r->hosts[h].label, fabs(m->offset_ms),
              m->offset_ms > 0 ? "ahead of" : "behind");
  }
}

static void config_section(rep_t *r) {
  const cddp__doc_job_t *j = r->j;
  if (!j->cfg_path) return;
  const cddp__doc_info_t *z = I(r, 0);
  int bad = 0;
  for (int m = 0; m < j->n; m++) {
    const cddp__doc_info_t *in = I(r, m);
    if (in->cfg_state < 0) {
      bad++;
      problem(r, "rank %d (host %s) cannot load the config: %s -> make %s the same readable file on every host",
              in->rank, H(r, m), in->cfg_err, j->cfg_path);
    } else if (z->cfg_state > 0 && in->cfg_hash != z->cfg_hash) {
      bad++;
      const char *key = "?";
      for (int k = 0; k < in->nkeys && k < z->nkeys; k++)
        if (in->keys[k] != z->keys[k]) {
          key = j->cfg_keys && j->cfg_keys[k] ? j->cfg_keys[k] : "?";
          break;
        }
      problem(r, "rank %d (host %s) loaded a different config than rank 0: first differing key %s -> copy rank 0's "
                 "%s to %s and pass the same --set overrides on every node", in->rank, H(r, m), key, j->cfg_path, H(r, m));
    }
  }
  if (!bad)
    fprintf(r->out, "config: %s resolves the same on every rank (hash %016llx)\n", j->cfg_path,
            (unsigned long long)z->cfg_hash);
}

int cddp__doc_report(const cddp__doc_job_t *job, FILE *out) {
  rep_t r = {.j = job, .out = out};
  r.hosts = calloc((size_t)job->n + 1, sizeof *r.hosts);
  r.host_of = calloc((size_t)job->n + 1, sizeof *r.host_of);
  if (!r.hosts || !r.host_of) {
    free(r.hosts), free(r.host_of);
    fprintf(out, "problem: out of memory writing the report\n");
    return 1;
  }
  group_hosts(&r);
  fprintf(out, "cddp doctor: %d of %d ranks reported, on %d host%s; store %s\n", job->n, job->world, r.nhosts,
          r.nhosts == 1 ? "" : "s", job->store);
  hosts_section(&r);
  for (int i = 0; i < job->nmissing; i++)
    problem(&r, "rank %d did not report within %.1f s -> it cannot reach the store at %s (its own output says why) "
                "or did not start: check its host's link and firewall toward %s",
            job->missing[i], job->wait_s, job->store, job->store);
  interface_problems(&r);
  reach_section(&r);
  measure_section(&r);
  config_section(&r);
  if (r.problems) fprintf(out, "cddp doctor: %d problem%s found\n", r.problems, r.problems == 1 ? "" : "s");
  else fprintf(out, "cddp doctor: healthy\n");
  free(r.hosts);
  free(r.host_of);
  return r.problems;
}

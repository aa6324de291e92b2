/* fuzz_status.c - libFuzzer target: what `cddp status` reads that another process wrote: node
 * records and events from the store (with hostile counters), the endpoint record and the tail of
 * metrics.jsonl and the kept events in a run folder; and the rendezvous' member list as every
 * agent unpacks it. Everything parsed must stay within its fields and be printable. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_dir.h"
#include "job/jobkeys.h"
#include "job/status.h"

static const int64_t counters[] = {0, 1, 2, 3, 64, 255, 256, 300, -1, INT64_MIN, INT64_MAX, INT64_MAX - 1};

static void check_node(const cddp__status_node_t *n) {
  if (n->nranks < 0 || n->nranks > CDDP__STATUS_RANKS || !fuzz_printable(n->state, sizeof n->state) ||
      !fuzz_printable(n->host, sizeof n->host))
    __builtin_trap();
  for (int i = 0; i < n->nranks; i++)
    if (!fuzz_printable(n->ranks[i].state, sizeof n->ranks[i].state) ||
        !fuzz_printable(n->ranks[i].last, sizeof n->ranks[i].last))
      __builtin_trap();
}

/* One node record: parsed, and what parses formats back into a record that parses. */
static void node_record(const uint8_t *p, size_t n) {
  static cddp__status_node_t a, b;
  static char text[16384];
  if (cddp__status_parse((const char *)p, n, &a) != 0) return;
  check_node(&a);
  size_t len = cddp__status_format(&a, text, sizeof text);
  if (len == 0 || cddp__status_parse(text, len, &b) != 0 || b.nranks != a.nranks) __builtin_trap();
}

/* The store's counters and records: p[0] picks the counters, the rest are records (split at NUL)
 * at the counter's end, where status reads. */
static void store_records(const uint8_t *p, size_t n) {
  if (n < 2) return;
  cddp_store_t *s;
  if (cddp_store_mem_create(&s) != CDDP_OK) return;
  int64_t last = counters[p[0] % (sizeof counters / sizeof *counters)];
  int64_t slots = counters[p[0] / 16 % (sizeof counters / sizeof *counters)];
  int max = 1 + p[1] % 80;
  char v[32];
  int k = snprintf(v, sizeof v, "%lld", (long long)last);
  cddp_store_set(s, cddp__job_key(CDDP__JK_STATUS_EVENTS, 0, 0).s, v, (size_t)k);
  k = snprintf(v, sizeof v, "%lld", (long long)slots);
  cddp_store_set(s, cddp__job_key(CDDP__JK_STATUS_SLOTS, 0, 0).s, v, (size_t)k);
  p += 2, n -= 2;
  for (int64_t i = 0; n > 0 && i < 300; i++) {
    const uint8_t *z = memchr(p, 0, n);
    size_t len = z ? (size_t)(z - p) : n;
    int64_t at = i % 2 ? i / 2 : (int64_t)((uint64_t)last - (uint64_t)(i / 2)); /* the end and the start */
    cddp_store_set(s, cddp__job_key(CDDP__JK_STATUS_EVENT, at, 0).s, p, len);
    cddp_store_set(s, cddp__job_key(CDDP__JK_STATUS_NODE, i, 0).s, p, len);
    p += len + (z != NULL), n -= len + (z != NULL);
  }
  cddp__status_event_t ev[80];
  int got = -1;
  if (cddp__status_events(s, ev, max, &got) == CDDP_OK) {
    if (got < 0 || got > max) __builtin_trap();
    for (int i = 0; i < got; i++)
      if (!fuzz_printable(ev[i].text, sizeof ev[i].text)) __builtin_trap();
  }
  cddp__status_node_t *nodes = NULL;
  if (cddp__status_read(s, &nodes, &got) == CDDP_OK) {
    if (got < 0 || got > CDDP__STATUS_NODES) __builtin_trap();
    for (int i = 0; i < got; i++) check_node(&nodes[i]);
  }
  free(nodes);
  cddp_store_close(s);
}

static void endpoint_file(const uint8_t *p, size_t n) {
  cddp__endpoint_t e;
  fuzz_dir_put("endpoint", p, n);
  if (cddp__endpoint_read(fuzz_dir_get(), &e) != CDDP_OK) return;
  if (e.port <= 0 || !fuzz_printable(e.host, sizeof e.host) || !fuzz_printable(e.run_id, sizeof e.run_id) ||
      !fuzz_printable(e.token, sizeof e.token) || !fuzz_printable(e.ended, sizeof e.ended))
    __builtin_trap();
}

static void metrics_tail(const uint8_t *p, size_t n) {
  uint64_t step;
  int has;
  char bad[64];
  fuzz_dir_put("metrics.jsonl", p, n);
  if (cddp__run_last_step(fuzz_dir_get(), &step, &has, bad, sizeof bad) != CDDP_OK) return;
  if (!fuzz_printable(bad, sizeof bad) || (has != 0 && has != 1)) __builtin_trap();
}

/* the events a finished job kept in its folder: the same bytes as a file of lines */
static void events_file(const uint8_t *p, size_t n) {
  static cddp__status_event_t ev[CDDP__EVENTS_KEPT];
  int max = n ? 1 + p[0] % CDDP__EVENTS_KEPT : 1, got = -1;
  fuzz_dir_put("events", p, n);
  if (cddp__events_load(fuzz_dir_get(), ev, max, &got) != CDDP_OK) return;
  if (got < 0 || got > max) __builtin_trap();
  for (int i = 0; i < got; i++)
    if (!fuzz_printable(ev[i].text, sizeof ev[i].text)) __builtin_trap();
}

/* rdzv/R/members, packed or not: within the reader's bound, NUL-terminated, its lines node records */
static void member_list(const uint8_t *p, size_t n) {
  char *text = NULL;
  size_t len = 0, max = 64 * 256 + 1;
  if (cddp__job_list_unpack(p, n, max, &text, &len) != 0 || !text) return;
  if (len > max || text[len] != '\0') __builtin_trap();
  cddp__job_node_rec_t rec;
  for (char *line = text, *nl; line < text + len; line = nl + 1) {
    nl = memchr(line, '\n', (size_t)(text + len - line));
    if (!nl) nl = text + len;
    if (cddp__job_node_parse(line, (size_t)(nl - line), &rec) == 0 && !rec.mismatch &&
        (!fuzz_printable(rec.node.host, sizeof rec.node.host) || !fuzz_printable(rec.node.addr, sizeof rec.node.addr)))
      __builtin_trap();
  }
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  if (data[0] == 0xff) { /* apart from the % 4 below, so the earlier findings keep their cases */
    member_list(data + 1, size - 1);
    return 0;
  }
  switch (data[0] % 4) {
  case 0: node_record(data + 1, size - 1); break;
  case 1: store_records(data + 1, size - 1); break;
  case 2: endpoint_file(data + 1, size - 1); break;
  default: metrics_tail(data + 1, size - 1), events_file(data + 1, size - 1); /* both files of lines */
  }
  return 0;
}

/* jobkeys.c - the job's keys in the store and their values' text, both ways, in one place. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/check.h"
#include "job/jobkeys.h"

/* A key is its parts with its numbers between them: part[0] a part[1] b part[2] c part[3]. */
typedef struct keyshape {
  const char *part[4];
  int nargs;
} keyshape_t;

static const keyshape_t shapes[CDDP__JK_COUNT] = {
    [CDDP__JK_RDZV_SETTINGS] = {{"rdzv/settings"}, 0},
    [CDDP__JK_RDZV_MISMATCH] = {{"rdzv/mismatch"}, 0},
    [CDDP__JK_RDZV_JOINED] = {{"rdzv/", "/joined"}, 1},
    [CDDP__JK_RDZV_NODE] = {{"rdzv/", "/node/", ""}, 2},
    [CDDP__JK_RDZV_CLOSED] = {{"rdzv/", "/closed"}, 1},
    [CDDP__JK_RDZV_MEMBERS] = {{"rdzv/", "/members"}, 1},
    [CDDP__JK_RDZV_EVENT] = {{"rdzv/", "/event"}, 1},
    [CDDP__JK_RDZV_FAILURE] = {{"rdzv/", "/failure/", ""}, 2},
    [CDDP__JK_RDZV_NDONE] = {{"rdzv/", "/ndone"}, 1},
    [CDDP__JK_RDZV_NEXIT] = {{"rdzv/", "/nexit"}, 1},
    [CDDP__JK_RDZV_ALLEXIT] = {{"rdzv/", "/allexit"}, 1},
    [CDDP__JK_RDZV_DONE] = {{"rdzv/", "/done/", ""}, 2},
    [CDDP__JK_GEN] = {{"elastic/gen"}, 0},
    [CDDP__JK_GEN_ANNOUNCE] = {{"elastic/gen/", ""}, 1},
    [CDDP__JK_GEN_CLAIM] = {{"elastic/claim/", ""}, 1},
    [CDDP__JK_GEN_MEMBERS] = {{"elastic/members/", ""}, 1},
    [CDDP__JK_GEN_COMM] = {{"elastic/g", "/"}, 1},
    [CDDP__JK_RESTARTS] = {{"elastic/restarts"}, 0},
    [CDDP__JK_AGENTS] = {{"elastic/agents"}, 0},
    [CDDP__JK_HEARTBEAT] = {{"elastic/hb/", ""}, 1},
    [CDDP__JK_DEAD] = {{"elastic/dead/", ""}, 1},
    [CDDP__JK_LEFT] = {{"elastic/left/", ""}, 1},
    [CDDP__JK_PENDING] = {{"elastic/pending/", ""}, 1},
    [CDDP__JK_SPARE] = {{"elastic/spare/", ""}, 1},
    [CDDP__JK_WORLDS] = {{"elastic/worlds"}, 0},
    [CDDP__JK_STOP] = {{"elastic/stop"}, 0},
    [CDDP__JK_COMPLETE] = {{"elastic/complete"}, 0},
    [CDDP__JK_STORE_VOTE] = {{"elastic/vote/", "/", ""}, 2},
    [CDDP__JK_STATUS_SLOTS] = {{"status/slots"}, 0},
    [CDDP__JK_STATUS_NODE] = {{"status/node/", ""}, 1},
    [CDDP__JK_STATUS_EVENTS] = {{"status/events"}, 0},
    [CDDP__JK_STATUS_EVENT] = {{"status/event/", ""}, 1},
    [CDDP__JK_STATUS_ONCE] = {{"status/once/", ""}, 1},
    [CDDP__JK_RDZV_WATCH] = {{"rdzv-watch/latest"}, 0},
    [CDDP__JK_TORCH_SERVED] = {{"torch/served"}, 0},
    [CDDP__JK_TORCH_ROUND] = {{"torch/round"}, 0},
    [CDDP__JK_WORLD_DONE] = {{"world/g", "/done/", ""}, 2},
};

cddp__jobkey_t cddp__job_key3(cddp__jobkey_kind_t kind, int64_t a, int64_t b, int64_t c) {
  cddp__jobkey_t k = {{0}};
  if ((unsigned)kind >= CDDP__JK_COUNT) return k;
  const keyshape_t *sh = &shapes[kind];
  const int64_t arg[3] = {a, b, c};
  size_t o = 0;
  for (int i = 0; i <= sh->nargs && o < sizeof k.s; i++) {
    int n = i < sh->nargs ? snprintf(k.s + o, sizeof k.s - o, "%s%lld", sh->part[i], (long long)arg[i])
                          : snprintf(k.s + o, sizeof k.s - o, "%s", sh->part[i]);
    if (n < 0) break;
    o += (size_t)n;
  }
  return k;
}

cddp__jobkey_t cddp__job_key(cddp__jobkey_kind_t kind, int64_t a, int64_t b) { return cddp__job_key3(kind, a, b, 0); }

cddp__jobkey_t cddp__job_key_in(const char *run_id, cddp__jobkey_kind_t kind, int64_t a) {
  cddp__jobkey_t in = cddp__job_key(kind, a, 0), k;
  snprintf(k.s, sizeof k.s, "%.128s/%.100s", run_id, in.s);
  return k;
}

/* text as a NUL-terminated copy (the store's values are not) */
static void copy_text(char *dst, size_t size, const void *text, size_t len) {
  snprintf(dst, size, "%.*s", (int)CDDP_MIN(len, size - 1), text ? (const char *)text : "");
}

static size_t fitted(int n, size_t size) {
  if (n < 0) return 0;
  return (size_t)n < size ? (size_t)n : size ? size - 1 : 0;
}

size_t cddp__job_int_format(int64_t v, char *buf, size_t size) {
  return fitted(snprintf(buf, size, "%lld", (long long)v), size);
}

int cddp__job_int_parse(const void *text, size_t len, int64_t *out) {
  char t[32], *end;
  if (!text || len == 0 || len >= sizeof t) return -1;
  copy_text(t, sizeof t, text, len);
  long long x = strtoll(t, &end, 10);
  if (end == t) return -1;
  *out = x;
  return 0;
}

size_t cddp__job_settings_format(const cddp__job_settings_t *v, char *buf, size_t size) {
  return fitted(snprintf(buf, size, "%d %d %.63s", v->min_nodes, v->max_nodes, v->host), size);
}

int cddp__job_settings_parse(const void *text, size_t len, cddp__job_settings_t *out) {
  char t[160];
  copy_text(t, sizeof t, text, len);
  return sscanf(t, "%d %d %63s", &out->min_nodes, &out->max_nodes, out->host) == 3 ? 0 : -1;
}

#define MISMATCH "mismatch"
#define MISMATCH_LEN 8

static int is_mismatch(const void *text, size_t len) { return len == MISMATCH_LEN && !memcmp(text, MISMATCH, len); }

size_t cddp__job_node_format(const cddp__job_node_rec_t *v, char *buf, size_t size) {
  const cddp__job_node_t *n = &v->node;
  if (v->mismatch) return fitted(snprintf(buf, size, MISMATCH), size);
  return fitted(snprintf(buf, size, "%s %s %d %d %d %d %d", n->host, n->addr, n->nproc, n->master_port, n->id,
                         v->min_nodes, v->max_nodes), size);
}

int cddp__job_node_parse(const void *text, size_t len, cddp__job_node_rec_t *out) {
  char t[256];
  out->mismatch = 0;
  if (is_mismatch(text, len)) {
    out->mismatch = 1;
    return 0;
  }
  copy_text(t, sizeof t, text, len);
  cddp__job_node_t *nd = &out->node;
  nd->id = -1;
  int got = sscanf(t, "%63s %63s %d %d %d %d %d", nd->host, nd->addr, &nd->nproc, &nd->master_port, &nd->id,
                   &out->min_nodes, &out->max_nodes);
  return got < 4 || nd->nproc < 1 ? -1 : 0;
}

#define PACK_MIN 4096 /* a shorter list travels as text */
#define PACK_TAG "#z "

int cddp__job_list_pack(char **text, size_t *len) {
  if (*len < PACK_MIN || *len > UINT32_MAX) return 0;
  uLongf zl = compressBound((uLong)*len);
  char head[32];
  int hl = snprintf(head, sizeof head, PACK_TAG "%zu\n", *len);
  char *out = malloc((size_t)hl + zl);
  if (!out) return -1;
  memcpy(out, head, (size_t)hl);
  /* level 1: the closing node packs once for every reader; speed over the last few percent */
  if (compress2((Bytef *)out + hl, &zl, (const Bytef *)*text, (uLong)*len, 1) != Z_OK || hl + zl >= *len) {
    free(out);
    return 0;
  }
  free(*text);
  *text = out, *len = (size_t)hl + zl;
  return 0;
}

int cddp__job_list_unpack(const void *v, size_t len, size_t max, char **out, size_t *out_len) {
  const char *t = v;
  *out = NULL;
  if (len < 3 || memcmp(t, PACK_TAG, 3)) return 0;
  const char *nl = memchr(t, '\n', CDDP_MIN(len, (size_t)24));
  char num[24];
  unsigned long long raw = 0;
  int used = 0;
  if (!nl) return -1;
  copy_text(num, sizeof num, t + 3, (size_t)(nl - t - 3));
  if (sscanf(num, "%llu%n", &raw, &used) != 1 || num[used] || raw == 0 || raw > max || raw > UINT32_MAX) return -1;
  char *buf = malloc((size_t)raw + 1);
  uLongf got = (uLongf)raw;
  if (!buf) return -1;
  if (uncompress((Bytef *)buf, &got, (const Bytef *)nl + 1, (uLong)(len - (size_t)(nl + 1 - t))) != Z_OK ||
      got != raw) {
    free(buf);
    return -1;
  }
  buf[raw] = '\0';
  *out = buf, *out_len = (size_t)raw;
  return 0;
}

size_t cddp__job_closed_format(const cddp__job_closed_t *v, char *buf, size_t size) {
  if (v->mismatch) return fitted(snprintf(buf, size, MISMATCH), size);
  return cddp__job_int_format(v->nnodes, buf, size);
}

int cddp__job_closed_parse(const void *text, size_t len, cddp__job_closed_t *out) {
  int64_t n;
  out->mismatch = is_mismatch(text, len), out->nnodes = -1;
  if (out->mismatch) return 0;
  if (cddp__job_int_parse(text, len, &n) || n < 0) return -1;
  out->nnodes = (int)n;
  return 0;
}

size_t cddp__job_event_format(const cddp__job_event_t *v, char *buf, size_t size) {
  switch (v->kind) {
  case CDDP__EV_DONE: return fitted(snprintf(buf, size, "done"), size);
  case CDDP__EV_RESTART: /* the line, when there is one: why (a node lost) */
    return fitted(snprintf(buf, size, v->line[0] ? "restart %s" : "restart", v->line), size);
  case CDDP__EV_FAIL: return fitted(snprintf(buf, size, "fail %d %s", v->code, v->line), size);
  case CDDP__EV_NONE: break;
  }
  if (size) buf[0] = '\0';
  return 0;
}

int cddp__job_event_parse(const void *text, size_t len, cddp__job_event_t *out) {
  char t[sizeof out->line + 32];
  copy_text(t, sizeof t, text, len);
  memset(out, 0, sizeof *out);
  if (!strcmp(t, "done")) out->kind = CDDP__EV_DONE;
  else if (!strncmp(t, "restart", 7)) {
    out->kind = CDDP__EV_RESTART;
    if (t[7] == ' ') snprintf(out->line, sizeof out->line, "%.599s", t + 8);
  }
  else if (!strncmp(t, "fail ", 5)) {
    char *end;
    long code = strtol(t + 5, &end, 10);
    out->kind = CDDP__EV_FAIL;
    out->code = (int)code;
    snprintf(out->line, sizeof out->line, "%.599s", *end == ' ' ? end + 1 : t); /* no line: the whole value */
  }
  return out->kind == CDDP__EV_NONE ? -1 : 0;
}

size_t cddp__job_failure_format(const cddp__job_failure_t *v, char *buf, size_t size) {
  return fitted(snprintf(buf, size, "%llu %d %.600s", (unsigned long long)v->wall_ns, v->code, v->line), size);
}

int cddp__job_failure_parse(const void *text, size_t len, cddp__job_failure_t *out) {
  char t[sizeof out->line + 48];
  unsigned long long w;
  int off = 0;
  copy_text(t, sizeof t, text, len);
  memset(out, 0, sizeof *out);
  if (sscanf(t, "%llu %d %n", &w, &out->code, &off) != 2 || off <= 0) return -1;
  out->wall_ns = w;
  snprintf(out->line, sizeof out->line, "%.599s", t + off);
  return 0;
}

int cddp__members_parse(const char *text, size_t len, cddp__members_t *out) {
  memset(out, 0, sizeof *out);
  if (len >= 5 && !strncmp(text, "stop ", 5)) {
    out->stop = 1;
    snprintf(out->line, sizeof out->line, "%.*s", (int)(len - 5), text + 5);
    return 0;
  }
  const char *p = text, *end = text + len;
  if (len >= 5 && !strncmp(text, "wait ", 5)) { /* below MIN: "wait <ms> <lost>" then the members */
    const char *nl = memchr(text, '\n', len);
    int used = 0;
    if (!nl || sscanf(text, "wait %d %n", &out->wait_ms, &used) != 1 || !used || out->wait_ms <= 0 ||
        text + used > nl)
      return -1;
    snprintf(out->line, sizeof out->line, "%.*s", (int)(nl - (text + used)), text + used);
    p = nl + 1;
  }
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
    char line[128];
    if (l == 0 || l >= sizeof line || out->n >= CDDP__MAX_MEMBERS) return -1;
    memcpy(line, p, l);
    line[l] = '\0';
    cddp__member_t *m = &out->m[out->n];
    int used = 0;
    if (sscanf(line, "%d %d %63s%n", &m->id, &m->nproc, m->host, &used) != 3 || used != (int)l || m->id < 0 ||
        m->nproc < 1)
      return -1;
    for (int i = 0; i < out->n; i++)
      if (out->m[i].id == m->id) return -1;
    out->n++;
    p += l + (nl != NULL);
  }
  return out->n > 0 ? 0 : -1;
}

size_t cddp__members_format(const cddp__members_t *m, char *buf, size_t size) {
  size_t o = 0;
  if (m->stop) {
    int n = snprintf(buf, size, "stop %s", m->line);
    return n > 0 && (size_t)n < size ? (size_t)n : 0;
  }
  if (m->wait_ms > 0) {
    int n = snprintf(buf, size, "wait %d %s\n", m->wait_ms, m->line);
    if (n < 0 || (size_t)n >= size) return 0;
    o = (size_t)n;
  }
  for (int i = 0; i < m->n; i++) {
    int n = snprintf(buf + o, size - o, "%s%d %d %s", i ? "\n" : "", m->m[i].id, m->m[i].nproc, m->m[i].host);
    if (n < 0 || (size_t)n >= size - o) return 0;
    o += (size_t)n;
  }
  return o;
}

size_t cddp__job_vote_format(const cddp__job_vote_t *v, char *buf, size_t size) {
  int n = snprintf(buf, size, "gen %lld restarts %lld\n", (long long)v->gen, (long long)v->restarts);
  if (n < 0 || (size_t)n >= size) return 0;
  size_t m = cddp__members_format(&v->members, buf + n, size - (size_t)n);
  return m ? (size_t)n + m : 0;
}

int cddp__job_vote_parse(const void *text, size_t len, cddp__job_vote_t *out) {
  const char *t = text, *nl = t ? memchr(t, '\n', len) : NULL;
  char head[64];
  long long g, n = 0;
  int used = 0;
  if (!nl || (size_t)(nl - t) >= sizeof head) return -1;
  copy_text(head, sizeof head, t, (size_t)(nl - t));
  if (sscanf(head, "gen %lld restarts %lld%n", &g, &n, &used) != 2 || head[used] || g < 0 || n < 0) return -1;
  out->gen = g, out->restarts = n;
  return cddp__members_parse(nl + 1, len - (size_t)(nl + 1 - t), &out->members);
}

size_t cddp__job_pending_format(const cddp__member_t *v, char *buf, size_t size) {
  return fitted(snprintf(buf, size, "%d %s", v->nproc, v->host), size);
}

int cddp__job_pending_parse(const void *text, size_t len, cddp__member_t *out) {
  char t[128];
  copy_text(t, sizeof t, text, len);
  return sscanf(t, "%d %63s", &out->nproc, out->host) == 2 && out->nproc >= 1 ? 0 : -1;
}

size_t cddp__job_claim_format(int agent_id, const cddp__job_announce_t *what, char *buf, size_t size) {
  char ann[440];
  cddp__job_announce_format(what, ann, sizeof ann);
  return fitted(snprintf(buf, size, "%d %.140s", agent_id, ann), size);
}

static const char *const gen_kind_word[CDDP__GEN_KINDS] = {
    [CDDP__GEN_REPLACE] = "replace", [CDDP__GEN_LOSS] = "loss", [CDDP__GEN_JOIN] = "join",
    [CDDP__GEN_WAIT] = "wait",       [CDDP__GEN_STOP] = "stop", [CDDP__GEN_MOVED] = "moved",
    [CDDP__GEN_RESTART] = "restart", [CDDP__GEN_END] = "end",
};

size_t cddp__job_announce_format(const cddp__job_announce_t *v, char *buf, size_t size) {
  const char *word = v->kind > CDDP__GEN_NONE && v->kind < CDDP__GEN_KINDS ? gen_kind_word[v->kind] : "?";
  return fitted(snprintf(buf, size, "%s %s", word, v->what), size);
}

int cddp__job_announce_parse(const void *text, size_t len, cddp__job_announce_t *out) {
  const char *t = text, *sp = t ? memchr(t, ' ', len) : NULL;
  size_t wl = sp ? (size_t)(sp - t) : len;
  memset(out, 0, sizeof *out);
  for (int k = CDDP__GEN_NONE + 1; t && k < CDDP__GEN_KINDS; k++)
    if (strlen(gen_kind_word[k]) == wl && !memcmp(t, gen_kind_word[k], wl)) out->kind = (cddp__gen_kind_t)k;
  if (out->kind == CDDP__GEN_NONE) return -1;
  if (sp) copy_text(out->what, sizeof out->what, sp + 1, len - wl - 1);
  return 0;
}

cddp__job_announce_t cddp__job_announce_replace(int rank, int pid) {
  cddp__job_announce_t a = {.kind = CDDP__GEN_REPLACE};
  snprintf(a.what, sizeof a.what, "rank %d pid %d", rank, pid);
  return a;
}

cddp__job_announce_t cddp__job_announce_moved(int agent_id) {
  cddp__job_announce_t a = {.kind = CDDP__GEN_MOVED};
  snprintf(a.what, sizeof a.what, "store moved to agent %d", agent_id);
  return a;
}

size_t cddp__job_worlds_format(const int *sizes, int n, char *buf, size_t size) {
  size_t o = 0;
  if (size) buf[0] = '\0';
  for (int i = 0; i < n && o + 16 < size; i++)
    o += fitted(snprintf(buf + o, size - o, "%s%d", o ? " " : "", sizes[i]), size - o);
  return o;
}

int cddp__job_worlds_allow(const char *worlds, int w) {
  if (!worlds || !*worlds) return 1;
  for (const char *p = worlds; *p;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p) break;
    if (v == w) return 1;
    p = end;
    while (*p == ' ' || *p == ',') p++;
  }
  return 0;
}

/* server_core.c - the store server's protocol engine: handshake, auth, requests, parked waits. */
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/clock.h"
#include "store/server_core.h"
#include "store/torch_proto.h"

cddp_result_t cddp__core_init(cddp__srv_core_t *core, const char *token) {
  memset(core, 0, sizeof *core);
  cddp__kv_init(&core->kv);
  cddp__kv_init(&core->torch_kv);
  if (token && *token && !(core->token = strdup(token)))
    return cddp__fail(CDDP_SYSTEM, "store server: out of memory");
  return CDDP_OK;
}

void cddp__core_free(cddp__srv_core_t *core) {
  cddp__kv_free(&core->kv);
  cddp__kv_free(&core->torch_kv);
  free(core->torch_round_key);
  free(core->token);
  memset(core, 0, sizeof *core);
}

void cddp__conn_init(cddp__srv_conn_t *c, const char *addr) {
  memset(c, 0, sizeof *c);
  snprintf(c->addr, sizeof c->addr, "%s", addr);
}

static void unindex(cddp__srv_core_t *core, cddp__srv_conn_t *c) {
  if (!c->windexed) return;
  if (c->wprev) c->wprev->wnext = c->wnext;
  else core->waiters[c->whash % CDDP__SRV_WAIT_BUCKETS] = c->wnext;
  if (c->wnext) c->wnext->wprev = c->wprev;
  c->wnext = c->wprev = NULL;
  c->windexed = 0;
}

static void index_wait(cddp__srv_core_t *core, cddp__srv_conn_t *c) {
  cddp__srv_conn_t **b = &core->waiters[c->whash % CDDP__SRV_WAIT_BUCKETS];
  c->wprev = NULL;
  c->wnext = *b;
  if (*b) (*b)->wprev = c;
  *b = c;
  c->windexed = 1;
}

void cddp__core_unpark(cddp__srv_core_t *core, cddp__srv_conn_t *c) {
  unindex(core, c);
  if (!c->parked) return;
  if (c->pprev) c->pprev->pnext = c->pnext;
  else core->parked = c->pnext;
  if (c->pnext) c->pnext->pprev = c->pprev;
  c->pnext = c->pprev = NULL;
  c->parked = 0;
}

void cddp__core_park(cddp__srv_core_t *core, cddp__srv_conn_t *c, uint32_t timeout_ms) {
  c->parked = 1;
  c->deadline = cddp__now_ns() + (uint64_t)timeout_ms * 1000000ull;
  if (!core->parked || c->deadline < core->min_deadline) core->min_deadline = c->deadline;
  c->pprev = NULL;
  c->pnext = core->parked;
  if (core->parked) core->parked->pprev = c;
  core->parked = c;
}

static void push_ready(cddp__srv_core_t *core, cddp__srv_conn_t *c) {
  if (c->on_ready) return;
  c->on_ready = 1;
  c->rnext = NULL;
  if (core->ready_tail) core->ready_tail->rnext = c;
  else core->ready_head = c;
  core->ready_tail = c;
}

cddp__srv_conn_t *cddp__core_pop_ready(cddp__srv_core_t *core) {
  cddp__srv_conn_t *c = core->ready_head;
  if (!c) return NULL;
  core->ready_head = c->rnext;
  if (!core->ready_head) core->ready_tail = NULL;
  c->on_ready = 0;
  c->rnext = NULL;
  return c;
}

void cddp__conn_release(cddp__srv_core_t *core, cddp__srv_conn_t *c) {
  cddp__core_unpark(core, c);
  if (c->on_ready) { /* unlink from the ready list */
    cddp__srv_conn_t **pp = &core->ready_head, *prev = NULL;
    while (*pp && *pp != c) prev = *pp, pp = &(*pp)->rnext;
    if (*pp) *pp = c->rnext;
    if (core->ready_tail == c) core->ready_tail = prev;
    c->on_ready = 0;
  }
  cddp__wire_buf_free(&c->in);
  cddp__wire_buf_free(&c->out);
  free(c->will_key);
  free(c->will_val);
  c->will_key = NULL, c->will_val = NULL;
}

/* ---- answers ---- */

void cddp__conn_gone(cddp__srv_core_t *core, cddp__srv_conn_t *c) {
  if (!c->will_key) return;
  /* only where the key is absent: a value already there (a round's outcome) stands */
  int created = 0;
  cddp__kv_entry_t *cur = NULL;
  if (cddp__kv_compare_set(&core->kv, c->will_key, c->will_klen, NULL, 0, 0, c->will_val, c->will_vlen, &cur,
                           &created) == CDDP_OK && created)
    CDDP_INFO(CDDP_SUB_STORE, "store: %s left without a goodbye: its will set %s", c->addr, c->will_key);
  if (created) cddp__core_wake_key(core, c->will_key, c->will_klen);
  free(c->will_key), free(c->will_val);
  c->will_key = NULL, c->will_val = NULL;
}

static void reply_empty(cddp__srv_conn_t *c, uint8_t op) {
  cddp__wire_end(&c->out, cddp__wire_begin(&c->out, op));
}
static void reply_int(cddp__srv_conn_t *c, int64_t v) {
  size_t st = cddp__wire_begin(&c->out, CDDP__OP_INT);
  cddp__wire_u64(&c->out, (uint64_t)v);
  cddp__wire_end(&c->out, st);
}
static void reply_value(cddp__srv_conn_t *c, const cddp__kv_entry_t *e) {
  size_t st = cddp__wire_begin(&c->out, CDDP__OP_VALUE);
  cddp__wire_u8(&c->out, e != NULL);
  cddp__wire_str(&c->out, e ? e->val : NULL, e ? e->vlen : 0);
  cddp__wire_end(&c->out, st);
}
static void reply_timeout(cddp__srv_conn_t *c, uint32_t index) {
  size_t st = cddp__wire_begin(&c->out, CDDP__OP_TIMEOUT);
  cddp__wire_u32(&c->out, index);
  cddp__wire_end(&c->out, st);
}
static void reply_error(cddp__srv_conn_t *c, cddp_result_t code, const char *text) {
  size_t n = strnlen(text, CDDP__WIRE_MAX_ERROR_TEXT);
  size_t st = cddp__wire_begin(&c->out, CDDP__OP_ERROR);
  cddp__wire_u8(&c->out, (uint8_t)code);
  cddp__wire_str(&c->out, text, n);
  cddp__wire_end(&c->out, st);
}

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The pending GET/WAIT at the head of c->in: answers it when its keys exist (or, when
 * final, with TIMEOUT). 1 if answered. Keys found stay counted (pk_idx), so a re-check
 * after each key creation costs O(1) per parked conn, not O(keys): like torch's store, a
 * key deleted after it was seen does not un-satisfy the wait. */
static int try_answer(cddp__srv_core_t *core, cddp__srv_conn_t *c, int final) {
  const uint8_t *frame = c->in.p + c->in.off;
  while (c->pk_idx < c->pk_n) {
    uint32_t n = rd32(frame + c->pk_cur);
    const char *k = (const char *)frame + c->pk_cur + 4;
    cddp__kv_entry_t *e = cddp__kv_find(&core->kv, k, n);
    if (!e) {
      c->whash = cddp__kv_hash(k, n);
      break;
    }
    if (c->pk_op == CDDP__OP_GET) {
      reply_value(c, e);
      return 1;
    }
    c->pk_idx++;
    c->pk_cur += 4 + (size_t)n;
  }
  if (c->pk_idx == c->pk_n) reply_empty(c, CDDP__OP_OK);
  else if (final) reply_timeout(c, c->pk_op == CDDP__OP_GET ? 0 : c->pk_idx);
  else return 0;
  return 1;
}

static void retry_parked(cddp__srv_core_t *core, cddp__srv_conn_t *c, int final) {
  core->n_rechecks++;
  if (c->proto != CDDP__PROTO_CDDP) { /* torch's WAIT is served again from the top */
    cddp__core_unpark(core, c);
    push_ready(core, c);
    return;
  }
  unindex(core, c);
  if (!try_answer(core, c, final)) {
    index_wait(core, c); /* under the key it misses now */
    return;
  }
  cddp__core_unpark(core, c);
  c->in.off += c->pk_used;
  push_ready(core, c);
}

/* A key was created: parked waits may be satisfied now. */
void cddp__core_wake(cddp__srv_core_t *core) {
  cddp__srv_conn_t *c = core->parked, *next;
  for (; c; c = next) {
    next = c->pnext;
    retry_parked(core, c, 0);
  }
}

void cddp__core_wake_key(cddp__srv_core_t *core, const char *key, size_t klen) {
  uint64_t h = cddp__kv_hash(key, klen);
  cddp__srv_conn_t *c = core->waiters[h % CDDP__SRV_WAIT_BUCKETS], *next;
  for (; c; c = next) { /* a re-indexed conn goes to a bucket's head: never met again here */
    next = c->wnext;
    if (c->whash == h) retry_parked(core, c, 0);
  }
}

/* The scan runs only once the earliest deadline passed (not on every event), and renews it. */
void cddp__core_expire(cddp__srv_core_t *core, uint64_t now) {
  if (!core->parked || now < core->min_deadline) return;
  uint64_t d = UINT64_MAX;
  cddp__srv_conn_t *c = core->parked, *next;
  for (; c; c = next) {
    next = c->pnext;
    if (c->deadline <= now) retry_parked(core, c, 1);
    else d = CDDP_MIN(d, c->deadline);
  }
  core->min_deadline = d;
}

uint64_t cddp__core_next_deadline(const cddp__srv_core_t *core) {
  return core->parked ? core->min_deadline : UINT64_MAX;
}

/* ---- requests ---- */

/* A refused client is counted where the job can read it (CDDP_STORE_REFUSED_KEY). */
static void note_refused(cddp__srv_core_t *core, const char *addr) {
  static const char key[] = CDDP_STORE_REFUSED_KEY;
  cddp__kv_entry_t *e = cddp__kv_find(&core->kv, key, sizeof key - 1);
  long long n = e ? strtoll((const char *)e->val, NULL, 10) : 0;
  char val[200];
  int len = snprintf(val, sizeof val, "%lld %.150s", n + 1, addr);
  int created = 0;
  if (cddp__kv_set(&core->kv, key, sizeof key - 1, val, (size_t)len, &created) == CDDP_OK && created)
    cddp__core_wake_key(core, key, sizeof key - 1);
}

static int handshake(cddp__srv_core_t *core, cddp__srv_conn_t *c, const cddp__wire_msg_t *m) {
  if (c->state == CDDP__CONN_HELLO) {
    if (m->op != CDDP__OP_HELLO || m->magic != CDDP__WIRE_MAGIC) {
      CDDP_INFO(CDDP_SUB_STORE, "store: %s is not a cddp client (bad hello); closing", c->addr);
      return -1;
    }
    if (cddp__wire_nonce(c->nonce) != 0) {
      CDDP_WARN("store: getrandom failed; closing connection from %s", c->addr);
      return -1;
    }
    size_t st = cddp__wire_begin(&c->out, CDDP__OP_CHALLENGE);
    cddp__wire_u32(&c->out, CDDP__WIRE_MAGIC);
    cddp__wire_u16(&c->out, CDDP__WIRE_VERSION);
    cddp__wire_u8(&c->out, core->token != NULL);
    cddp__wire_raw(&c->out, c->nonce, CDDP__WIRE_NONCE);
    cddp__wire_end(&c->out, st);
    if (m->version != CDDP__WIRE_VERSION) { /* the client reports the mismatch */
      CDDP_INFO(CDDP_SUB_STORE, "store: %s speaks protocol v%u, we speak v%d; closing", c->addr,
                m->version, CDDP__WIRE_VERSION);
      c->closing = 1;
      return 0;
    }
    c->state = core->token ? CDDP__CONN_AUTH : CDDP__CONN_READY;
    if (!core->token) CDDP_INFO(CDDP_SUB_STORE, "store: %s joined (no token required)", c->addr);
    return 0;
  }
  /* CDDP__CONN_AUTH */
  uint8_t want[CDDP__WIRE_MAC], proof[CDDP__WIRE_MAC];
  if (m->op != CDDP__OP_AUTH) {
    CDDP_INFO(CDDP_SUB_STORE, "store: %s sent opcode 0x%02x before authenticating; closing",
              c->addr, m->op);
    return -1;
  }
  if (cddp__wire_mac(core->token, c->nonce, m->nonce, want) != 0 ||
      CRYPTO_memcmp(want, m->mac, CDDP__WIRE_MAC) != 0 ||
      cddp__wire_mac(core->token, m->nonce, c->nonce, proof) != 0) {
    CDDP_WARN("store: refused client %s: wrong or missing job token (CDDP_TOKEN)", c->addr);
    note_refused(core, c->addr);
    reply_empty(c, CDDP__OP_AUTH_FAIL);
    c->closing = 1;
    return 0;
  }
  size_t st = cddp__wire_begin(&c->out, CDDP__OP_AUTH_OK);
  cddp__wire_raw(&c->out, proof, CDDP__WIRE_MAC);
  cddp__wire_end(&c->out, st);
  c->state = CDDP__CONN_READY;
  CDDP_INFO(CDDP_SUB_STORE, "store: %s authenticated", c->addr);
  return 0;
}

/* 0: answered; 1: parked (frame stays in c->in); -1: close. */
static int handle(cddp__srv_core_t *core, cddp__srv_conn_t *c, const cddp__wire_frame_t *f,
                  size_t used) {
  cddp__wire_msg_t m;
  const char *err;
  if (cddp__wire_decode_request(f, &m, &err) != 0) {
    CDDP_INFO(CDDP_SUB_STORE, "store: bad request from %s (opcode 0x%02x): %s; closing", c->addr,
              f->op, err);
    return -1;
  }
  if (c->state != CDDP__CONN_READY) return handshake(core, c, &m);
  core->n_clients += !c->requested;
  core->n_requests++;
  c->requested = 1;
  int created = 0;
  cddp_result_t r = CDDP_OK;
  int64_t v;
  cddp__kv_entry_t *e;
  switch (m.op) {
    case CDDP__OP_SET:
      r = cddp__kv_set(&core->kv, m.key.p, m.key.n, m.val.p, m.val.n, &created);
      if (r == CDDP_OK) reply_empty(c, CDDP__OP_OK);
      break;
    case CDDP__OP_GET:
    case CDDP__OP_WAIT: /* the keys follow u32 timeout (GET) or u32 timeout, u32 nkeys */
      c->pk_op = m.op;
      c->pk_n = m.op == CDDP__OP_GET ? 1 : m.nkeys;
      c->pk_idx = 0;
      c->pk_cur = CDDP__WIRE_HDR + 1 + (m.op == CDDP__OP_GET ? 4 : 8);
      c->pk_used = used;
      if (try_answer(core, c, m.timeout_ms == 0)) return 0;
      cddp__core_park(core, c, m.timeout_ms);
      index_wait(core, c);
      return 1;
    case CDDP__OP_ADD:
      r = cddp__kv_add(&core->kv, m.key.p, m.key.n, m.num, &v, &created);
      if (r == CDDP_OK) reply_int(c, v);
      break;
    case CDDP__OP_CAS:
      r = cddp__kv_compare_set(&core->kv, m.key.p, m.key.n, m.expected.p, m.expected.n, m.flag,
                               m.val.p, m.val.n, &e, &created);
      if (r == CDDP_OK) reply_value(c, e);
      break;
    case CDDP__OP_DEL:
      reply_int(c, cddp__kv_del(&core->kv, m.key.p, m.key.n));
      break;
    case CDDP__OP_NUMKEYS:
      reply_int(c, (int64_t)core->kv.n);
      break;
    case CDDP__OP_WILL: {
      char *k = cddp__memdup_nul(m.key.p, m.key.n);
      uint8_t *val = cddp__memdup_nul(m.val.p, m.val.n);
      if (!k || !val) {
        free(k), free(val);
        r = cddp__fail(CDDP_SYSTEM, "store: out of memory keeping a will");
        break;
      }
      free(c->will_key), free(c->will_val);
      c->will_key = k, c->will_klen = m.key.n, c->will_val = val, c->will_vlen = m.val.n;
      reply_empty(c, CDDP__OP_OK);
      break;
    }
    case CDDP__OP_BYE:
      free(c->will_key), free(c->will_val);
      c->will_key = NULL, c->will_val = NULL;
      reply_empty(c, CDDP__OP_OK);
      break;
    default:
      CDDP_INFO(CDDP_SUB_STORE, "store: %s sent handshake opcode 0x%02x after joining; closing",
                c->addr, m.op);
      return -1;
  }
  if (r != CDDP_OK) reply_error(c, r, cddp_last_error());
  if (created) cddp__core_wake_key(core, m.key.p, m.key.n);
  return 0;
}

/* A torch client belongs to the round the round key names when it comes. A new round starts with
 * no torch keys; the last round's clients are closed when next served (torch_proto.c). */
static void torch_join_round(cddp__srv_core_t *core, cddp__srv_conn_t *c) {
  if (!core->torch_round_key) return;
  const cddp__kv_entry_t *e = cddp__kv_find(&core->kv, core->torch_round_key, strlen(core->torch_round_key));
  size_t n = e ? CDDP_MIN(e->vlen, sizeof c->torch_round) : 0;
  if (n) memcpy(c->torch_round, e->val, n);
  c->torch_round_len = (uint8_t)n;
  if (n == core->torch_round_len && !memcmp(c->torch_round, core->torch_round, n)) return;
  CDDP_INFO(CDDP_SUB_STORE, "store: torch round '%.*s' begins with %s; the %zu keys of round '%.*s' go", (int)n,
            c->torch_round, c->addr, core->torch_kv.n, (int)core->torch_round_len, core->torch_round);
  cddp__kv_free(&core->torch_kv);
  cddp__kv_init(&core->torch_kv);
  memcpy(core->torch_round, c->torch_round, n);
  core->torch_round_len = (uint8_t)n;
  cddp__core_wake(core); /* the last round's parked torch clients are served again: closed */
}

int cddp__core_process(cddp__srv_core_t *core, cddp__srv_conn_t *c) {
  if (c->proto == CDDP__PROTO_UNKNOWN) {
    size_t have = c->in.len - c->in.off; /* none yet: the buffer may not exist (NULL + 0 is UB) */
    int proto = core->torch ? cddp__torch_sniff(have ? c->in.p + c->in.off : NULL, have) : CDDP__PROTO_CDDP;
    if (proto < 0) return 0; /* too few bytes to tell */
    c->proto = proto;
    if (proto != CDDP__PROTO_CDDP) {
      c->state = CDDP__CONN_READY; /* torch's protocol has no authentication */
      CDDP_INFO(CDDP_SUB_STORE, "store: %s speaks torch %s's TCPStore protocol", c->addr,
                proto == CDDP__PROTO_TORCH2 ? "2.x" : "1.x");
      torch_join_round(core, c);
    }
  }
  if (c->proto != CDDP__PROTO_CDDP) return cddp__torch_process(core, c);
  uint32_t limit = c->state == CDDP__CONN_READY ? CDDP__WIRE_MAX_LEN : CDDP__WIRE_MAX_LEN_HANDSHAKE;
  while (!c->parked && !c->closing && c->out.len - c->out.off < CDDP__SRV_OUT_HIGH) {
    cddp__wire_frame_t f;
    size_t used;
    const char *err;
    if (c->in.len == c->in.off) break;
    int r = cddp__wire_parse(c->in.p + c->in.off, c->in.len - c->in.off, limit, &f, &used, &err);
    if (r == CDDP__WIRE_NEED_MORE) break;
    if (r == CDDP__WIRE_ERROR) {
      CDDP_INFO(CDDP_SUB_STORE, "store: garbage from %s: %s; closing", c->addr, err);
      return -1;
    }
    int h = handle(core, c, &f, used);
    if (h < 0) return -1;
    if (h == 0) c->in.off += used;
    limit = c->state == CDDP__CONN_READY ? CDDP__WIRE_MAX_LEN : CDDP__WIRE_MAX_LEN_HANDSHAKE;
  }
  if (c->out.oom) {
    CDDP_WARN("store: out of memory answering %s; closing", c->addr);
    return -1;
  }
  if (c->in.off) { /* what remains is at most a partial frame: move it to the front */
    memmove(c->in.p, c->in.p + c->in.off, c->in.len - c->in.off);
    c->in.len -= c->in.off;
    c->in.off = 0;
  }
  return 0;
}

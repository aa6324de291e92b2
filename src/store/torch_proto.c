/* torch_proto.c - torch's TCPStore wire protocol, 1.x and 2.x, over the store's kv table
 * (torch_proto.h).
 *
 * A request is one query byte, then its fields, little-endian as the hosts are; a string or a
 * byte vector is a uint64 length and the bytes. The queries as torch 2.x numbers them (1.x's
 * lack VALIDATE, so each of its numbers is one less, and its 7 is WATCH_KEY, not served):
 *   VALIDATE 0: uint32 magic               (no reply; 2.x's first request)
 *   SET 1: key, value                      (no reply)
 *   COMPARE_SET 2: key, expected, desired  -> value (a missing key is set when expected is
 *                                             empty, else expected comes back, as torch)
 *   GET 3: key                             -> value (clients WAIT first; missing: empty)
 *   ADD 4: key, int64                      -> int64 (kept as decimal text, as torch keeps it)
 *   CHECK 5: uint64 n, n keys              -> uint8 0 ready / 1 not ready
 *   WAIT 6: uint64 n, n keys               -> uint8 0 once every key exists (parked till then)
 *   GETNUMKEYS 7                           -> int64
 *   DELETE_KEY 8: key                      -> int64 keys deleted
 *   APPEND 9: key, value                   (no reply; appends to the value, or sets it)
 *   MULTI_GET 10: uint64 n, n keys         -> n values
 *   MULTI_SET 11: uint64 n, n (key, value) (no reply)
 *   CANCEL_WAIT 12                         -> uint8 1 WAIT_CANCELED (a parked WAIT is dropped)
 *   PING 13: uint32 nonce                  -> the nonce (2.x's second request)
 * The queue queries (14..) and anything else close the connection with a line saying which.
 * No authentication, as torch's own: the keys are apart from the job's (core->torch_kv), so an
 * unauthenticated torch client never reads or writes what cddp's clients keep. */
#include "store/torch_proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/log.h"

enum { T_VALIDATE, T_SET, T_COMPARE_SET, T_GET, T_ADD, T_CHECK, T_WAIT, T_GETNUMKEYS, T_DELETE_KEY,
       T_APPEND, T_MULTI_GET, T_MULTI_SET, T_CANCEL_WAIT, T_PING, T_UNSERVED = 0xff };

#define KEY_MAX (64u << 10)          /* torch's rendezvous keys are short: longer is not torch */
#define VALUE_MAX CDDP_STORE_MAX_VALUE
#define KEYS_MAX (128u << 10)        /* keys in one CHECK/WAIT/MULTI_*, as torch's libuv server */
#define REQUEST_MAX CDDP__WIRE_MAX_LEN /* one request, all fields together */

#define CDDP_HELLO_LEN 7 /* a cddp hello frame: u32 len = 7 (op, u32 magic, u16 version) */

int cddp__torch_sniff(const uint8_t *p, size_t n) {
  if (n == 0) return -1;
  if (p[0] == CDDP_HELLO_LEN) return CDDP__PROTO_CDDP; /* torch 1.x's 7 is WATCH_KEY: not served */
  if (p[0] != T_VALIDATE) return CDDP__PROTO_TORCH1; /* 2.x always validates first */
  if (n < 5) return -1;
  uint32_t magic = (uint32_t)p[1] | (uint32_t)p[2] << 8 | (uint32_t)p[3] << 16 | (uint32_t)p[4] << 24;
  /* a 1.x SET whose key length starts with the magic would be a key of about 1 GB: refused */
  return magic == CDDP__TORCH_MAGIC ? CDDP__PROTO_TORCH2 : CDDP__PROTO_TORCH1;
}

/* A cursor over one request in the input: fields are taken while they are complete. */
typedef struct cursor {
  const uint8_t *p;
  size_t left, used;
  int short_;      /* the request is not all here yet */
  const char *bad; /* why the request is not torch's */
} cursor_t;

/* An n-byte integer (4 or 8), in the hosts' byte order as torch sends it. */
static uint64_t take_int(cursor_t *cu, size_t n) {
  uint64_t v = 0;
  if (cu->short_ || cu->bad) return 0;
  if (cu->left < n) return cu->short_ = 1, 0;
  memcpy(&v, cu->p, n);
  cu->p += n, cu->left -= n, cu->used += n;
  return v;
}
#define take_u64(cu) take_int(cu, 8)
#define take_u32(cu) ((uint32_t)take_int(cu, 4))

static const char *take_vec(cursor_t *cu, size_t max, const char *what, size_t *n) {
  uint64_t len = take_u64(cu);
  *n = 0;
  if (cu->short_ || cu->bad) return NULL;
  if (len > max) return cu->bad = what, NULL;
  if (cu->used + len > REQUEST_MAX) return cu->bad = "a request larger than torch sends", NULL;
  if (cu->left < len) return cu->short_ = 1, NULL;
  const char *v = (const char *)cu->p;
  cu->p += len, cu->left -= len, cu->used += len;
  *n = (size_t)len;
  return v;
}
#define take_key(cu, n) take_vec(cu, KEY_MAX, "a key longer than torch sends", n)
#define take_val(cu, n) take_vec(cu, VALUE_MAX, "a value larger than the store keeps", n)

static uint64_t take_count(cursor_t *cu) {
  uint64_t n = take_u64(cu);
  if (!cu->short_ && !cu->bad && n > KEYS_MAX) cu->bad = "more keys in one request than torch sends";
  return n;
}

/* Whether the request's n keys (and values, when pairs) are all here: walks them once so
 * nothing acts on half a request. */
static int walk(cursor_t *cu, uint64_t n, int pairs) {
  size_t len;
  for (uint64_t i = 0; i < n && !cu->short_ && !cu->bad; i++) {
    take_key(cu, &len);
    if (pairs) take_val(cu, &len);
  }
  return !cu->short_ && !cu->bad;
}

static void reply_vec(cddp__srv_conn_t *c, const void *p, size_t n) {
  cddp__wire_u64(&c->out, n);
  cddp__wire_raw(&c->out, p, n);
}

static void reply_entry(cddp__srv_conn_t *c, const cddp__kv_entry_t *e) {
  reply_vec(c, e ? e->val : NULL, e ? e->vlen : 0);
}

static const char *query_name(int q) {
  static const char *names[] = {"VALIDATE", "SET", "COMPARE_SET", "GET", "ADD", "CHECK", "WAIT",
                                "GETNUMKEYS", "DELETE_KEY", "APPEND", "MULTI_GET", "MULTI_SET",
                                "CANCEL_WAIT", "PING", "QUEUE_PUSH", "QUEUE_POP", "QUEUE_LEN"};
  return q >= 0 && q < (int)CDDP_ARRAY_LEN(names) ? names[q] : "unknown";
}

/* torch 1.x numbers its queries from SET = 0, and its 7 is WATCH_KEY. */
static int query_of(const cddp__srv_conn_t *c, uint8_t raw) {
  if (c->proto == CDDP__PROTO_TORCH2) return raw;
  if (raw <= 6) return raw + 1;
  return raw == 8 ? T_DELETE_KEY : T_UNSERVED;
}

static cddp_result_t append(cddp__kv_t *kv, const char *k, size_t kn, const char *v, size_t vn, int *created) {
  cddp__kv_entry_t *e = cddp__kv_find(kv, k, kn);
  if (!e) return cddp__kv_set(kv, k, kn, v, vn, created);
  uint8_t *both = malloc(e->vlen + vn + 1);
  if (!both) return cddp__fail(CDDP_SYSTEM, "store: out of memory appending to key %.*s", (int)CDDP_MIN(kn, 200), k);
  memcpy(both, e->val, e->vlen);
  if (vn) memcpy(both + e->vlen, v, vn);
  cddp_result_t r = cddp__kv_set(kv, k, kn, both, e->vlen + vn, created);
  free(both);
  return r;
}

/* One request at the head of c->in. 0: served (cu->used bytes); 1: incomplete or parked
 * (nothing consumed); -1: close. */
static int serve_one(cddp__srv_core_t *core, cddp__srv_conn_t *c, size_t *used) {
  cddp__kv_t *kv = &core->torch_kv;
  const uint8_t *head = c->in.p + c->in.off;
  cursor_t cu = {.p = head + 1, .left = c->in.len - c->in.off - 1, .used = 1};
  int q = query_of(c, head[0]), created = 0;
  size_t kn, vn, en;
  const char *k, *v, *e;
  cddp_result_t r = CDDP_OK;
  switch (q) {
    case T_VALIDATE: {
      uint32_t magic = take_u32(&cu);
      if (!cu.short_ && magic != CDDP__TORCH_MAGIC) cu.bad = "a VALIDATE with the wrong magic number";
      break;
    }
    case T_SET:
      k = take_key(&cu, &kn), v = take_val(&cu, &vn);
      if (!cu.short_ && !cu.bad) r = cddp__kv_set(kv, k, kn, v, vn, &created);
      break;
    case T_APPEND:
      k = take_key(&cu, &kn), v = take_val(&cu, &vn);
      if (!cu.short_ && !cu.bad) r = append(kv, k, kn, v, vn, &created);
      break;
    case T_COMPARE_SET:
      k = take_key(&cu, &kn), e = take_val(&cu, &en), v = take_val(&cu, &vn);
      if (cu.short_ || cu.bad) break;
      cddp__kv_entry_t *have = cddp__kv_find(kv, k, kn);
      if (!have && en != 0) reply_vec(c, e, en); /* torch: no key and a non-empty expected */
      else if (!have || (have->vlen == en && !memcmp(have->val, e, en))) {
        r = cddp__kv_set(kv, k, kn, v, vn, &created);
        reply_vec(c, v, vn);
      } else {
        reply_entry(c, have);
      }
      break;
    case T_GET:
      k = take_key(&cu, &kn);
      if (!cu.short_ && !cu.bad) reply_entry(c, cddp__kv_find(kv, k, kn));
      break;
    case T_ADD: {
      k = take_key(&cu, &kn);
      int64_t delta = (int64_t)take_u64(&cu), now = 0;
      if (cu.short_ || cu.bad) break;
      r = cddp__kv_add(kv, k, kn, delta, &now, &created);
      if (r == CDDP_OK) cddp__wire_u64(&c->out, (uint64_t)now);
      break;
    }
    case T_CHECK:
    case T_WAIT:
    case T_MULTI_GET: {
      uint64_t n = take_count(&cu);
      cursor_t keys = cu;
      if (!walk(&cu, n, 0)) break;
      int all = 1;
      for (uint64_t i = 0; i < n && all; i++) {
        k = take_key(&keys, &kn);
        if (q != T_MULTI_GET) all = cddp__kv_find(kv, k, kn) != NULL;
        else reply_entry(c, cddp__kv_find(kv, k, kn));
      }
      if (q == T_CHECK) cddp__wire_u8(&c->out, all ? 0 : 1);
      if (q == T_WAIT && !all) { /* looked at again when a key is created (server_core.c) */
        c->pk_used = cu.used;
        c->requested = 1;
        cddp__core_park(core, c, UINT32_MAX);
        return 1;
      }
      if (q == T_WAIT) cddp__wire_u8(&c->out, 0);
      break;
    }
    case T_MULTI_SET: {
      uint64_t n = take_count(&cu);
      cursor_t pairs = cu;
      if (!walk(&cu, n, 1)) break;
      for (uint64_t i = 0; i < n && r == CDDP_OK; i++) {
        int made = 0;
        k = take_key(&pairs, &kn), v = take_val(&pairs, &vn);
        r = cddp__kv_set(kv, k, kn, v, vn, &made);
        created |= made;
      }
      break;
    }
    case T_GETNUMKEYS:
      cddp__wire_u64(&c->out, (uint64_t)kv->n);
      break;
    case T_DELETE_KEY:
      k = take_key(&cu, &kn);
      if (!cu.short_ && !cu.bad) cddp__wire_u64(&c->out, (uint64_t)cddp__kv_del(kv, k, kn));
      break;
    case T_CANCEL_WAIT:
      cddp__wire_u8(&c->out, 1); /* WAIT_CANCELED */
      break;
    case T_PING: {
      uint32_t nonce = take_u32(&cu);
      if (!cu.short_) cddp__wire_u32(&c->out, nonce);
      break;
    }
    default:
      CDDP_INFO(CDDP_SUB_STORE, "store: %s sent torch %s query %d (%s), which is not served; closing", c->addr,
                c->proto == CDDP__PROTO_TORCH2 ? "2.x" : "1.x", head[0],
                c->proto == CDDP__PROTO_TORCH2 ? query_name(head[0]) : head[0] == 7 ? "WATCH_KEY" : "unknown");
      return -1;
  }
  if (cu.bad) {
    CDDP_INFO(CDDP_SUB_STORE, "store: %s sent torch %s with %s; closing", c->addr, query_name(q), cu.bad);
    return -1;
  }
  if (cu.short_) return 1;
  if (r != CDDP_OK) { /* torch's server drops the client too (ADD to a value that is no number) */
    CDDP_INFO(CDDP_SUB_STORE, "store: %s: torch %s failed: %s; closing", c->addr, query_name(q), cddp_last_error());
    return -1;
  }
  if (created) cddp__core_wake(core);
  core->n_clients += !c->requested;
  core->n_requests++;
  c->requested = 1; /* a client now, not a stranger that only connected (store_server.c sweeps those) */
  *used = cu.used;
  return 0;
}

/* While a WAIT is parked the connection is still read: torch 2.x's client may give up on it
 * (its own timeout) and send CANCEL_WAIT, then read an answer; it gets WAIT_CANCELED and the
 * WAIT is dropped. Other requests behind a WAIT wait for it, up to one request's worth.
 * 0: go on; 1: still parked; -1: close. */
static int cancel_parked(cddp__srv_core_t *core, cddp__srv_conn_t *c) {
  size_t after = c->in.len - c->in.off - c->pk_used;
  if (after == 0) return 1;
  if (c->proto != CDDP__PROTO_TORCH2 || c->in.p[c->in.off + c->pk_used] != T_CANCEL_WAIT) {
    if (after <= REQUEST_MAX) return 1; /* requests sent behind the WAIT: served after it */
    CDDP_INFO(CDDP_SUB_STORE, "store: %s sent more than a request's worth during a WAIT; closing", c->addr);
    return -1;
  }
  cddp__core_unpark(core, c);
  cddp__wire_u8(&c->out, 1); /* WAIT_CANCELED */
  c->in.off += c->pk_used + 1;
  return 0;
}

int cddp__torch_process(cddp__srv_core_t *core, cddp__srv_conn_t *c) {
  if (core->torch_round_key && (c->torch_round_len != core->torch_round_len ||
                                memcmp(c->torch_round, core->torch_round, c->torch_round_len))) {
    CDDP_INFO(CDDP_SUB_STORE, "store: %s is a torch client of round '%.*s', which is over; closing", c->addr,
              (int)c->torch_round_len, c->torch_round);
    return -1;
  }
  if (c->parked) {
    int r = cancel_parked(core, c);
    if (r < 0) return -1;
    if (r > 0) return 0;
  }
  while (!c->parked && !c->closing && c->in.len > c->in.off && c->out.len - c->out.off < CDDP__SRV_OUT_HIGH) {
    size_t used = 0;
    int r = serve_one(core, c, &used);
    if (r < 0) return -1;
    if (r > 0) break;
    c->in.off += used;
  }
  if (c->out.oom) {
    CDDP_WARN("store: out of memory answering %s; closing", c->addr);
    return -1;
  }
  if (c->in.off) { /* what remains is at most a partial request: move it to the front */
    memmove(c->in.p, c->in.p + c->in.off, c->in.len - c->in.off);
    c->in.len -= c->in.off;
    c->in.off = 0;
  }
  return 0;
}

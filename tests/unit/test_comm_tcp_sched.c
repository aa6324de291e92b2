/* test_comm_tcp_sched.c - TCP schedule arithmetic, handshake frames and address strings (pure). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

#include "comm/tcp.h"
#include "test.h"

TEST(tcp_split_covers_exactly) {
  for (size_t n = 0; n < 50; n++)
    for (size_t parts = 1; parts < 9; parts++) {
      size_t next = 0;
      for (size_t i = 0; i < parts; i++) {
        size_t off, len;
        cddp__tcp_split(n, parts, i, &off, &len);
        CHECK_EQ(off, next);
        CHECK(len == n / parts || len == n / parts + 1);
        next = off + len;
      }
      CHECK_EQ(next, n);
    }
  CHECK_EQ(cddp__tcp_nchunks(0, 256), 1);
  CHECK_EQ(cddp__tcp_nchunks(256, 256), 1);
  CHECK_EQ(cddp__tcp_nchunks(257, 256), 2);
}

/* Simulates the ring in lock step with one bit per contributing rank: after the
 * reduce-scatter steps rank r holds every contribution of block r (and every block's
 * contributions were added in one chain), after the allgather steps every rank holds
 * every contribution of every block. */
TEST(tcp_ring_schedule_reduces_every_block_once) {
  for (int n = 2; n <= 9; n++) {
    uint32_t have[16][16]; /* have[rank][block]: bit set of contributions */
    for (int r = 0; r < n; r++)
      for (int b = 0; b < n; b++) have[r][b] = 1u << r;
    for (int s = 0; s < 2 * (n - 1); s++) {
      uint32_t msg[16];
      int sent_block[16];
      for (int r = 0; r < n; r++) {
        int sb, rb;
        cddp__tcp_ring_blocks(r, n, s, &sb, &rb);
        msg[r] = have[r][sb], sent_block[r] = sb;
      }
      for (int r = 0; r < n; r++) {
        int sb, rb, prev = (r + n - 1) % n;
        cddp__tcp_ring_blocks(r, n, s, &sb, &rb);
        CHECK_EQ(rb, sent_block[prev]); /* what prev sends is what I expect */
        if (s < n - 1) {
          CHECK_EQ(msg[prev] & have[r][rb], 0); /* nothing added twice */
          have[r][rb] |= msg[prev];
        } else {
          have[r][rb] = msg[prev];
        }
      }
      if (s == n - 2)
        for (int r = 0; r < n; r++) CHECK_EQ(have[r][r], (1u << n) - 1);
    }
    for (int r = 0; r < n; r++)
      for (int b = 0; b < n; b++) CHECK_EQ(have[r][b], (1u << n) - 1);
  }
}

TEST(tcp_needs_is_symmetric_and_covers_algorithms) {
  for (int n = 1; n <= 17; n++) {
    int p2 = cddp__tcp_pow2_floor(n);
    CHECK(p2 <= n && 2 * p2 > n);
    for (int r = 0; r < n; r++) {
      int deg = 0;
      CHECK(!cddp__tcp_needs(r, n, r));
      for (int p = 0; p < n; p++) {
        CHECK_EQ(cddp__tcp_needs(r, n, p), cddp__tcp_needs(p, n, r));
        deg += cddp__tcp_needs(r, n, p);
      }
      if (n > 1) CHECK(cddp__tcp_needs(r, n, (r + 1) % n));
      for (int m = 1; r < p2 && m < p2; m <<= 1) CHECK(cddp__tcp_needs(r, n, r ^ m));
      if (r >= p2) CHECK(cddp__tcp_needs(r, n, r - p2));
      CHECK(deg <= 2 + 6 + 1); /* O(log n) connections, not a full mesh */
    }
  }
}

TEST(tcp_hello_round_trip_and_rejects) {
  cddp__tcp_hello_t h = {CDDP__TCP_MAGIC, CDDP__TCP_VERSION, CDDP__TCP_HELLO, 7, 4, 1, 3, 1, 2,
                         0x0123456789abcdefull}, g;
  unsigned char b[CDDP__TCP_HELLO_BYTES];
  cddp__tcp_hello_encode(&h, b);
  CHECK_EQ(cddp__tcp_hello_decode(b, &g), 0);
  CHECK(memcmp(&h, &g, sizeof h) == 0);
  b[0] ^= 1;
  CHECK_EQ(cddp__tcp_hello_decode(b, &g), -1);
  b[0] ^= 1;
  b[4] = 9;
  CHECK_EQ(cddp__tcp_hello_decode(b, &g), -2);
  memcpy(b, "GET / HTTP/1.1\r\nHost: x\r\n\r\n.............", sizeof b);
  CHECK_EQ(cddp__tcp_hello_decode(b, &g), -1);
}

TEST(tcp_addr_format_parse) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(4242)};
  inet_pton(AF_INET, "192.0.2.2", &a.sin_addr);
  char buf[128];
  cddp__tcp_addr_format((struct sockaddr *)&a, 0xabcull, buf, sizeof buf);
  CHECK(strcmp(buf, "192.0.2.2:4242 0000000000000abc") == 0);
  struct sockaddr_storage ss;
  socklen_t len;
  uint64_t nonce;
  CHECK_OK(cddp__tcp_addr_parse(buf, &ss, &len, &nonce));
  CHECK_EQ(nonce, 0xabc);
  CHECK(memcmp(&ss, &a, sizeof a) == 0);
  CHECK_OK(cddp__tcp_addr_parse("[fd00::2]:80 1", &ss, &len, &nonce));
  CHECK_EQ(ss.ss_family, AF_INET6);
  CHECK_EQ(len, sizeof(struct sockaddr_in6));
  const char *bad[] = {"", "1.2.3.4", "1.2.3.4:0 1", "1.2.3.4:99999 1", "host:80 1", "1.2.3.4:80",
                       "1.2.3.4:80 zz", "[fd00::2:80 1", "1.2.3.4:80 1 extra"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    CHECK_RESULT(cddp__tcp_addr_parse(bad[i], &ss, &len, &nonce), CDDP_INVALID_ARG);
    CHECK(strstr(cddp_last_error(), "malformed TCP address") != NULL);
  }
}

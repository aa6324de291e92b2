/* test_job_events.c - the agent's typed events (job/events.h): what one thread sends, the main
 * loop reads whole, with its fields; a kind outside the enum is dropped, never acted on. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "job/events.h"
#include "test.h"

TEST(events_arrive_whole_with_their_fields) {
  int p[2];
  CHECK(pipe2(p, O_NONBLOCK) == 0);
  cddp__agent_ev_say(p[1], CDDP__AEV_LOST, 3, 0, 0, "no heartbeat for %d ms", 2100);
  cddp__agent_ev_say(p[1], CDDP__AEV_FROZE, 0, 0, 5206, NULL);
  cddp__agent_ev_say(p[1], CDDP__AEV_MINORITY, 1, 3, 0, NULL);
  cddp__agent_ev_say(p[1], CDDP__AEV_GEN, 0, 0, 1LL << 40, NULL);
  cddp__agent_ev_t ev[8];
  CHECK_EQ(cddp__agent_ev_recv(p[0], ev, 8), 4);
  CHECK_EQ(ev[0].kind, CDDP__AEV_LOST);
  CHECK_EQ(ev[0].id, 3);
  CHECK(!strcmp(ev[0].why, "no heartbeat for 2100 ms"));
  CHECK_EQ(ev[1].kind, CDDP__AEV_FROZE);
  CHECK_EQ(ev[1].value, 5206);
  CHECK(ev[1].why[0] == '\0');
  CHECK_EQ(ev[2].id, 1);
  CHECK_EQ(ev[2].n, 3);
  CHECK_EQ(ev[3].value, 1LL << 40); /* a generation past int: no text round trip truncates it */
  CHECK_EQ(cddp__agent_ev_recv(p[0], ev, 8), 0);
  close(p[0]), close(p[1]);
}

TEST(events_unknown_kinds_and_long_text_are_bounded) {
  int p[2];
  CHECK(pipe2(p, O_NONBLOCK) == 0);
  cddp__agent_ev_t bad;
  memset(&bad, 0x7f, sizeof bad); /* a kind no enum value has, and a why with no terminator */
  cddp__agent_ev_send(p[1], &bad);
  char longer[400];
  memset(longer, 'x', sizeof longer - 1), longer[sizeof longer - 1] = '\0';
  cddp__agent_ev_say(p[1], CDDP__AEV_CUT, 0, 0, 0, "%s", longer);
  cddp__agent_ev_t ev[4];
  CHECK_EQ(cddp__agent_ev_recv(p[0], ev, 4), 1);
  CHECK_EQ(ev[0].kind, CDDP__AEV_CUT);
  CHECK_EQ(strlen(ev[0].why), sizeof ev[0].why - 1);
  close(p[0]), close(p[1]);
}

TEST(events_the_last_kind_is_read_the_one_past_it_dropped) {
  int p[2];
  CHECK(pipe2(p, O_NONBLOCK) == 0);
  cddp__agent_ev_say(p[1], CDDP__AEV_STORE_MOVED, 2, 0, 1, NULL); /* restart-all's move: the enum's last */
  cddp__agent_ev_t past = {.kind = CDDP__AEV_STORE_MOVED + 1};
  cddp__agent_ev_send(p[1], &past);
  cddp__agent_ev_t ev[4];
  CHECK_EQ(cddp__agent_ev_recv(p[0], ev, 4), 1);
  CHECK_EQ(ev[0].kind, CDDP__AEV_STORE_MOVED);
  CHECK_EQ(ev[0].id, 2);
  CHECK_EQ(ev[0].value, 1);
  close(p[0]), close(p[1]);
}

TEST(events_more_than_the_reader_takes_wait_for_the_next_read) {
  int p[2];
  CHECK(pipe2(p, O_NONBLOCK) == 0);
  for (int i = 0; i < 5; i++) cddp__agent_ev_say(p[1], CDDP__AEV_PENDING, i, 0, 0, NULL);
  cddp__agent_ev_t ev[3];
  CHECK_EQ(cddp__agent_ev_recv(p[0], ev, 3), 3);
  CHECK_EQ(ev[2].id, 2);
  CHECK_EQ(cddp__agent_ev_recv(p[0], ev, 3), 2);
  CHECK_EQ(ev[0].id, 3);
  close(p[0]), close(p[1]);
}

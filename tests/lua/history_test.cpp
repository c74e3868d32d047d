// A finished job's history (lua/lib/history.lua): what ack, nack, cancel and
// reclaim keep of a done or cancelled job, what `dueq job` shows of it, and
// how the sweep trims it by age and by count. Real redis-server.
#include "tests/lua/scripts_fixture.hpp"

using namespace dueq;
using namespace dueq::broker;
using namespace dueq::testing::scripts;

namespace {

std::string hlen(dueq::testing::RedisServer& redis) { return redis.cli("HLEN 'dueq:{q}:history'"); }

// The acks of `jobs`, all finished at `finished_ms` in one call that keeps
// their documents.
Command ack_all_at(int64_t finished_ms, const std::vector<LeasedJob>& jobs) {
  std::vector<AckItem> items;
  for (const auto& j : jobs) items.push_back({j.id, j.token, 1, "w"});
  return calls::ack("q", finished_ms, 60, items, true);
}

}  // namespace

TEST_F(Scripts, ADoneJobKeepsItsDocumentWithItsStartWorkerAndErrorsWhileItsQueueKeepsHistory) {
  enqueue({job("a")}, 1000);
  auto first = lease(1, 5000);
  Round failed;
  failed.add(calls::nack("q", 1500, 0, 0, 60, {{"a", first[0].token, NackMode::retry, "smtp 451", 0, "w-1"}}));
  run(failed);
  auto second = lease(1, 6000);
  ASSERT_EQ(second.size(), 1u);
  Round ack;
  ack.add(calls::ack("q", 2000, 60, {{"a", second[0].token, 1900, std::string("w\xff\t2", 4)}}, true));
  EXPECT_EQ(*ints(run(ack)), (std::vector<int64_t>{1, -1}));
  EXPECT_EQ(field("a", "s"), "done");
  EXPECT_EQ(field("a", "f"), "2000");
  EXPECT_EQ(field("a", "t"), "t");
  EXPECT_EQ(field("a", "p"), "payload-x");
  EXPECT_EQ(field("a", "a"), "2");  // the failed attempt and the one that ran it
  EXPECT_EQ(field("a", "st"), "1900");
  EXPECT_EQ(field("a", "w"), std::string("w\xff\t2", 4));
  EXPECT_EQ(field("a", "e"), "smtp 451");
  EXPECT_NE(field("a", "el").find("smtp 451"), std::string::npos);
  // The kept record is the job's with its payload checksum 0: a kept
  // document is never delivered again, and nine bytes cost it an
  // allocator class (lib/history.lua).
  EXPECT_EQ(redis_->cli("EVAL \"local e = {cmsgpack.unpack(redis.call('HGET', KEYS[1], ARGV[1]))} "
                        "local r = cmsgpack.unpack(e[1]) return {#r, r[2], r[3], r[9]}\" 1 'dueq:{q}:history' a"),
            "9\nt\npayload-x\n0");
  // The live hashes hold nothing of it: only the history does.
  EXPECT_EQ(redis_->cli("HLEN 'dueq:{q}:jobs'"), "0");
  EXPECT_EQ(redis_->cli("HLEN 'dueq:{q}:errlogs'"), "0");
  EXPECT_EQ(hlen(*redis_), "1");
  // Still a duplicate, as without history.
  EXPECT_EQ(enqueue({job("a")}, 3000), std::vector<int64_t>{0});
}

TEST_F(Scripts, TheSweepTrimsHistoryByAgeAndKeepsTheIdForDoneRetention) {
  enqueue({job("a"), job("b")}, 1000);
  auto l = lease(2, 5000);
  Round ack;
  ack.add(calls::ack("q", 2000, 60, {{l[0].id, l[0].token, 1500, "w"}}, true));
  ack.add(calls::ack("q", 3000, 60, {{l[1].id, l[1].token, 2500, "w"}}, true));
  run(ack);
  const std::string older = l[0].id, newer = l[1].id;
  Round keep;  // history cutoff 2000: nothing finished before it
  keep.add(calls::sweep("q", 0, 100, 1000, 0, 2000, 1000));
  EXPECT_EQ(*ints(run(keep)), (std::vector<int64_t>{0, 0, 0, 2000, 0, 2000, 0, 0}));
  Round trim;  // history cutoff 2500: the job done at 2000 loses its document
  trim.add(calls::sweep("q", 0, 100, 1000, 0, 2500, 1000));
  EXPECT_EQ(*ints(run(trim)), (std::vector<int64_t>{0, 0, 0, 2000, 1, 3000, 0, 0}));
  EXPECT_EQ(field(older, "s"), "done");
  EXPECT_EQ(field(older, "t"), "");  // its id stays, its document is gone
  EXPECT_EQ(field(newer, "t"), "t");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' history_trimmed"), "1");
  // The same cutoff again finds nothing more (the trim resumes where it stopped).
  Round again;
  again.add(calls::sweep("q", 0, 100, 1000, 0, 2500, 1000));
  EXPECT_EQ(*ints(run(again)), (std::vector<int64_t>{0, 0, 0, 2000, 0, 3000, 0, 0}));
  // An id leaving the done set takes its document with it, whatever the
  // history cutoff says.
  Round forget;
  forget.add(calls::sweep("q", 3001, 100, 1000, 3001, 3001, 1000));
  EXPECT_EQ(*ints(run(forget)), (std::vector<int64_t>{2, 0, 0, -1, 1, -1, 0, 0}));
  EXPECT_EQ(hlen(*redis_), "0");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' history_trimmed"), "2");
}

TEST_F(Scripts, TheSweepKeepsTheHistoryMaxNewestAndTakesEveryJobOfTheMsWhereItStops) {
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 6; ++i) jobs.push_back(job("j" + std::to_string(i)));
  enqueue(jobs, 1000);
  auto l = lease(6, 9000);
  ASSERT_EQ(l.size(), 6u);
  Round ack;  // four finish at 2000, two at 3000
  ack.add(ack_all_at(2000, {l.begin(), l.begin() + 4}));
  ack.add(ack_all_at(3000, {l.begin() + 4, l.end()}));
  run(ack);
  EXPECT_EQ(hlen(*redis_), "6");
  // At most 2 kept: the two of 3000 stay. The limit (2) stops the trim in
  // the ms 2000, and every job of that ms goes at once, so that no trim
  // ever splits a ms and looks at the same ids again and again.
  Round count;
  count.add(calls::sweep("q", 0, 2, 1000, 0, 0, 2));
  EXPECT_EQ(*ints(run(count)), (std::vector<int64_t>{0, 0, 0, 2000, 4, 3000, 1, 0}));
  EXPECT_EQ(hlen(*redis_), "2");
  EXPECT_EQ(field(l[5].id, "t"), "t");
  EXPECT_EQ(field(l[0].id, "t"), "");
}

// A batch of acks finishes its jobs in one ms: history_max still keeps
// that many, not every job of the ms where the newest ones begin.
TEST_F(Scripts, TheSweepKeepsTheHistoryMaxNewestWhenManyFinishedInTheSameMs) {
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(job("j" + std::to_string(i)));
  enqueue(jobs, 1000);
  auto l = lease(4, 9000);
  ASSERT_EQ(l.size(), 4u);
  Round ack;  // all four finish at 2000
  ack.add(ack_all_at(2000, l));
  run(ack);
  Round count;
  count.add(calls::sweep("q", 0, 100, 1000, 0, 0, 2));
  EXPECT_EQ(*ints(run(count)), (std::vector<int64_t>{0, 0, 0, 2000, 2, 2000, 0, 0}));
  EXPECT_EQ(hlen(*redis_), "2");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' history_trimmed"), "2");
  // Again: nothing more goes.
  Round again;
  again.add(calls::sweep("q", 0, 100, 1000, 0, 0, 2));
  EXPECT_EQ(*ints(run(again)), (std::vector<int64_t>{0, 0, 0, 2000, 0, 2000, 0, 0}));
  EXPECT_EQ(hlen(*redis_), "2");
  // A call of a smaller limit trims its ties all the same.
  Round one;
  one.add(calls::sweep("q", 0, 1, 1000, 0, 0, 1));
  EXPECT_EQ(*ints(run(one)), (std::vector<int64_t>{0, 0, 0, 2000, 1, 2000, 0, 0}));
  EXPECT_EQ(hlen(*redis_), "1");
}

TEST_F(Scripts, CancelledJobsKeepTheirDocumentByEveryWayTheyEndCancelled) {
  enqueue({job("waiting"), job("running"), job("expired")}, 1000);
  Round cancel_waiting;
  cancel_waiting.add(calls::cancel("q", 1100, "waiting", 60, true));
  EXPECT_EQ(calls::parse_cancel(run(cancel_waiting))->status, CancelStatus::cancelled);
  auto l = lease(2, 5000);
  ASSERT_EQ(l.size(), 2u);
  const LeasedJob& running = l[0].id == "running" ? l[0] : l[1];
  const LeasedJob& expired = l[0].id == "running" ? l[1] : l[0];
  for (const char* id : {"running", "expired"}) {
    Round request;
    request.add(calls::cancel("q", 1200, id, 60, true));
    EXPECT_EQ(calls::parse_cancel(run(request))->status, CancelStatus::cancel_requested);
  }
  Round stopped;  // its handler stopped: cancelled by its worker
  stopped.add(calls::nack("q", 1300, 0, 0, 60, {{running.id, running.token, NackMode::cancel, "stopped", 0, "w-9", 1250}}, true));
  EXPECT_EQ(calls::parse_nack(run(stopped))->at(0).status, NackStatus::cancelled);
  Round reclaimed;  // its lease ran out
  reclaimed.add(calls::reclaim("q", 6000, 100, 60, true));
  run(reclaimed);
  EXPECT_EQ(hlen(*redis_), "3");
  for (const char* id : {"waiting", "running", "expired"}) {
    EXPECT_EQ(field(id, "s"), "cancelled") << id;
    EXPECT_EQ(field(id, "p"), "payload-x") << id;
  }
  EXPECT_EQ(field("waiting", "w"), "");
  EXPECT_EQ(field("running", "w"), "w-9");
  EXPECT_EQ(field("running", "st"), "1250");
  EXPECT_EQ(field("expired", "a"), "1");
  (void)expired;
}

TEST_F(Scripts, HistoryArgumentsAreCheckedAndAQueueWithoutHistoryKeepsNone) {
  enqueue({job("a")}, 1000);
  auto l = lease(1, 5000);
  // History with no retention for the id, or a flag that is not 0|1: refused, nothing written.
  Round no_retention;
  no_retention.add(calls::ack("q", 2000, 0, {{"a", l[0].token, 1, "w"}}, true));
  EXPECT_NE(reply_error(run(no_retention)).find("bad-args ack"), std::string_view::npos);
  const auto args = calls::ack("q", 2000, 60, {{"a", l[0].token}}).args();
  Command bad_flag;
  bad_flag.mark_fenced();
  for (size_t i = 0; i < args.size(); ++i) bad_flag.add(i + 4 == args.size() ? std::string("2") : args[i]);
  Round refused;
  refused.add(std::move(bad_flag));
  EXPECT_NE(reply_error(run(refused)).find("bad-args ack"), std::string_view::npos);
  EXPECT_EQ(field("a", "s"), "leased");
  Round cancel_bad;
  cancel_bad.add(calls::cancel("q", 2000, "a", 0, true));
  EXPECT_NE(reply_error(run(cancel_bad)).find("bad-args cancel"), std::string_view::npos);
  // Without history: the done job keeps only its id.
  Round ack;
  ack.add(calls::ack("q", 2000, 60, {{"a", l[0].token}}));
  EXPECT_EQ(*ints(run(ack)), (std::vector<int64_t>{1, -1}));
  EXPECT_EQ(hlen(*redis_), "0");
  EXPECT_EQ(field("a", "t"), "");
}

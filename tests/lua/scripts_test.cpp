// Each Lua script, run against a real redis-server through the broker's
// broker's typed calls: the rules of docs/protocol.md's state diagram, checked one by one.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include <bit>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "broker/auditor.hpp"
#include "broker/encoding_pin.hpp"
#include "broker/job_record.hpp"
#include "broker/keys.hpp"
#include "broker/admin.hpp"
#include "broker/admin_commands.hpp"
#include "broker/cron.hpp"
#include "broker/cron_commands.hpp"
#include "broker/job_lookup.hpp"
#include "broker/dispatcher.hpp"
#include "broker/enqueuer.hpp"
#include "broker/leadership.hpp"
#include "broker/lease_extensions.hpp"
#include "broker/stats_requests.hpp"
#include "broker/redis_settings.hpp"
#include "broker/results.hpp"
#include "broker/schedule_partition.hpp"
#include "broker/scheduler.hpp"
#include "broker/script_registry.hpp"
#include "broker/store_upgrade.hpp"
#include "common/clock.hpp"
#include "tests/support/redis_server.hpp"

using namespace dueq;
using namespace dueq::broker;
using dueq::proto::StartCheck;

namespace {

// A job of queue "q" (defined below).
proto::NewJob job(std::string id, int64_t due = 0, uint32_t max = 0);

class Scripts : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = std::make_unique<dueq::testing::RedisServer>();
    store_ = std::make_unique<ScriptRegistry>(*parse_redis_url(redis_->url()));
    store_->set_epoch(1);  // the leader these calls are sent for (lua/lib/fence.lua)
    ASSERT_TRUE(store_->connect());
  }

  // Sends the round's calls in one round trip; the reply of call `index`.
  const redisReply* run(Round& round, size_t index = 0) {
    auto replies = store_->pipeline(round.take_commands());
    EXPECT_TRUE(replies) << (replies ? "" : replies.error().message);
    replies_ = std::move(*replies);
    return replies_.at(index).get();
  }
  static Result<std::vector<int64_t>> ints(const redisReply* r) { return reply::integers(r, "reply"); }
  static Result<std::vector<std::string>> strs(const redisReply* r) { return reply::strings(r, "reply"); }

  std::vector<int64_t> enqueue(const std::vector<proto::NewJob>& jobs, int64_t now, uint32_t default_max = 3,
                               int64_t max_backlog = 0) {
    std::vector<const proto::NewJob*> ptrs;
    ptrs.reserve(jobs.size());
    for (const auto& j : jobs) ptrs.push_back(&j);
    Round round;
    round.add(calls::enqueue("q", ptrs, now, default_max, max_backlog));
    const redisReply* r = run(round);
    auto statuses = ints(r);
    EXPECT_TRUE(statuses) << reply_error(r);
    return statuses ? *statuses : std::vector<int64_t>{};
  }

  std::vector<LeasedJob> lease(int count, int64_t deadline) {
    Round round;
    round.add(calls::lease("q", deadline, count));
    return calls::parse_lease(run(round))->jobs;
  }

  // extend.lua, as the broker calls it when a worker announces the jobs'
  // start: it also records the start.
  void record_start(const std::vector<LeasedJob>& jobs, int64_t deadline) {
    std::vector<TokenRef> refs;
    for (const auto& j : jobs) refs.push_back({j.id, j.token});
    Round round;
    round.add(calls::extend("q", deadline, LeaseReport::started, refs));
    EXPECT_EQ(ints(run(round))->size(), jobs.size());
  }

  // Jobs "a" and "b" (one attempt each) leased to one worker, only b's start
  // recorded; then the broker gives both back with `mode` (worker lost).
  std::vector<NackOutcome> lose_a_and_started_b(NackMode mode) {
    enqueue({job("a", 0, 1), job("b", 0, 1)}, 1000);
    auto l = lease(2, 5000);
    EXPECT_EQ(l.size(), 2u);
    if (l.size() != 2) return {};
    const LeasedJob& a = l[0].id == "a" ? l[0] : l[1];
    const LeasedJob& b = l[0].id == "a" ? l[1] : l[0];
    record_start({b}, 9000);
    Round round;
    round.add(calls::nack("q", 2000, 0, 0, 60, {{"a", a.token, mode, "worker lost", 0}, {"b", b.token, mode, "worker lost", 0}}));
    return *calls::parse_nack(run(round));
  }

  // A job field as `dueq job` reports it ("" when absent or the job is unknown).
  std::string field(const std::string& id, const std::string& f) {
    auto fields = job_fields(*store_, "q", id);
    EXPECT_TRUE(fields) << (fields ? "" : fields.error().message);
    if (!fields) return {};
    auto it = fields->find(f);
    return it == fields->end() ? std::string() : it->second;
  }

  // Every chunk of the schedule filter under `prefix` (lua/lib/schedule_filter.lua), in
  // order; "" for a chunk that does not exist.
  std::vector<std::string> filter_chunks(const std::string& prefix) {
    std::vector<Command> gets;
    for (uint32_t c = 0; c < kScheduleFilterChunks; ++c) gets.push_back(Command{"GET", schedule_filter_chunk_key(prefix, c)});
    auto replies = store_->pipeline(std::move(gets));
    EXPECT_TRUE(replies);
    std::vector<std::string> out;
    if (replies)
      for (const auto& r : *replies) out.push_back(r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : "");
    return out;
  }
  int64_t filter_bits(const std::string& prefix) {
    int64_t bits = 0;
    for (const auto& chunk : filter_chunks(prefix))
      for (unsigned char c : chunk) bits += std::popcount(c);
    return bits;
  }
  void delete_filter(const std::string& prefix) {
    Command del{"DEL"};
    for (uint32_t c = 0; c < kScheduleFilterChunks; ++c) del.add(schedule_filter_chunk_key(prefix, c));
    ASSERT_TRUE(store_->pipeline({del}));
  }
  // A redis-cli BITFIELD command on the counter of bucket (partition, tail):
  // `op` is "GET" or "SET <value>".
  static std::string filter_bitfield(const std::string& prefix, uint32_t partition, int tail, const std::string& op) {
    const std::string offset = std::to_string((partition % kPartitionsPerFilterChunk) * 100 + tail);
    const std::string type_and_offset = " u8 '#" + offset + "'";
    const std::string key = "'" + schedule_filter_chunk_key(prefix, partition / kPartitionsPerFilterChunk) + "'";
    if (op == "GET") return "BITFIELD " + key + " GET" + type_and_offset;
    return "BITFIELD " + key + " SET" + type_and_offset + op.substr(3);
  }

  std::unique_ptr<dueq::testing::RedisServer> redis_;
  std::unique_ptr<ScriptRegistry> store_;
  std::vector<ReplyPtr> replies_;
};

proto::NewJob job(std::string id, int64_t due, uint32_t max) {
  return proto::NewJob{"q", std::move(id), "t", proto::Bytes{"payload-" + std::string("x")}, due, max};
}

// The keys of the schedule partition that holds `id` in queue "q", quoted for redis-cli.
std::string partition_of(const std::string& id) {
  return "'" + QueueKeys("q").schedule_partition_key(schedule_partition(id)) + "'";
}
std::string partition_jobs_of(const std::string& id) {
  return "'" + QueueKeys("q").schedule_jobs_key(schedule_partition(id)) + "'";
}

}  // namespace

TEST_F(Scripts, EnqueueWithAnExistingIdMakesNoSecondJob) {
  EXPECT_EQ(enqueue({job("a"), job("b")}, 1000), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(enqueue({job("a"), job("c")}, 1000), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "3");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' accepted"), "3");
}

TEST_F(Scripts, EnqueueSchedulesFutureJobsAndReadiesDueOnes) {
  enqueue({job("now", 0), job("past", 500), job("later", 5000)}, 1000);
  EXPECT_EQ(redis_->cli("ZRANGE 'dueq:{q}:ready' 0 -1"), "past\nnow");  // in due order
  EXPECT_EQ(redis_->cli("ZSCORE " + partition_of("later") + " later"), "5000");
  EXPECT_EQ(redis_->cli("HEXISTS " + partition_jobs_of("later") + " later"), "1");
  EXPECT_EQ(redis_->cli("HEXISTS 'dueq:{q}:jobs' later"), "0");  // the record lives in the partition
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:schedule' " + std::to_string(schedule_partition("later"))), "5000");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' scheduled"), "1");
  EXPECT_EQ(field("later", "s"), "scheduled");
  EXPECT_EQ(field("later", "p"), "payload-x");
  EXPECT_EQ(field("later", "m"), "3");  // default max attempts applied
}

TEST_F(Scripts, EnqueueFindsADuplicateOfAScheduledJobInItsPartition) {
  EXPECT_EQ(enqueue({job("a", 5000)}, 1000), std::vector<int64_t>{1});
  EXPECT_EQ(enqueue({job("a", 0), job("a", 9000)}, 1000), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' accepted"), "1");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' scheduled"), "1");
}

// The broker leaves the filter arguments out while it knows of nothing
// scheduled; if it is wrong the script reads the filter all the same.
TEST_F(Scripts, EnqueueWithoutFilterArgumentsStillFindsAScheduledDuplicate) {
  EXPECT_EQ(enqueue({job("a", 5000)}, 1000), std::vector<int64_t>{1});
  std::vector<proto::NewJob> jobs = {job("a", 0), job("b", 7000), job("a", 9000)};
  std::vector<const proto::NewJob*> ptrs = {&jobs[0], &jobs[1], &jobs[2]};
  Round round;
  round.add(calls::enqueue("q", ptrs, 1000, 3, 0, 0, "", /*filter_args=*/false));
  const auto sent = round.take_commands();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].args().size(), 3 + 9 + 3 + 4 * jobs.size() + 2) << "EVALSHA, sha, 9, 9 keys, 3, 4 per job, lease pair";
  auto replies = store_->pipeline(sent);
  ASSERT_TRUE(replies);
  EXPECT_EQ(*ints(replies->at(0).get()), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' scheduled"), "2");
  // b was counted into the filter: found again with the broker's arguments.
  EXPECT_EQ(enqueue({job("b", 0)}, 1000), std::vector<int64_t>{0});
}

// Memory per delayed job depends on the partitions staying listpack-encoded
// under the production settings (deploy/redis.conf, which the test Redis uses).
TEST_F(Scripts, ScheduledJobsLiveInSmallListpackPartitions) {
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 20'000; ++i) jobs.push_back(job("j" + std::to_string(i), 100'000 + i));
  for (size_t i = 0; i < jobs.size(); i += 1000)
    enqueue(std::vector<proto::NewJob>(jobs.begin() + i, jobs.begin() + i + 1000), 1000);
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' scheduled"), "20000");
  EXPECT_EQ(redis_->cli("HLEN 'dueq:{q}:jobs'"), "0");
  EXPECT_EQ(redis_->cli("OBJECT ENCODING " + partition_of("j7")), "listpack");
  EXPECT_EQ(redis_->cli("OBJECT ENCODING " + partition_jobs_of("j7")), "listpack");
  // 20,000 ids over 32,768 partitions: the index names each partition in use once.
  std::set<uint32_t> used;
  for (const auto& j : jobs) used.insert(schedule_partition(j.id));
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:schedule'"), std::to_string(used.size()));
  EXPECT_GT(used.size(), 14'000u);
}

TEST_F(Scripts, EnqueueWithBadArgumentsWritesNothing) {
  Round round;
  const QueueKeys k("q");
  const std::string record = encode_job_record(JobRecord{"t", "p", 1000, 3, 1000, 0, 0});
  auto eval = [&](const std::vector<std::string>& argv) {
    // EVAL, not sent through the registry: the fence (lua/lib/fence.lua) is appended here.
    Command cmd{"EVAL", lua::script(lua::ScriptId::enqueue).source, "10", k.schedule, k.ready, k.leased, k.stats, k.jobs, k.done, k.cancelled, k.tokens, k.paused, k.epoch};
    for (auto& a : argv) cmd.add(a);
    cmd.add("0").add("").add("1");  // no lease; epoch 1
    round.add(std::move(cmd));
  };
  const std::vector<std::string> filter = {"GET", "u8", "0", "GET", "u8", "0"};  // unread: nothing is scheduled
  auto with_filter = [&](std::vector<std::string> argv) {
    argv.insert(argv.end(), filter.begin(), filter.end());
    return argv;
  };
  eval(with_filter({"1000", "0", "2", "a", "0", record, "1", "", "0", record, "1"}));           // second id empty
  eval(with_filter({"1000", "0", "2", "a", "0", record, "1", "b", "-5", record, "1"}));         // negative due
  eval(with_filter({"1000", "0", "2", "a", "0", record, "1", "b", "0", "not a record", "1"}));  // not a job record
  eval({"1000", "0", "2", "a", "0", record, "1", "GET", "u8", "0"});                            // fewer jobs than N
  eval({"1000", "0", "2", "a", "0", record, "1", "b", "0", record, "1", "GET", "u8", "0"});     // filter arguments for one job of two
  for (const char* partition : {"32768", "-1", "07", "1.5", "x"})                              // not a partition number
    eval(with_filter({"1000", "0", "2", "a", "0", record, "1", "b", "9000", record, partition}));
  auto replies = store_->pipeline(round.take_commands());
  ASSERT_TRUE(replies);
  for (const auto& r : *replies) EXPECT_NE(reply_error(r.get()).find("bad-args"), std::string_view::npos);
  EXPECT_EQ(redis_->cli("HEXISTS 'dueq:{q}:jobs' a"), "0");
}

// Where something is scheduled the broker's filter arguments are read: any
// but GET u8 <the job's bucket> is refused before a write.
TEST_F(Scripts, EnqueueWithFilterArgumentsOtherThanTheJobsBucketWritesNothing) {
  enqueue({job("scheduled", 9000)}, 1000);
  const QueueKeys k("q");
  const std::string record = encode_job_record(JobRecord{"t", "p", 1000, 3, 1000, 0, 0});
  const std::string partition = std::to_string(schedule_partition("a"));
  const int64_t offset = schedule_filter_bit_offset(schedule_partition("a"), "a");
  Round round;
  for (const std::vector<std::string>& filter :
       std::vector<std::vector<std::string>>{{"GET", "u8", std::to_string(offset + 8)},
                                             {"GET", "i8", std::to_string(offset)},
                                             {"SET", "u8", std::to_string(offset)},
                                             {"GET", "u8", " " + std::to_string(offset)}}) {
    Command cmd{"EVAL", lua::script(lua::ScriptId::enqueue).source, "10", k.schedule, k.ready, k.leased, k.stats, k.jobs, k.done, k.cancelled, k.tokens, k.paused, k.epoch};
    for (const auto& a : {std::string("1000"), std::string("0"), std::string("1"), std::string("a"), std::string("0"), record, partition})
      cmd.add(a);
    for (const auto& a : filter) cmd.add(a);
    cmd.add("0").add("").add("1");  // no lease; epoch 1 (lua/lib/fence.lua)
    round.add(std::move(cmd));
  }
  auto replies = store_->pipeline(round.take_commands());
  ASSERT_TRUE(replies);
  for (const auto& r : *replies) EXPECT_NE(reply_error(r.get()).find("bad-args"), std::string_view::npos);
  EXPECT_EQ(redis_->cli("HEXISTS 'dueq:{q}:jobs' a"), "0");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "0");
}

// The broker computes filter buckets in C++ (keys.hpp), the scripts in Lua:
// ids shorter than the three bytes hashed and bytes above 127 agree, or the
// enqueues below would be refused, and a scheduled job's retry is found.
TEST_F(Scripts, TheBrokersFilterBucketsAreTheScriptsForIdsOfAnyLength) {
  enqueue({job("scheduled", 9000)}, 1000);
  std::vector<proto::NewJob> jobs;
  for (const char* id : {"b", "ab", "abc", "abcd", "\xff\xfe", "x\x80\xc3\xa9"}) jobs.push_back(job(id, 9000));
  EXPECT_EQ(enqueue(jobs, 1000), std::vector<int64_t>(jobs.size(), 1));
  EXPECT_EQ(enqueue(jobs, 1000), std::vector<int64_t>(jobs.size(), 0)) << "each retry is a duplicate";
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' scheduled"), "7");
}

TEST_F(Scripts, PromoteMovesOnlyDueJobsInDueOrderAndReportsTheNextDue) {
  enqueue({job("c", 3000), job("a", 1000 + 1), job("b", 2000), job("d", 9000)}, 1000);
  Round round;
  round.add(calls::promote("q", 3000, 100));
  auto p = *calls::parse_promote(run(round));
  EXPECT_EQ(p.moved, 3);
  EXPECT_EQ(p.next_due_ms, 9000);
  EXPECT_EQ(redis_->cli("ZRANGE 'dueq:{q}:ready' 0 -1"), "a\nb\nc");
  EXPECT_EQ(field("a", "s"), "ready");
}

TEST_F(Scripts, PromoteIsBoundedByItsLimit) {
  enqueue({job("a", 1001), job("b", 1002), job("c", 1003)}, 1000);
  Round round;
  round.add(calls::promote("q", 5000, 2));
  auto p = *calls::parse_promote(run(round));
  EXPECT_EQ(p.moved, 2);
  EXPECT_EQ(p.next_due_ms, 1003);
}

// promote_batch may be 5,000: one call moves that many out of one partition
// (10,000 field/value values: above what Lua's unpack() takes at once).
TEST_F(Scripts, PromoteMovesItsWholeLimitOutOfOnePartition) {
  for (int chunk = 0; chunk < 5; ++chunk) {
    std::vector<proto::NewJob> jobs;
    for (int i = 0; i < 1000; ++i) jobs.push_back(job("same-" + std::to_string(chunk * 1000 + i), 2000));
    std::vector<const proto::NewJob*> ptrs;
    for (auto& j : jobs) ptrs.push_back(&j);
    // Every job into partition 7, as if all their ids hashed alike.
    const auto args = calls::enqueue("q", ptrs, 1000, 3, 0).args();
    // ... 7 values per job, then the two lease arguments.
    const size_t lease_args = args.size() - 2;
    const size_t first_job = lease_args - 7 * jobs.size(), first_filter = lease_args - 3 * jobs.size();
    Command same;
    for (size_t a = 0; a < args.size(); ++a) {
      if (a >= first_job && a < first_filter && (a - first_job) % 4 == 3) same.add("7");
      else if (a >= first_filter && a < lease_args && (a - first_filter) % 3 == 2)
        same.add(static_cast<int64_t>(schedule_filter_bit_offset(7, jobs[(a - first_filter) / 3].id)));
      else same.add(args[a]);
    }
    same.mark_fenced();  // rebuilt from a script_call's arguments
    Round round;
    round.add(std::move(same));
    auto accepted = ints(run(round));
    ASSERT_TRUE(accepted) << reply_error(replies_.at(0).get());
    ASSERT_EQ(accepted->size(), 1000u);
  }
  ASSERT_EQ(redis_->cli("ZCARD 'dueq:{q}:schedule:7'"), "5000");
  Round promote;
  promote.add(calls::promote("q", 3000, 5000));
  const redisReply* r = run(promote);
  auto p = calls::parse_promote(r);
  ASSERT_TRUE(p) << reply_error(r);
  EXPECT_EQ(p->moved, 5000);
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "5000");
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:schedule:7'"), "0");
}

TEST_F(Scripts, LeaseStampsANewTokenAndAttemptEachTime) {
  enqueue({job("a")}, 1000);
  auto first = lease(10, 5000);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].id, "a");
  EXPECT_NE(first[0].token, 0u);
  EXPECT_EQ(first[0].attempt, 1u);
  EXPECT_EQ(first[0].record.payload, "payload-x");
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' a"), "5000");
  // A worker starts it and its lease runs out; reclaim puts it back; the
  // next lease has a new token and the next attempt number.
  record_start(first, 5000);
  Round reclaim;
  reclaim.add(calls::reclaim("q", 6000, 100, 60));
  EXPECT_EQ(calls::parse_reclaim(run(reclaim))->requeued, 1);
  auto second = lease(10, 9000);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_NE(second[0].token, first[0].token);
  EXPECT_EQ(second[0].attempt, 2u);
}

// Tokens are drawn at random, not counted in Redis: when Redis comes back
// from an AOF older than a lease it had acknowledged, the next delivery
// gets a token of its own, and a late ack of the first one changes nothing.
TEST_F(Scripts, ATokenIsNotRepeatedAfterRedisLostAcknowledgedWrites) {
  enqueue({job("a")}, 1000);
  // The AOF as it is now, on disk (appendfsync everysec: wait for a sync).
  ASSERT_EQ(redis_->cli("CONFIG SET appendfsync always"), "OK");
  redis_->cli("SET sync-marker 1");
  const auto saved = redis_->dir() / "saved-aof";
  std::filesystem::copy(redis_->dir() / "appendonlydir", saved, std::filesystem::copy_options::recursive);
  auto first = lease(10, 5000);
  ASSERT_EQ(first.size(), 1u);
  // Redis crashes and restarts from the older AOF: the lease is lost.
  redis_->kill(SIGKILL);
  std::filesystem::remove_all(redis_->dir() / "appendonlydir");
  std::filesystem::rename(saved, redis_->dir() / "appendonlydir");
  redis_->start();
  store_->disconnect();
  ASSERT_TRUE(store_->connect());
  ASSERT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "1") << "the lease was not rolled back";
  auto second = lease(10, 9000);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_NE(second[0].token, first[0].token);
  Round late;
  late.add(calls::ack("q", 2000, 60, {{"a", first[0].token}}));
  EXPECT_EQ(*ints(run(late)), (std::vector<int64_t>{0})) << "a late ack of the first delivery completed the second";
  Round current;
  current.add(calls::ack("q", 2000, 60, {{"a", second[0].token}}));
  EXPECT_EQ(*ints(run(current)), (std::vector<int64_t>{1}));
}

TEST_F(Scripts, LeaseRefusesMissingOrMalformedTokens) {
  enqueue({job("a")}, 1000);
  const auto args = calls::lease("q", 5000, 2).args();
  auto eval = [&](const std::vector<std::string>& tokens) {
    Command call;
    call.mark_fenced();  // rebuilt from a script_call's arguments
    std::string blob;
    for (const auto& t : tokens) blob += t;
    // EVALSHA .. count, these tokens, then now and the three limits.
    const size_t tokens_at = args.size() - 5;
    for (size_t i = 0; i < args.size(); ++i) call.add(i == tokens_at ? blob : args[i]);
    Round round;
    round.add(std::move(call));
    return std::string(reply_error(run(round)));
  };
  const std::string seven = "0000000000000007";
  EXPECT_NE(eval({seven}).find("bad-args"), std::string::npos) << "one token for a count of 2";
  // The first token goes to the one job there is.
  EXPECT_NE(eval({"0000000000000000", seven}).find("bad-args"), std::string::npos);
  EXPECT_NE(eval({"-000000000000003", seven}).find("bad-args"), std::string::npos);
  EXPECT_NE(eval({"000000000000012x", seven}).find("bad-args"), std::string::npos);
  EXPECT_NE(eval({"00000000000000007", "000000000000007"}).find("bad-args"), std::string::npos) << "tokens are cut every 16 digits, not at their own ends";
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "1") << "a refused lease took the job";
  EXPECT_EQ(eval({"ffffffffffffffff", seven}), "");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:tokens' a"), "ffffffffffffffff");
}

TEST_F(Scripts, LeaseTakesAtMostCountAndSkipsVanishedJobs) {
  enqueue({job("a"), job("b"), job("c")}, 1000);
  redis_->cli("HDEL 'dueq:{q}:jobs' a");
  auto leased = lease(2, 5000);
  ASSERT_EQ(leased.size(), 1u);  // a vanished, b leased; c still ready
  EXPECT_EQ(leased[0].id, "b");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "1");
}

// A paused queue leases nothing, by lease.lua or at once by enqueue.lua,
// and keeps accepting jobs; after resume it leases them in order.
TEST_F(Scripts, APausedQueueAcceptsJobsAndLeasesNoneUntilResumed) {
  Round pause;
  pause.add(calls::pause("q", true, 500));
  EXPECT_EQ(*ints(run(pause)), (std::vector<int64_t>{1, 500}));
  pause.add(calls::pause("q", true, 600));
  EXPECT_EQ(*ints(run(pause)), (std::vector<int64_t>{0, 500})) << "pausing twice keeps the first time";
  enqueue({job("a"), job("b")}, 1000);
  std::vector<proto::NewJob> jobs = {job("c")};
  std::vector<const proto::NewJob*> ptrs = {&jobs[0]};
  Round at_once;
  at_once.add(calls::enqueue("q", ptrs, 1000, 3, 0, 9000, "00000000000000cc"));
  EXPECT_EQ(*ints(run(at_once)), (std::vector<int64_t>{1})) << "accepted into ready, not leased";
  Round round;
  round.add(calls::lease("q", 5000, 10));
  auto batch = calls::parse_lease(run(round));
  ASSERT_TRUE(batch);
  EXPECT_TRUE(batch->jobs.empty());
  EXPECT_EQ(batch->held_by, LeaseHold::paused);
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "3");
  Round resume;
  resume.add(calls::pause("q", false, 700));
  EXPECT_EQ(*ints(run(resume)), (std::vector<int64_t>{1, 0}));
  auto leased = lease(10, 5000);
  ASSERT_EQ(leased.size(), 3u);
  EXPECT_EQ(leased[0].id, "a");
}

// A concurrency limit counts every lease of the queue in Redis, whoever
// leased it: a call is cut to the room left, and takes nothing when full.
TEST_F(Scripts, LeaseKeepsTheQueuesConcurrencyLimit) {
  enqueue({job("a"), job("b"), job("c"), job("d")}, 1000);
  const LeaseLimits two{1000, 2, 0, 1};
  auto take = [&] {
    Round round;
    round.add(calls::lease("q", 5000, 10, two));
    auto batch = calls::parse_lease(run(round));
    EXPECT_TRUE(batch);
    return batch ? *batch : LeaseBatch{};
  };
  auto first = take();
  ASSERT_EQ(first.jobs.size(), 2u);
  EXPECT_EQ(first.held_by, LeaseHold::concurrency);
  auto full = take();
  EXPECT_TRUE(full.jobs.empty());
  EXPECT_EQ(full.held_by, LeaseHold::concurrency);
  Round ack;
  ack.add(calls::ack("q", 2000, 60, {{first.jobs[0].id, first.jobs[0].token}}));
  run(ack);
  auto after_ack = take();
  ASSERT_EQ(after_ack.jobs.size(), 1u) << "one finished: room for one";
  EXPECT_EQ(after_ack.jobs[0].id, "c");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "1");
}

// The rate limit is a token bucket in Redis: `burst` jobs at once, then one
// per 1/rate s; the reply says how long until the next token.
TEST_F(Scripts, LeaseTakesNoMoreThanTheRateLimitsBucketHolds) {
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 10; ++i) jobs.push_back(job("j" + std::to_string(i)));
  enqueue(jobs, 1000);
  auto take = [&](int64_t now) {
    Round round;
    round.add(calls::lease("q", 50'000, 10, LeaseLimits{now, 0, 10, 3}));  // 10/s, burst 3
    auto batch = calls::parse_lease(run(round));
    EXPECT_TRUE(batch);
    return batch ? *batch : LeaseBatch{};
  };
  auto first = take(1000);
  EXPECT_EQ(first.jobs.size(), 3u) << "a full bucket: the burst";
  EXPECT_EQ(first.held_by, LeaseHold::rate);
  EXPECT_EQ(first.wait_ms, 100);
  auto soon = take(1050);
  EXPECT_TRUE(soon.jobs.empty());
  EXPECT_EQ(soon.held_by, LeaseHold::rate);
  EXPECT_EQ(soon.wait_ms, 50);
  EXPECT_EQ(take(1200).jobs.size(), 2u) << "two tokens in 200 ms";
  EXPECT_EQ(take(10'000).jobs.size(), 3u) << "a long pause refills no more than the burst";
  EXPECT_EQ(take(20'000).jobs.size(), 2u) << "the last two; the ready set ran out";
  EXPECT_EQ(take(20'000).held_by, LeaseHold::none);
}

TEST_F(Scripts, LeaseRefusesBadLimits) {
  enqueue({job("a")}, 1000);
  for (const LeaseLimits& bad : {LeaseLimits{-1, 0, 0, 1}, LeaseLimits{1000, -1, 0, 1}, LeaseLimits{1000, 0, -2, 1},
                                 LeaseLimits{1000, 0, 2e6, 1}, LeaseLimits{1000, 0, 5, 0}}) {
    Round round;
    round.add(calls::lease("q", 5000, 1, bad));
    EXPECT_NE(reply_error(run(round)).find("bad-args"), std::string_view::npos);
  }
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "1");
}

// A tick is enqueued once, however often its call is made; a state of
// another definition refuses the call and writes nothing.
TEST_F(Scripts, CronTickEnqueuesEachTickOnceAndRefusesAnotherDefinitionsState) {
  auto entry = make_cron_entry("beat", CronDefinition{"* * * * * *", "UTC", "q", "t", "p", "skip", 0});
  ASSERT_TRUE(entry);
  auto tick = [&](const CronEntry& e, const std::vector<int64_t>& ticks) {
    Round round;
    round.add(calls::cron_tick(e, ticks, 10'000, 3));
    auto outcome = calls::parse_cron_tick(run(round));
    EXPECT_TRUE(outcome);
    return outcome ? *outcome : calls::CronTickOutcome{};
  };
  EXPECT_EQ(tick(*entry, {9'000, 11'000, 12'000}).enqueued, 3) << "one due now, two ahead";
  EXPECT_EQ(tick(*entry, {11'000, 12'000}).enqueued, 0) << "sent again: nothing twice";
  EXPECT_EQ(tick(*entry, {12'000, 13'000}).enqueued, 1);
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "1");
  EXPECT_EQ(field("beat@1970-01-01T00:00:13Z", "s"), "scheduled");
  auto changed = make_cron_entry("beat", CronDefinition{"*/2 * * * * *", "UTC", "q", "t", "p", "skip", 0});
  const auto refused = tick(*changed, {14'000});
  EXPECT_EQ(refused.enqueued, -1);
  EXPECT_EQ(refused.last_ms, 13'000);
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' accepted"), "4");
  Round bad;
  Command call = calls::cron_tick(*entry, {20'000, 19'000}, 10'000, 3);
  bad.add(std::move(call));
  EXPECT_NE(reply_error(run(bad)).find("bad-args"), std::string_view::npos) << "ticks out of order";
}

// A fresh state for a re-added entry frees the ids of its cancelled ticks
// within the lookahead (and only those), so its ticks there run again.
TEST_F(Scripts, CronRestartFreesTheCancelledTickIdsOfTheNewDefinition) {
  auto entry = make_cron_entry("beat", CronDefinition{"* * * * * *", "UTC", "q", "t", "p", "skip", 0});
  ASSERT_TRUE(entry);
  Round ticks;
  ticks.add(calls::cron_tick(*entry, {11'000, 12'000}, 10'000, 3));
  ASSERT_EQ(calls::parse_cron_tick(run(ticks))->enqueued, 2);
  Round cancel;
  cancel.add(calls::cancel("q", 10'500, "beat@1970-01-01T00:00:11Z", 60));
  ASSERT_EQ(calls::parse_cancel(run(cancel))->status, CancelStatus::cancelled);
  auto replaced = make_cron_entry("beat", CronDefinition{"* * * * * *", "UTC", "q", "t", "new", "skip", 0});
  Round restart;
  restart.add(calls::cron_restart(*replaced, 10'600, 60'000));
  EXPECT_EQ(reply::num(run(restart)), 1) << "the cancelled tick's id, and not the scheduled one's";
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:cron' beat"), "0:" + replaced->fingerprint());
  Round again;
  again.add(calls::cron_tick(*replaced, {11'000, 12'000}, 10'700, 3));
  EXPECT_EQ(calls::parse_cron_tick(run(again))->enqueued, 1) << "11 s runs with the new payload; 12 s is still known";
  Command bad = script_call(lua::ScriptId::cron_restart, {QueueKeys("q").cron, QueueKeys("q").cancelled});
  bad.add("beat").add(replaced->fingerprint()).add("other@1970-01-01T00:00:13Z");
  Round refused;
  refused.add(std::move(bad));
  EXPECT_NE(reply_error(run(refused)).find("bad-args"), std::string_view::npos) << "another entry's tick";
}

// A job due now is leased by its own enqueue while no older job is ready:
// written as lease.lua writes a lease (leased set, token), never to ready.
TEST_F(Scripts, EnqueueLeasesJobsDueNowUnderTheirCandidatesTokens) {
  std::vector<proto::NewJob> jobs = {job("a"), job("later", 5000), job("c")};
  std::vector<const proto::NewJob*> ptrs = {&jobs[0], &jobs[1], &jobs[2]};
  Round round;
  round.add(calls::enqueue("q", ptrs, 1000, 3, 0, 9000, "00000000000000aa00000000000000cc"));
  EXPECT_EQ(*ints(run(round)), (std::vector<int64_t>{3, 1, 3}));
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' a"), "9000");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:tokens' a"), "00000000000000aa");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:tokens' c"), "00000000000000cc");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "0");
  EXPECT_EQ(redis_->cli("HEXISTS 'dueq:{q}:jobs' a"), "1");
  EXPECT_EQ(field("later", "s"), "scheduled");
  // Acked like any lease; the audit finds every job where it belongs.
  Round ack;
  ack.add(calls::ack("q", 2000, 60, {{"a", 0xaa}, {"c", 0xcc}}));
  EXPECT_EQ(*ints(run(ack)), (std::vector<int64_t>{1, 1}));
  Round audit;
  audit.add(calls::audit("q", {}));
  audit.add(calls::audit("q", {"a", "later", "c"}));
  run(audit, 0);
  EXPECT_TRUE(calls::parse_audit(replies_.at(1).get())->problems.empty());
}

// Older ready jobs go first: with any job ready, new ones go to the ready set.
TEST_F(Scripts, EnqueueLeasesNothingWhileOlderJobsAreReady) {
  enqueue({job("older")}, 1000);
  proto::NewJob newer = job("newer");
  Round round;
  round.add(calls::enqueue("q", {&newer}, 1000, 3, 0, 9000, "00000000000000aa"));
  EXPECT_EQ(*ints(run(round)), std::vector<int64_t>{1});
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "2");
  EXPECT_EQ(redis_->cli("HLEN 'dueq:{q}:tokens'"), "0");
}

// Candidates are the first jobs due now by position, duplicates included:
// the broker knows which job a token is for without knowing the outcomes.
TEST_F(Scripts, EnqueueLeaseCandidatesAreTheFirstJobsDueNowByPosition) {
  enqueue({job("dup", 5000)}, 1000);  // scheduled: not in ready
  std::vector<proto::NewJob> jobs = {job("dup"), job("d")};
  Round round;
  round.add(calls::enqueue("q", {&jobs[0], &jobs[1]}, 1000, 3, 0, 9000, "00000000000000aa"));
  EXPECT_EQ(*ints(run(round)), (std::vector<int64_t>{0, 1})) << "the one token was the duplicate's";
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:ready' d"), "1000");
  EXPECT_EQ(redis_->cli("HLEN 'dueq:{q}:tokens'"), "0");
}

TEST_F(Scripts, EnqueueWithBadLeaseArgumentsWritesNothing) {
  std::vector<proto::NewJob> jobs = {job("a"), job("b")};
  std::vector<const proto::NewJob*> ptrs = {&jobs[0], &jobs[1]};
  Round round;
  round.add(calls::enqueue("q", ptrs, 1000, 3, 0, 0, "00000000000000aa"));         // tokens without a deadline
  round.add(calls::enqueue("q", ptrs, 1000, 3, 0, 9000, ""));                      // a deadline without tokens
  round.add(calls::enqueue("q", ptrs, 1000, 3, 0, 9000, "00000000000000a"));       // 15 digits
  round.add(calls::enqueue("q", ptrs, 1000, 3, 0, 9000, "0000000000000000"));      // the zero token
  round.add(calls::enqueue("q", ptrs, 1000, 3, 0, 9000, "00000000000000AA"));      // not lowercase
  round.add(calls::enqueue("q", ptrs, 1000, 3, 0, -1, "00000000000000aa"));        // negative deadline
  round.add(calls::enqueue("q", ptrs, 1000, 3, 0, 9000, std::string(48, '1')));    // more tokens than jobs
  auto replies = store_->pipeline(round.take_commands());
  ASSERT_TRUE(replies);
  for (const auto& r : *replies) EXPECT_NE(reply_error(r.get()).find("bad-args"), std::string_view::npos);
  EXPECT_EQ(redis_->cli("HLEN 'dueq:{q}:jobs'"), "0");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:leased'"), "0");
}

TEST_F(Scripts, AckWithTheCurrentTokenCompletesTheJob) {
  enqueue({job("a")}, 1000);
  auto l = lease(1, 5000);
  Round round;
  round.add(calls::ack("q", 2000, 60, {{"a", l[0].token}}));
  EXPECT_EQ(*ints(run(round)), std::vector<int64_t>{1});
  EXPECT_EQ(field("a", "s"), "done");
  EXPECT_EQ(field("a", "f"), "2000");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:leased'"), "0");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' done"), "1");
  // Nothing of the job is kept but its id in the done set.
  for (const char* hash : {"jobs", "tokens", "attempts"})
    EXPECT_EQ(redis_->cli(std::string("HLEN 'dueq:{q}:") + hash + "'"), "0") << hash;
}

TEST_F(Scripts, ADoneJobStaysADuplicateUntilTheSweepForgetsIt) {
  enqueue({job("a")}, 1000);
  auto l = lease(1, 5000);
  Round ack;
  ack.add(calls::ack("q", 2000, 60, {{"a", l[0].token}}));
  run(ack);
  EXPECT_EQ(enqueue({job("a")}, 3000), std::vector<int64_t>{0});  // a producer's retry
  Round early;
  early.add(calls::sweep("q", 2000, 100, 1000, 2000));  // finished at 2000: not before the cutoff
  EXPECT_EQ(*ints(run(early)), (std::vector<int64_t>{0, 0, 0}));
  Round late;
  late.add(calls::sweep("q", 2001, 100, 1000, 2001));
  EXPECT_EQ(*ints(run(late)), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(field("a", "s"), "");
  EXPECT_EQ(enqueue({job("a")}, 3000), std::vector<int64_t>{1});  // a new job after retention
}

TEST_F(Scripts, SweepIsBoundedByItsLimitAndRefusesBadArguments) {
  for (const char* id : {"a", "b", "c"}) redis_->cli(std::string("ZADD 'dueq:{q}:done' 10 ") + id);
  Round round;
  round.add(calls::sweep("q", 100, 2, 1000, 100));
  EXPECT_EQ(*ints(run(round)), (std::vector<int64_t>{2, 0, 0}));
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:done'"), "1");
  Round bad;
  bad.add(calls::sweep("q", 100, 0, 1000, 100));
  EXPECT_NE(reply_error(run(bad)).find("bad-args"), std::string_view::npos);
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:done'"), "1");
  Round no_max;
  no_max.add(calls::sweep("q", 100, 10, 0, 100));
  EXPECT_NE(reply_error(run(no_max)).find("bad-args"), std::string_view::npos);
  // The broker never sends a window that starts before the cutoff; the
  // script refuses one all the same.
  const auto args = calls::sweep("q", 100, 10, 10, 100).args();
  Command early_window;
  early_window.mark_fenced();  // rebuilt from a script_call's arguments
  for (size_t i = 0; i < args.size(); ++i) early_window.add(i + 1 == args.size() ? std::string("99") : args[i]);
  Round window_before_cutoff;
  window_before_cutoff.add(std::move(early_window));
  EXPECT_NE(reply_error(run(window_before_cutoff)).find("bad-args sweep"), std::string_view::npos);
}

// Done and cancelled ids are kept for the retention and no more than MAX of
// each: the oldest go first, within the limit per call.
TEST_F(Scripts, SweepKeepsAtMostMaxDoneAndCancelledIds) {
  for (int i = 0; i < 10; ++i) redis_->cli("ZADD 'dueq:{q}:done' " + std::to_string(1000 + i) + " d" + std::to_string(i));
  for (int i = 0; i < 3; ++i) redis_->cli("ZADD 'dueq:{q}:cancelled' " + std::to_string(1000 + i) + " c" + std::to_string(i));
  Round first;
  // Nothing past retention; 6 done over the max, 4 per call, all before
  // their retention ended (counted).
  first.add(calls::sweep("q", 0, 4, 4, 2000));
  EXPECT_EQ(*ints(run(first)), (std::vector<int64_t>{4, 0, 4}));
  Round second;
  second.add(calls::sweep("q", 0, 4, 4, 2000));
  EXPECT_EQ(*ints(run(second)), (std::vector<int64_t>{2, 0, 2}));
  EXPECT_EQ(redis_->cli("ZRANGE 'dueq:{q}:done' 0 -1"), "d6\nd7\nd8\nd9");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' forgotten_early"), "6");
  Round both;
  // The time cutoff takes d6 and every cancelled id; the max takes d7 too.
  both.add(calls::sweep("q", 1007, 100, 2, 2000));
  EXPECT_EQ(*ints(run(both)), (std::vector<int64_t>{2, 3, 1}));
  EXPECT_EQ(redis_->cli("ZRANGE 'dueq:{q}:done' 0 -1"), "d8\nd9");
}

// Ids finished within the duplicate window stay whatever the max says: a
// resent enqueue is answered duplicate for that long at any rate.
TEST_F(Scripts, SweepKeepsIdsFinishedWithinTheDuplicateWindowPastTheMax) {
  for (int i = 0; i < 10; ++i) redis_->cli("ZADD 'dueq:{q}:done' " + std::to_string(1000 + i) + " d" + std::to_string(i));
  Round round;
  round.add(calls::sweep("q", 0, 100, 4, 1005));  // the window began at 1005: d5..d9 stay
  EXPECT_EQ(*ints(run(round)), (std::vector<int64_t>{5, 0, 5}));
  EXPECT_EQ(redis_->cli("ZRANGE 'dueq:{q}:done' 0 -1"), "d5\nd6\nd7\nd8\nd9");
  Round again;
  again.add(calls::sweep("q", 0, 100, 4, 1005));
  EXPECT_EQ(*ints(run(again)), (std::vector<int64_t>{0, 0, 0}));
}

TEST_F(Scripts, AckWithAStaleTokenIsACountedNoOp) {
  enqueue({job("a")}, 1000);
  auto l = lease(1, 5000);
  Round round;
  round.add(calls::ack("q", 2000, 60, {{"a", l[0].token + 1}}));
  EXPECT_EQ(*ints(run(round)), std::vector<int64_t>{0});
  EXPECT_EQ(field("a", "s"), "leased");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' stale_acks"), "1");
  // A second ack of a finished job is stale too.
  Round good;
  good.add(calls::ack("q", 2000, 0, {{"a", l[0].token}}));
  run(good);
  EXPECT_EQ(redis_->cli("HEXISTS 'dueq:{q}:jobs' a"), "0");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:done'"), "0");  // retention 0 keeps no entry
  Round again;
  again.add(calls::ack("q", 2000, 0, {{"a", l[0].token}}));
  EXPECT_EQ(*ints(run(again)), std::vector<int64_t>{0});
}

TEST_F(Scripts, NackRetriesWithBackoffWithinTheJitterBound) {
  enqueue({job("a", 0, 5)}, 1000);
  auto l = lease(1, 5000);
  Round round;
  round.add(calls::nack("q", 2000, 1000, 60'000, 60, {{"a", l[0].token, NackMode::retry, "boom", 0.5}}));
  auto out = *calls::parse_nack(run(round));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status, NackStatus::retried);
  EXPECT_EQ(out[0].due_ms, 2000 + 500);  // attempt 1: base * 2^0 * 0.5
  EXPECT_EQ(field("a", "s"), "scheduled");
  EXPECT_EQ(field("a", "e"), "boom");
  EXPECT_EQ(field("a", "el"), "attempt 1: boom\n");
}

TEST_F(Scripts, NackDeadLettersWhenAttemptsAreUsedUpKeepingPayloadAndReasons) {
  enqueue({job("a", 0, 2)}, 1000);
  for (int attempt = 1; attempt <= 2; ++attempt) {
    auto l = lease(1, 5000);
    ASSERT_EQ(l.size(), 1u);
    Round round;
    round.add(calls::nack("q", 2000, 0, 0, 60, {{"a", l[0].token, NackMode::retry, "err" + std::to_string(attempt), 0}}));
    auto out = *calls::parse_nack(run(round));
    EXPECT_EQ(out[0].status, attempt == 2 ? NackStatus::dead : NackStatus::retried);
  }
  EXPECT_EQ(field("a", "s"), "dead");
  EXPECT_EQ(field("a", "p"), "payload-x");
  EXPECT_EQ(field("a", "e"), "attempts exhausted (2): err2");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:dead'"), "1");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' dead"), "1");
}

TEST_F(Scripts, NackModeDeadSkipsRetriesAndModeNowRequeuesAtOnce) {
  enqueue({job("a", 0, 5), job("b", 0, 5)}, 1000);
  auto l = lease(2, 5000);
  Round round;
  round.add(calls::nack("q", 2000, 1000, 5000, 60,
             {{"a", l[0].token, NackMode::dead, "bad payload", 0}, {"b", l[1].token, NackMode::now, "worker lost", 0.9}}));
  auto out = *calls::parse_nack(run(round));
  EXPECT_EQ(out[0].status, NackStatus::dead);
  EXPECT_EQ(out[1].status, NackStatus::retried);
  EXPECT_EQ(out[1].due_ms, 2000);
  EXPECT_EQ(field("a", "e"), "bad payload");
  EXPECT_EQ(redis_->cli("ZRANGE 'dueq:{q}:ready' 0 -1"), "b");
}

TEST_F(Scripts, NackWithAStaleTokenChangesNothing) {
  enqueue({job("a")}, 1000);
  auto l = lease(1, 5000);
  Round round;
  round.add(calls::nack("q", 2000, 0, 0, 60, {{"a", l[0].token + 7, NackMode::dead, "x", 0}}));
  EXPECT_EQ(calls::parse_nack(run(round))->at(0).status, NackStatus::stale);
  EXPECT_EQ(field("a", "s"), "leased");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' stale_acks"), "1");
}

TEST_F(Scripts, NackWithBadModeOrJitterIsRefused) {
  enqueue({job("a")}, 1000);
  auto l = lease(1, 5000);
  Round round;
  round.add(calls::nack("q", 2000, 0, 0, 60, {{"a", l[0].token, NackMode::retry, "x", 1.5}}));
  EXPECT_NE(reply_error(run(round)).find("bad-args"), std::string_view::npos);
  EXPECT_EQ(field("a", "s"), "leased");
}

TEST_F(Scripts, ExtendMovesTheDeadlineOnlyForTheCurrentToken) {
  enqueue({job("a"), job("b")}, 1000);
  auto l = lease(2, 5000);
  Round round;
  round.add(calls::extend("q", 20'000, LeaseReport::held, {{"a", l[0].token}, {"b", l[1].token + 1}}));
  EXPECT_EQ(*ints(run(round)), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' a"), "20000");
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' b"), "5000");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' stale_extends"), "1");
}

TEST_F(Scripts, ReclaimCountsAnExpiredLeaseWhoseStartWasRecordedAsAnAttemptAndDeadLettersPoisonJobs) {
  enqueue({job("a", 0, 1), job("b", 0, 3)}, 1000);
  record_start(lease(2, 5000), 5000);
  Round early;
  early.add(calls::reclaim("q", 4999, 100, 60));
  auto none = *calls::parse_reclaim(run(early));
  EXPECT_EQ(none.requeued + none.dead, 0);
  EXPECT_EQ(none.next_deadline_ms, 5000);
  Round round;
  round.add(calls::reclaim("q", 5000, 100, 60));
  auto r = *calls::parse_reclaim(run(round));
  EXPECT_EQ(r.requeued, 1);
  EXPECT_EQ(r.dead, 1);
  EXPECT_EQ(r.next_deadline_ms, -1);
  EXPECT_EQ(field("a", "s"), "dead");
  EXPECT_EQ(field("b", "s"), "ready");
  EXPECT_NE(field("b", "el").find("lease expired"), std::string::npos);
}

// A TASKS frame lost on the wire, a job buffered by a worker that died, a
// broker gone between lease and dispatch: no start was recorded, so the
// expiry uses no attempt however often it happens, and every later lease
// asks its worker to announce the start. Once a start is recorded, the next
// expiry counts: a job that kills its worker ends dead after its attempts.
TEST_F(Scripts, AnExpiredDeliveryNeverSeenToStartUsesNoAttemptAndAsksTheNextWorkerToAnnounceTheStart) {
  enqueue({job("a", 0, 1)}, 1000);
  for (int i = 1; i <= 5; ++i) {
    auto l = lease(1, int64_t{5000} * i);
    ASSERT_EQ(l.size(), 1u);
    EXPECT_EQ(l[0].attempt, 1u) << "delivery " << i;
    EXPECT_EQ(l[0].start_check, i == 1 ? StartCheck::none : i == 2 ? StartCheck::announce : StartCheck::announce_alone)
        << "delivery " << i;
    Round round;
    round.add(calls::reclaim("q", int64_t{5000} * i, 100, 60));
    auto r = *calls::parse_reclaim(run(round));
    EXPECT_EQ(r.requeued, 1);
    EXPECT_EQ(r.not_counted, 1);
    EXPECT_EQ(r.dead, 0);
    EXPECT_EQ(field("a", "s"), "ready");
    EXPECT_EQ(field("a", "a"), "0");
  }
  EXPECT_NE(field("a", "el").find("unstarted delivery 5 (not an attempt)"), std::string::npos) << field("a", "el");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' unconfirmed"), "5");
  auto sixth = lease(1, 40'000);
  ASSERT_EQ(sixth.size(), 1u);
  EXPECT_EQ(sixth[0].start_check, StartCheck::announce_alone);
  record_start(sixth, 40'000);
  Round expire;
  expire.add(calls::reclaim("q", 40'000, 100, 60));
  auto r = *calls::parse_reclaim(run(expire));
  EXPECT_EQ(r.dead, 1);
  EXPECT_EQ(r.not_counted, 0);
  EXPECT_EQ(field("a", "s"), "dead");
  EXPECT_NE(field("a", "e").find("attempts exhausted (1)"), std::string::npos) << field("a", "e");
}

// A heartbeat's extension ("held") records no start: a buffered job listed
// as held and lost with its worker still goes back free.
TEST_F(Scripts, ExtendingALeaseForAHeldJobRecordsNoStart) {
  enqueue({job("a", 0, 1)}, 1000);
  auto l = lease(1, 5000);
  ASSERT_EQ(l.size(), 1u);
  Round held;
  held.add(calls::extend("q", 9000, LeaseReport::held, {{"a", l[0].token}}));
  EXPECT_EQ(*ints(run(held)), (std::vector<int64_t>{1}));
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' a"), "9000");
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:started'"), "0");
  Round lost;
  lost.add(calls::nack("q", 2000, 0, 0, 60, {{"a", l[0].token, NackMode::lost, "worker lost", 0}}));
  EXPECT_EQ(calls::parse_nack(run(lost))->at(0).status, NackStatus::retried);
  EXPECT_EQ(field("a", "s"), "ready");
  EXPECT_EQ(field("a", "a"), "0");
}

// The broker says "lost" for a job of a dead worker that it did not see
// start; Redis still counts it when it holds the start (the broker that saw
// it may have been replaced).
TEST_F(Scripts, AJobOfALostWorkerUsesNoAttemptUnlessRedisHoldsItsStart) {
  const auto out = lose_a_and_started_b(NackMode::lost);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].status, NackStatus::retried);
  EXPECT_EQ(out[1].status, NackStatus::dead);
  EXPECT_EQ(field("a", "s"), "ready");
  EXPECT_EQ(field("a", "a"), "0");
  EXPECT_EQ(field("b", "s"), "dead");
}

// "lost_beside": the broker did not see the job start and its worker held
// others beside it. A start Redis holds (an earlier broker recorded it) is
// not charged then, and the next delivery runs alone; without a recorded
// start it is an unstarted delivery as under "lost".
TEST_F(Scripts, AStartAnEarlierBrokerRecordedIsNotChargedToAJobLostBesideOthers) {
  const auto out = lose_a_and_started_b(NackMode::lost_beside);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].status, NackStatus::retried);
  EXPECT_EQ(out[1].status, NackStatus::retried) << "b was charged its only attempt";
  EXPECT_EQ(field("a", "a"), "0");
  EXPECT_EQ(field("b", "a"), "0");
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:started'"), "0");
  auto again = lease(2, 9000);
  ASSERT_EQ(again.size(), 2u);
  const LeasedJob& a2 = again[0].id == "a" ? again[0] : again[1];
  const LeasedJob& b2 = again[0].id == "a" ? again[1] : again[0];
  EXPECT_EQ(a2.start_check, StartCheck::announce);
  EXPECT_EQ(b2.start_check, StartCheck::announce_alone);
}

// A worker died running several announced jobs: none of them is known to
// have killed it, so none is charged though Redis holds their starts, and
// each one's next delivery runs alone among the announced ones.
TEST_F(Scripts, JobsOfAWorkerThatDiedRunningSeveralAnnouncedOnesAreNotChargedAndRunAloneNext) {
  enqueue({job("a", 0, 1), job("b", 0, 1)}, 1000);
  auto l = lease(2, 5000);
  ASSERT_EQ(l.size(), 2u);
  record_start(l, 9000);
  Round round;
  round.add(calls::nack("q", 2000, 0, 0, 60,
                        {{l[0].id, l[0].token, NackMode::shared, "worker died", 0},
                         {l[1].id, l[1].token, NackMode::shared, "worker died", 0}}));
  auto out = *calls::parse_nack(run(round));
  EXPECT_EQ(out.at(0).status, NackStatus::retried);
  EXPECT_EQ(out.at(1).status, NackStatus::retried);
  EXPECT_EQ(field("a", "a"), "0");
  EXPECT_EQ(field("b", "a"), "0");
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:started'"), "0");
  auto again = lease(2, 9000);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].start_check, StartCheck::announce_alone);
  EXPECT_EQ(again[1].start_check, StartCheck::announce_alone);
}

TEST_F(Scripts, FinishedOrReplayedJobsLeaveNoStartOrUnstartedCount) {
  enqueue({job("a"), job("b")}, 1000);
  lease(2, 5000);
  Round expire;
  expire.add(calls::reclaim("q", 5000, 100, 60));
  EXPECT_EQ(calls::parse_reclaim(run(expire))->not_counted, 2);
  auto l = lease(2, 9000);
  ASSERT_EQ(l.size(), 2u);
  record_start(l, 9000);
  EXPECT_EQ(redis_->cli("SCARD 'dueq:{q}:started'"), "2");
  const LeasedJob& a = l[0].id == "a" ? l[0] : l[1];
  const LeasedJob& b = l[0].id == "a" ? l[1] : l[0];
  Round finish;
  finish.add(calls::ack("q", 6000, 60, {{"a", a.token}}));
  finish.add(calls::nack("q", 6000, 0, 0, 60, {{"b", b.token, NackMode::dead, "bad", 0}}));
  run(finish);
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:started'"), "0");
  EXPECT_EQ(redis_->cli("HEXISTS 'dueq:{q}:unconfirmed' a"), "0");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:unconfirmed' b"), "1");  // kept with the dead job, for a look
  Round replay;
  replay.add(calls::replay("q", 7000, {"b"}));
  EXPECT_EQ(*strs(run(replay)), std::vector<std::string>{"b"});
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:unconfirmed'"), "0");
}

TEST_F(Scripts, ExtendRefusesAnythingButHeldOrStarted) {
  enqueue({job("a")}, 1000);
  auto l = lease(1, 5000);
  const auto args = calls::extend("q", 9000, LeaseReport::held, {{"a", l[0].token}}).args();
  Command bad;
  bad.mark_fenced();  // rebuilt from a script_call's arguments
  for (size_t i = 0; i < args.size(); ++i) bad.add(i == args.size() - 4 ? std::string("running") : args[i]);
  Round round;
  round.add(std::move(bad));
  EXPECT_NE(reply_error(run(round)).find("bad-args extend"), std::string_view::npos);
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' a"), "5000");
}

TEST_F(Scripts, StatsCountEveryState) {
  enqueue({job("a"), job("b"), job("c", 10'000), job("d", 1500)}, 1000);
  auto l = lease(1, 5000);
  Round round;
  round.add(calls::stats("q"));
  auto s = *calls::parse_stats("q", run(round));
  EXPECT_EQ(s.scheduled, 2);  // c, and d (overdue, not promoted yet)
  EXPECT_EQ(s.waiting, 1);    // b
  EXPECT_EQ(s.in_flight, 1);  // a
  EXPECT_EQ(s.accepted, 4);
  EXPECT_EQ(s.next_due_ms, 1500);
  EXPECT_EQ(s.oldest_ready_due_ms, 1000);  // b, due at the enqueue
}

TEST_F(Scripts, ScriptsSurviveALostScriptCache) {
  redis_->cli("SCRIPT FLUSH");
  EXPECT_EQ(enqueue({job("a")}, 1000), std::vector<int64_t>{1});
}

// `min_replicas` adds WAIT after a round's enqueues: when an enqueue is
// resent after NOSCRIPT, its WAIT is resent after it, or the producer would
// be told replicas have a write they were asked about before it ran.
TEST_F(Scripts, AWaitIsResentAfterTheCallsResentBeforeIt) {
  redis_->cli("SCRIPT FLUSH");
  redis_->cli("CONFIG RESETSTAT");
  proto::NewJob first = job("first");
  Round round;
  round.add(calls::enqueue("q", {&first}, 1000, 3, 0));
  round.add(Command{"WAIT", "0", "0"});
  ASSERT_TRUE(store_->send(round));
  auto replies = store_->receive();
  ASSERT_TRUE(replies) << replies.error().message;
  EXPECT_EQ(*ints((*replies)[0].get()), std::vector<int64_t>{1});
  EXPECT_EQ((*replies)[1]->type, REDIS_REPLY_INTEGER);
  EXPECT_NE(redis_->cli("INFO commandstats").find("cmdstat_wait:calls=2,"), std::string::npos)
      << redis_->cli("INFO commandstats");
}

// The broker keeps two rounds on the wire. After SCRIPT FLUSH both come back
// refused; each refused call is sent again, the older round's first, so the
// second round's lease still sees the first round's job.
TEST_F(Scripts, PipelinedRoundsSurviveALostScriptCacheInOrder) {
  redis_->cli("SCRIPT FLUSH");
  proto::NewJob first = job("first");
  Round enqueue_round;
  enqueue_round.add(calls::enqueue("q", {&first}, 1000, 3, 0));
  Round lease_round;
  lease_round.add(calls::lease("q", 5000, 10));
  ASSERT_TRUE(store_->send(enqueue_round));
  ASSERT_TRUE(store_->send(lease_round));
  EXPECT_EQ(store_->outstanding(), 2u);
  EXPECT_FALSE(store_->execute(enqueue_round)) << "a synchronous round while others are outstanding is refused";
  auto enqueued = store_->receive();
  ASSERT_TRUE(enqueued) << enqueued.error().message;
  EXPECT_EQ(*ints((*enqueued)[0].get()), std::vector<int64_t>{1});
  auto leased = store_->receive();
  ASSERT_TRUE(leased) << leased.error().message;
  auto batch = calls::parse_lease((*leased)[0].get());
  ASSERT_TRUE(batch);
  ASSERT_EQ(batch->jobs.size(), 1u);
  EXPECT_EQ(batch->jobs[0].id, "first");
  EXPECT_EQ(store_->outstanding(), 0u);
}

// The broker writes its commands in Redis's protocol itself
// (redis_connection.cpp): arguments reach Redis byte for byte, whatever they
// hold (CR LF, NUL, high bytes, nothing at all), and pipelined replies come
// back one per command.
TEST_F(Scripts, CommandsReachRedisByteForByte) {
  const std::string binary = std::string("a\r\nb\0c\xff$*\r\n", 11) + std::string(70'000, 'x');
  auto replies = store_->pipeline({Command{"SET", "bytes", binary}, Command{"SET", "empty", ""},
                                   Command{"GET", "bytes"}, Command{"STRLEN", "empty"}});
  ASSERT_TRUE(replies) << replies.error().message;
  ASSERT_EQ(replies->size(), 4u);
  ASSERT_EQ((*replies)[2]->type, REDIS_REPLY_STRING);
  EXPECT_EQ(std::string((*replies)[2]->str, (*replies)[2]->len), binary);
  EXPECT_EQ((*replies)[3]->integer, 0);
}

TEST_F(Scripts, ScriptsSurviveARedisRestartWithAof) {
  enqueue({job("a", 5000)}, 1000);
  redis_->cli("SHUTDOWN");  // graceful: AOF flushed
  redis_->kill(SIGKILL);
  redis_->start();
  store_->disconnect();
  ASSERT_TRUE(store_->connect());
  Round round;
  round.add(calls::promote("q", 6000, 10));
  EXPECT_EQ(calls::parse_promote(run(round))->moved, 1);
}

TEST(RedisSettings, BrokerRefusesRedisWithoutAof) {
  dueq::testing::RedisServer redis({"--appendonly", "no"});
  ScriptRegistry store(*parse_redis_url(redis.url()));
  ASSERT_TRUE(store.connect());
  auto r = check_durability_settings(store);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("appendonly yes"), std::string::npos);
}

TEST(RedisSettings, BrokerRefusesAnEvictingRedis) {
  dueq::testing::RedisServer redis({"--maxmemory-policy", "allkeys-lru"});
  ScriptRegistry store(*parse_redis_url(redis.url()));
  ASSERT_TRUE(store.connect());
  auto r = check_durability_settings(store);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("maxmemory-policy noeviction"), std::string::npos);
}

TEST(RedisSettings, ProductionSettingsPass) {
  dueq::testing::RedisServer redis;
  ScriptRegistry store(*parse_redis_url(redis.url()));
  ASSERT_TRUE(store.connect());
  EXPECT_TRUE(check_durability_settings(store));
  EXPECT_EQ(settings_advice(store).value_or("failed"), "");
}

// A pin no longer than the listpack value limits would leave the hot keys
// listpacks without a word: its length follows the limits of the Redis in use.
TEST(RedisSettings, EncodingPinsAreOneBytePastTheLargerListpackValueLimit) {
  {
    dueq::testing::RedisServer redis;
    ScriptRegistry store(*parse_redis_url(redis.url()));
    ASSERT_TRUE(store.connect());
    EXPECT_EQ(encoding_pin_bytes(store).value_or(0), kEncodingPinBytes);
  }
  dueq::testing::RedisServer redis({"--hash-max-listpack-value", "3000", "--zset-max-listpack-value", "2000"});
  ScriptRegistry store(*parse_redis_url(redis.url()));
  ASSERT_TRUE(store.connect());
  EXPECT_EQ(encoding_pin_bytes(store).value_or(0), 3001u);
  ASSERT_EQ(redis.cli("CONFIG SET zset-max-listpack-value 65536"), "OK");
  auto refused = encoding_pin_bytes(store);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::bad_argument);
  EXPECT_NE(refused.error().message.find("zset-max-listpack-value 65536"), std::string::npos) << refused.error().message;
}

TEST(RedisSettings, SettingsBelowDeployRedisConfAreNamedInTheAdviceWithWhatTheyCost) {
  dueq::testing::RedisServer redis({"--hash-max-listpack-entries", "128", "--zset-max-listpack-entries", "64",
                                    "--auto-aof-rewrite-min-size", "64mb"});
  ScriptRegistry store(*parse_redis_url(redis.url()));
  ASSERT_TRUE(store.connect());
  const std::string advice = settings_advice(store).value_or("failed");
  EXPECT_NE(advice.find("hash-max-listpack-entries is 128 (recommended: 256), zset-max-listpack-entries is 64 "
                        "(recommended: 256): scheduled jobs will use more Redis memory"),
            std::string::npos)
      << advice;
  EXPECT_NE(advice.find("; auto-aof-rewrite-min-size is 67108864 (recommended: 1073741824): under load AOF rewrites"),
            std::string::npos)
      << advice;
  EXPECT_EQ(advice.find("hash-max-listpack-value"), std::string::npos) << advice;
}

namespace {

proto::NewJob qjob(std::string id, int64_t due = 0, uint32_t max = 0) { return job(std::move(id), due, max); }

}  // namespace

TEST_F(Scripts, CancelEndsScheduledAndReadyJobsAtOnce) {
  enqueue({qjob("s", 5000), qjob("r")}, 1000);
  for (const char* id : {"s", "r"}) {
    Round round;
    round.add(calls::cancel("q", 2000, id, 60));
    EXPECT_EQ(calls::parse_cancel(run(round))->status, CancelStatus::cancelled) << id;
    EXPECT_EQ(field(id, "s"), "cancelled");
  }
  EXPECT_EQ(redis_->cli("EXISTS " + partition_of("s") + " " + partition_jobs_of("s")), "0");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:schedule'"), "0");  // an emptied partition leaves the index
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' scheduled"), "0");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "0");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' cancelled"), "2");
  Round again;
  again.add(calls::cancel("q", 2000, "s", 60));
  EXPECT_EQ(calls::parse_cancel(run(again))->status, CancelStatus::already_finished);  // already finished
  Round missing;
  missing.add(calls::cancel("q", 2000, "nope", 60));
  EXPECT_EQ(calls::parse_cancel(run(missing))->status, CancelStatus::not_found);
}

TEST_F(Scripts, CancellingALeasedJobEndsItCancelledWhenItsDeliveryEnds) {
  enqueue({qjob("a", 0, 5), qjob("b", 0, 5)}, 1000);
  auto l = lease(2, 5000);
  for (const char* id : {"a", "b"}) {
    Round round;
    round.add(calls::cancel("q", 2000, id, 60));
    auto c = *calls::parse_cancel(run(round));
    EXPECT_EQ(c.status, CancelStatus::cancel_requested);
    EXPECT_GT(c.token, 0u);
  }
  // a: its worker reports a failure; the cancel mark wins over a retry.
  Round nack;
  nack.add(calls::nack("q", 2100, 0, 0, 60, {{"a", l[0].token, NackMode::retry, "killed", 0}}));
  EXPECT_EQ(calls::parse_nack(run(nack))->at(0).status, NackStatus::cancelled);
  EXPECT_EQ(field("a", "s"), "cancelled");
  // b: its worker vanished; the lease expires and the job ends cancelled.
  Round reclaim;
  reclaim.add(calls::reclaim("q", 6000, 10, 60));
  run(reclaim);
  EXPECT_EQ(field("b", "s"), "cancelled");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' cancelled"), "2");
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "0");
}

TEST_F(Scripts, HandedBackJobsDoNotUseAnAttempt) {
  enqueue({qjob("a", 0, 1)}, 1000);
  for (int i = 0; i < 3; ++i) {
    auto l = lease(1, 5000);
    ASSERT_EQ(l.size(), 1u);
    EXPECT_EQ(l[0].attempt, 1u);
    Round round;
    round.add(calls::nack("q", 2000, 0, 0, 60, {{"a", l[0].token, NackMode::handed_back, "draining", 0}}));
    EXPECT_EQ(calls::parse_nack(run(round))->at(0).status, NackStatus::retried);
  }
  EXPECT_EQ(field("a", "s"), "ready");
}

TEST_F(Scripts, ReplayPutsDeadJobsBackWithAttemptsResetAndTheSameId) {
  enqueue({qjob("a", 0, 1), qjob("b", 0, 1)}, 1000);
  auto l = lease(2, 5000);
  Round kill;
  kill.add(calls::nack("q", 2000, 0, 0, 60, {{"a", l[0].token, NackMode::dead, "bad", 0}, {"b", l[1].token, NackMode::dead, "bad", 0}}));
  run(kill);
  Round replay;
  replay.add(calls::replay("q", 3000, {"a", "not-dead"}));
  EXPECT_EQ(*strs(run(replay)), std::vector<std::string>{"a"});
  EXPECT_EQ(field("a", "s"), "ready");
  EXPECT_EQ(field("a", "a"), "0");
  Round all;
  all.add(calls::replay_oldest("q", 3000, 1000));
  EXPECT_EQ(*strs(run(all)), std::vector<std::string>{"b"});
  auto again = lease(2, 9000);
  EXPECT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].attempt, 1u);
}

TEST_F(Scripts, PurgeDeletesDeadJobsByIdOrAgeAndCountsThem) {
  enqueue({qjob("old", 0, 1), qjob("new", 0, 1)}, 1000);
  std::map<std::string, uint64_t> token;
  for (const auto& j : lease(2, 5000)) token[j.id] = j.token;
  Round kill_old;
  kill_old.add(calls::nack("q", 2000, 0, 0, 60, {{"old", token["old"], NackMode::dead, "x", 0}}));
  run(kill_old);
  Round kill_new;
  kill_new.add(calls::nack("q", 9000, 0, 0, 60, {{"new", token["new"], NackMode::dead, "x", 0}}));
  run(kill_new);
  Round by_age;
  by_age.add(calls::purge_dead_before("q", 5000, 100));
  EXPECT_EQ(*strs(run(by_age)), std::vector<std::string>{"old"});
  EXPECT_EQ(redis_->cli("HEXISTS 'dueq:{q}:jobs' old"), "0");
  Round by_id;
  by_id.add(calls::purge("q", {"new"}));
  EXPECT_EQ(*strs(run(by_id)), std::vector<std::string>{"new"});
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' purged"), "2");
}

TEST_F(Scripts, EnqueueIsRefusedWhileTheBacklogIsFull) {
  EXPECT_EQ(enqueue({qjob("a"), qjob("b")}, 1000, 3, 2), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(enqueue({qjob("c", 9000)}, 1000, 3, 2), (std::vector<int64_t>{2}));
  EXPECT_EQ(redis_->cli("HEXISTS 'dueq:{q}:jobs' c"), "0");
  EXPECT_EQ(enqueue({qjob("c", 9000)}, 1000, 3, 0), (std::vector<int64_t>{1}));  // 0 = no limit
}

// Delayed jobs count: a flood of jobs due in a second cannot pass the limit.
// A batch takes the room there is, no more; duplicates are still duplicates.
TEST_F(Scripts, TheBacklogCountsScheduledJobsAndABatchTakesOnlyTheRoomLeft) {
  EXPECT_EQ(enqueue({qjob("a", 9000), qjob("b", 9000)}, 1000, 3, 3), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(enqueue({qjob("a", 9000), qjob("c", 9000), qjob("d"), qjob("e", 9000)}, 1000, 3, 3),
            (std::vector<int64_t>{0, 1, 2, 2}));
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' scheduled"), "3");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' accepted"), "3");
  EXPECT_EQ(field("d", "s"), "");
  EXPECT_EQ(enqueue({qjob("f")}, 1000, 3, 3), (std::vector<int64_t>{2}));
}

TEST_F(Scripts, CapLeasesShortensOnlyLongerLeases) {
  enqueue({qjob("a"), qjob("b")}, 1000);
  lease(1, 3000);
  lease(1, 60'000);
  Round round;
  round.add(calls::cap_leases("q", 5000, 100));
  EXPECT_EQ(ints(run(round))->at(0), 1);
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' a"), "3000");
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' b"), "5000");
}

TEST_F(Scripts, AuditBalancesTheBooksAndFindsInconsistentEntries) {
  enqueue({qjob("a"), qjob("b"), qjob("c", 9000)}, 1000);
  auto l = lease(1, 5000);
  Round ack;
  ack.add(calls::ack("q", 2000, 0, {{"a", l[0].token}}));
  run(ack);
  Round clean;
  clean.add(calls::audit("q", {}));
  clean.add(calls::audit("q", {"a", "b", "c"}));
  auto counts = calls::parse_audit(run(clean, 0))->counts;
  EXPECT_EQ(counts.imbalance(), 0);
  EXPECT_EQ(counts.scheduled, 1);
  EXPECT_TRUE(calls::parse_audit(replies_.at(1).get())->problems.empty());
  // Corrupt the store: a lease without a job, a job in two sets (b is ready,
  // and now also in its schedule partition, which the index does not name).
  redis_->cli("ZADD 'dueq:{q}:leased' 1 ghost");
  redis_->cli("ZADD " + partition_of("b") + " 1 b");
  Round dirty;
  dirty.add(calls::audit("q", {}));
  dirty.add(calls::audit("q", {"ghost", "b"}));
  counts = calls::parse_audit(run(dirty, 0))->counts;
  EXPECT_NE(counts.imbalance(), 0);  // the stray lease
  auto slice = *calls::parse_audit(replies_.at(1).get());
  ASSERT_EQ(slice.problems.size(), 2u);
  EXPECT_EQ(slice.problems[0].first, "ghost");
  EXPECT_EQ(slice.problems[1].first, "b");
  EXPECT_NE(slice.problems[1].second.find("more than one"), std::string::npos);
  Round repair;
  repair.add(calls::repair("q", {"ghost", "b"}));
  EXPECT_EQ(*strs(run(repair)), std::vector<std::string>{"ghost"});  // b has a record: left alone
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' ghost"), "");
}

TEST_F(Scripts, AuditReportsAJobWithARecordInNoStateSetAsLost) {
  enqueue({qjob("a"), qjob("b")}, 1000);
  redis_->cli("ZREM 'dueq:{q}:ready' a");  // what a bug that loses a job would leave
  Round round;
  round.add(calls::audit("q", {}));
  round.add(calls::audit("q", {"a", "b"}));
  EXPECT_NE(calls::parse_audit(run(round, 0))->counts.imbalance(), 0);
  auto slice = *calls::parse_audit(replies_.at(1).get());
  ASSERT_EQ(slice.problems.size(), 1u);
  EXPECT_EQ(slice.problems[0].first, "a");
  EXPECT_NE(slice.problems[0].second.find("lost"), std::string::npos);
}

TEST_F(Scripts, AuditFindsAScheduledRecordWhoseScheduleEntryIsGoneAndOneInTheWrongHash) {
  enqueue({qjob("a", 9000), qjob("b", 9000), qjob("c")}, 1000);
  redis_->cli("ZREM " + partition_of("a") + " a");          // a: record left, schedule entry gone
  redis_->cli("HSET 'dueq:{q}:jobs' b x");                   // b: a record in both hashes
  Round round;
  round.add(calls::audit("q", {"a", "b", "c"}));
  auto slice = *calls::parse_audit(run(round));
  ASSERT_EQ(slice.problems.size(), 2u);
  EXPECT_EQ(slice.problems[0].first, "a");
  EXPECT_NE(slice.problems[0].second.find("lost"), std::string::npos);
  EXPECT_EQ(slice.problems[1].first, "b");
  EXPECT_NE(slice.problems[1].second.find("not where its state keeps it"), std::string::npos);
}

TEST_F(Scripts, AnUnreadableRecordMakesTheFailedJobDeadNotLost) {
  enqueue({qjob("a", 0, 5)}, 1000);
  auto l = lease(1, 5000);
  redis_->cli("HSET 'dueq:{q}:jobs' a garbage");
  Round round;
  round.add(calls::nack("q", 2000, 100, 1000, 60, {{"a", l[0].token, NackMode::retry, "boom", 0.5}}));
  auto out = *calls::parse_nack(run(round));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status, NackStatus::dead);
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:dead' a"), "2000");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:jobs' a"), "garbage");  // kept for a look
}

TEST_F(Scripts, AJobsOwnBackoffOverridesTheQueuesOne) {
  proto::NewJob own = qjob("own", 0, 5);
  own.backoff_base_ms = 10'000;
  own.backoff_cap_ms = 15'000;
  enqueue({own, qjob("queue", 0, 5)}, 1000);
  EXPECT_EQ(field("own", "bb"), "10000");
  EXPECT_EQ(field("queue", "bb"), "");  // 0 = the queue's
  for (int attempt = 1; attempt <= 3; ++attempt) {
    auto l = lease(2, 5000);
    ASSERT_EQ(l.size(), 2u);
    Round round;
    round.add(calls::nack("q", 2000, 100, 1000, 60,
               {{l[0].id, l[0].token, NackMode::retry, "x", 1.0}, {l[1].id, l[1].token, NackMode::retry, "x", 1.0}}));
    auto out = *calls::parse_nack(run(round));
    for (size_t i = 0; i < 2; ++i) {
      const bool is_own = l[i].id == "own";
      const int64_t expected = is_own ? std::min<int64_t>(15'000, 10'000LL << (attempt - 1))
                                      : std::min<int64_t>(1'000, 100LL << (attempt - 1));
      EXPECT_EQ(out[i].due_ms, 2000 + expected) << l[i].id << " attempt " << attempt;
    }
    Round promote;
    promote.add(calls::promote("q", 100'000, 10));
    run(promote);
  }
}

TEST_F(Scripts, ScanIdsWalksEveryJobRecordAndReturnsOnlyIds) {
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 300; ++i) jobs.push_back(qjob("j" + std::to_string(i)));
  enqueue(jobs, 1000);
  std::set<std::string> seen;
  std::string cursor = "0";
  do {
    Round scan;
    scan.add(calls::scan_ids(QueueKeys("q").jobs, cursor, 1000));
    const redisReply* step = run(scan);
    ASSERT_EQ(step->type, REDIS_REPLY_ARRAY);
    ASSERT_EQ(step->elements, 2u);
    cursor = reply::str(step->element[0]);
    auto ids = strs(step->element[1]);
    ASSERT_TRUE(ids);
    for (const auto& id : *ids) {
      EXPECT_EQ(id.rfind("j", 0), 0u) << "not an id: " << id.substr(0, 20);
      seen.insert(id);
    }
  } while (cursor != "0");
  EXPECT_EQ(seen.size(), 300u);
  Round bad;
  bad.add(calls::scan_ids(QueueKeys("q").jobs, "0", 0));
  EXPECT_NE(reply_error(run(bad)).find("bad-args"), std::string_view::npos);
}

TEST_F(Scripts, PromoteTakesDueJobsFromEveryPartitionAndKeepsTheIndexExact) {
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 400; ++i) jobs.push_back(qjob("p" + std::to_string(i), 2000 + i));  // 2000..2399
  enqueue(jobs, 1000);
  Round first;
  first.add(calls::promote("q", 2199, 150));  // 200 are due; the limit takes 150
  auto p = *calls::parse_promote(run(first));
  EXPECT_EQ(p.moved, 150);
  EXPECT_LE(p.next_due_ms, 2199);  // more are due: the broker promotes again at once
  Round second;
  second.add(calls::promote("q", 2199, 5000));
  p = *calls::parse_promote(run(second));
  EXPECT_EQ(p.moved, 50);
  EXPECT_EQ(p.next_due_ms, 2200);  // exact after promote: the earliest job left
  EXPECT_EQ(redis_->cli("ZCARD 'dueq:{q}:ready'"), "200");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' scheduled"), "200");
  EXPECT_EQ(redis_->cli("ZRANGE 'dueq:{q}:ready' 0 1"), "p0\np1");  // earliest due leases first
  EXPECT_EQ(field("p0", "s"), "ready");
  EXPECT_EQ(field("p0", "p"), "payload-x");  // the record came along
  EXPECT_EQ(redis_->cli("HEXISTS " + partition_jobs_of("p0") + " p0"), "0");
  // Every index entry is exact now: the earliest due of its partition.
  const std::string index = redis_->cli("ZRANGE 'dueq:{q}:schedule' 0 -1 WITHSCORES");
  std::istringstream lines(index);
  std::string partition, score;
  int checked = 0;
  while (std::getline(lines, partition) && std::getline(lines, score)) {
    const std::string head = redis_->cli("ZRANGE 'dueq:{q}:schedule:" + partition + "' 0 0 WITHSCORES");  // "id\nscore"
    EXPECT_EQ(head.substr(head.find('\n') + 1), score) << partition;
    ++checked;
  }
  EXPECT_GT(checked, 150);
}

TEST_F(Scripts, ARetryWithBackoffMovesTheRecordIntoItsSchedulePartitionAndBack) {
  enqueue({qjob("a", 0, 5)}, 1000);
  auto l = lease(1, 5000);
  Round nack;
  nack.add(calls::nack("q", 2000, 1000, 60'000, 60, {{"a", l[0].token, NackMode::retry, "boom", 1.0}}));
  EXPECT_EQ(calls::parse_nack(run(nack))->at(0).due_ms, 3000);
  EXPECT_EQ(redis_->cli("HEXISTS 'dueq:{q}:jobs' a"), "0");
  EXPECT_EQ(redis_->cli("HEXISTS " + partition_jobs_of("a") + " a"), "1");
  EXPECT_EQ(redis_->cli("ZSCORE " + partition_of("a") + " a"), "3000");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' scheduled"), "1");
  Round stale;  // the old delivery reports again: the job is scheduled now
  stale.add(calls::nack("q", 2100, 1000, 60'000, 60, {{"a", l[0].token, NackMode::retry, "late", 1.0}}));
  EXPECT_EQ(calls::parse_nack(run(stale))->at(0).status, NackStatus::stale);
  Round promote;
  promote.add(calls::promote("q", 3000, 10));
  EXPECT_EQ(calls::parse_promote(run(promote))->moved, 1);
  auto again = lease(1, 9000);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].attempt, 2u);
  EXPECT_EQ(again[0].record.payload, "payload-x");
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' scheduled"), "0");
}

// A store written before the schedule was partitioned: one sorted set of ids
// with the records in the jobs hash. The broker moves it over at start.
TEST_F(Scripts, MigrationMovesEveryJobOfTheOldScheduleIntoThePartitions) {
  const std::string record = encode_job_record(JobRecord{"t", "old-payload", 9000, 3, 1000, 0, 0});
  Round legacy;
  for (int i = 0; i < 1200; ++i) {
    const std::string id = "old" + std::to_string(i);
    legacy.add(Command{"ZADD", "dueq:{q}:scheduled", std::to_string(9000 + i), id});
    legacy.add(Command{"HSET", "dueq:{q}:jobs", id, record});
  }
  legacy.add(Command{"ZADD", "dueq:{q}:scheduled", "9000", "no-record"});
  legacy.add(Command{"HSET", "dueq:{q}:stats", "accepted", "1200"});
  run(legacy);
  auto moved = migrate_legacy_schedule(*store_, "q");
  ASSERT_TRUE(moved) << moved.error().message;
  EXPECT_EQ(*moved, 1200);
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:scheduled'"), "0");
  EXPECT_EQ(redis_->cli("HLEN 'dueq:{q}:jobs'"), "0");
  EXPECT_EQ(field("old5", "s"), "scheduled");
  EXPECT_EQ(field("old5", "p"), "old-payload");
  EXPECT_EQ(*migrate_legacy_schedule(*store_, "q"), 0);  // nothing left: a second start moves nothing
  Round audit;
  audit.add(calls::audit("q", {}));
  auto counts = calls::parse_audit(run(audit))->counts;
  EXPECT_EQ(counts.imbalance(), 0);
  EXPECT_EQ(counts.scheduled, 1200);
  Round promote;
  promote.add(calls::promote("q", 100'000, 5000));
  EXPECT_EQ(calls::parse_promote(run(promote))->moved, 1200);
}

TEST_F(Scripts, ScriptsTakingAPartitionRefuseABadOne) {
  const QueueKeys k("q");
  auto eval = [&](lua::ScriptId id, const std::vector<std::string>& keys, const std::vector<std::string>& argv) {
    // EVAL, not sent through the registry: the fence is appended here.
    const bool fenced = lua::script(id).fenced;
    Command cmd{"EVAL", lua::script(id).source, std::to_string(keys.size() + (fenced ? 2 : 0))};
    for (auto& key : keys) cmd.add(key);
    if (fenced) cmd.add(k.epoch).add(kLeaderEpochsKey);
    for (auto& a : argv) cmd.add(a);
    if (fenced) cmd.add("1");
    Round round;
    round.add(std::move(cmd));
    return std::string(reply_error(run(round)));
  };
  enqueue({qjob("a", 9000)}, 1000);
  const std::vector<std::string> all = {k.schedule, k.ready, k.leased, k.dead, k.done, k.cancelled, k.stats,
                                        k.jobs, k.tokens, k.attempts, k.errors, k.error_logs, k.cancel_requested};
  for (const char* bad : {"32768", "-1", "01", "00", "1e1", " 1", "", "x"}) {
    EXPECT_NE(eval(lua::ScriptId::cancel, all, {"2000", "a", "60", bad}).find("bad-args"), std::string::npos) << bad;
    EXPECT_NE(eval(lua::ScriptId::show,
                   {k.schedule, k.ready, k.leased, k.dead, k.done, k.cancelled, k.jobs, k.tokens, k.attempts, k.errors,
                    k.error_logs, k.cancel_requested},
                   {"a", bad})
                  .find("bad-args"),
              std::string::npos)
        << bad;
    EXPECT_NE(eval(lua::ScriptId::audit, {k.schedule, k.ready, k.leased, k.dead, k.stats, k.jobs}, {"a", bad})
                  .find("bad-args"),
              std::string::npos)
        << bad;
    EXPECT_NE(eval(lua::ScriptId::repair, {k.schedule, k.ready, k.leased, k.dead, k.jobs, k.stats}, {"a", bad})
                  .find("bad-args"),
              std::string::npos)
        << bad;
    EXPECT_NE(eval(lua::ScriptId::migrate_schedule, {k.legacy_scheduled, k.schedule, k.jobs, k.stats}, {"a", bad})
                  .find("bad-args"),
              std::string::npos)
        << bad;
    EXPECT_NE(eval(lua::ScriptId::nack,
                   {k.schedule, k.ready, k.leased, k.dead, k.stats, k.jobs, k.tokens, k.attempts, k.errors,
                    k.error_logs, k.cancel_requested, k.cancelled},
                   {"2000", "0", "0", "60", "1", "a", "1", "retry", "x", bad, "0.5"})
                  .find("bad-args"),
              std::string::npos)
        << bad;
  }
  EXPECT_EQ(field("a", "s"), "scheduled");  // nothing changed
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' scheduled"), "1");
}

// The auditor walks every schedule partition, including ones the index no
// longer names, and finds a scheduled job whose sorted-set entry is gone.
TEST_F(Scripts, TheAuditorWalksEverySchedulePartition) {
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 500; ++i) jobs.push_back(qjob("s" + std::to_string(i), 9000 + i));
  jobs.push_back(qjob("now"));
  enqueue(jobs, 1000);
  auto clean = audit_queue(*store_, "q", /*repair=*/false);
  ASSERT_TRUE(clean) << clean.error().message;
  EXPECT_TRUE(clean->clean());
  EXPECT_EQ(clean->counts.scheduled, 500);
  EXPECT_EQ(clean->counts.ready, 1);
  // s7 loses its schedule entry, and its partition leaves the index as well.
  const std::string partition = std::to_string(schedule_partition("s7"));
  redis_->cli("ZREM " + partition_of("s7") + " s7");
  redis_->cli("ZREM 'dueq:{q}:schedule' " + partition);
  auto dirty = audit_queue(*store_, "q", /*repair=*/true);
  ASSERT_TRUE(dirty) << dirty.error().message;
  ASSERT_EQ(dirty->problems.size(), 1u);
  EXPECT_EQ(dirty->problems[0].first, "s7");
  EXPECT_NE(dirty->problems[0].second.find("lost"), std::string::npos);
  // A record with no state is reported, never removed; the schedule filter
  // still counted s7 and is made exact.
  ASSERT_EQ(dirty->repaired.size(), 1u);
  EXPECT_EQ(dirty->repaired[0].rfind("schedule filter " + partition + ":", 0), 0u) << dirty->repaired[0];
}

// Rule: the audit's walk of a state set misses no id that stays in it,
// whatever leaves the set meanwhile. 20,000 dead entries without records
// leave one by one (ZPOPMIN, lowest first) while the audit runs; the last
// one, which stays, is reported. A walk by rank skipped it: every entry
// that left below the walk's position moved the last ones into ranks it
// had read already.
TEST_F(Scripts, TheAuditSeesEveryIdThatStaysInAStateSetWhileOthersLeaveIt) {
  std::vector<std::string> zadd = {"ZADD", "dueq:{q}:dead"};
  for (int i = 0; i < 20'000; ++i) {
    zadd.push_back(std::to_string(i));
    zadd.push_back(fmt::format("leaves-{:05}", i));
  }
  zadd.push_back("99999999");
  zadd.push_back("stays");
  Command command;
  for (const auto& arg : zadd) command.add(arg);
  ASSERT_TRUE(store_->call(command));
  std::atomic<bool> auditing{true};
  std::thread leaving([&] {
    ScriptRegistry other(*parse_redis_url(redis_->url()));
    ASSERT_TRUE(other.connect());
    for (int popped = 0; auditing && popped < 20'000; ++popped) ASSERT_TRUE(other.call(Command{"ZPOPMIN", "dueq:{q}:dead"}));
  });
  auto report = audit_queue(*store_, "q", /*repair=*/false);
  auditing = false;
  leaving.join();
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_TRUE(std::any_of(report->problems.begin(), report->problems.end(),
                          [](const auto& problem) { return problem.first == "stays"; }))
      << "the id that stayed in the dead set was not checked; " << report->problems.size() << " problems reported";
  EXPECT_GT(std::stoll(redis_->cli("ZCARD 'dueq:{q}:dead'")), 1) << "every other entry left before the audit ended";
}

namespace {

// The schedule filter's bucket tail of an id (lua/lib/schedule_filter.lua).
int filter_tail(const std::string& id) {
  int bytes[3] = {0, 0, 0};
  const size_t n = std::min<size_t>(3, id.size());
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>(id[id.size() - n + i]);
  return (bytes[0] * 961 + bytes[1] * 31 + bytes[2]) % 100;
}

}  // namespace

// Enqueue, promote, nack, cancel, repair and the legacy migration all keep
// the filter's counters equal to the ids in each bucket; once the schedule
// is empty every counter is zero again.
TEST_F(Scripts, EveryScriptThatChangesTheScheduleKeepsTheFilterExact) {
  const QueueKeys k("q");
  auto filter_exact = [&] {
    auto wrong = check_schedule_filter(*store_, "q", k.schedule_filter, false);
    EXPECT_TRUE(wrong) << wrong.error().message;
    return wrong && wrong->empty();
  };
  // Short ids (fewer than three tail bytes) and an id of partition 0, whose
  // offsets Lua builds differently.
  std::string in_partition_0;
  for (int i = 0; in_partition_0.empty(); ++i)
    if (schedule_partition("p0-" + std::to_string(i)) == 0) in_partition_0 = "p0-" + std::to_string(i);
  enqueue({qjob("a", 5000, 5), qjob("xy", 5000), qjob(in_partition_0, 5000)}, 1000);
  for (int chunk = 0; chunk < 2; ++chunk) {
    std::vector<proto::NewJob> jobs;
    for (int i = chunk * 1000; i < (chunk + 1) * 1000; ++i)
      jobs.push_back(qjob("f" + std::to_string(i), 5000 + (i % 2) * 5000, 5));
    enqueue(jobs, 1000);
  }
  EXPECT_TRUE(filter_exact());
  EXPECT_NE(filter_bits(k.schedule_filter), 0);

  Round promote;  // half of them
  promote.add(calls::promote("q", 5000, 5000));
  EXPECT_EQ(calls::parse_promote(run(promote))->moved, 1003);
  EXPECT_TRUE(filter_exact());

  auto leased = lease(10, 9000);
  ASSERT_EQ(leased.size(), 10u);
  std::vector<NackItem> retries;
  for (const auto& l : leased) retries.push_back({l.id, l.token, NackMode::retry, "boom", 1.0});
  Round nack;
  nack.add(calls::nack("q", 6000, 1000, 60'000, 60, retries));
  run(nack);
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' scheduled"), "1010");
  EXPECT_TRUE(filter_exact());

  Round cancel;
  cancel.add(calls::cancel("q", 6000, "f1", 60));
  EXPECT_EQ(calls::parse_cancel(run(cancel))->status, CancelStatus::cancelled);
  EXPECT_TRUE(filter_exact());

  redis_->cli("HDEL " + partition_jobs_of("f3") + " f3");  // f3's entry now dangles: repair removes it
  Round repair;
  repair.add(calls::repair("q", {"f3"}));
  EXPECT_EQ(*strs(run(repair)), std::vector<std::string>{"f3"});
  EXPECT_TRUE(filter_exact());

  const std::string record = encode_job_record(JobRecord{"t", "old-payload", 9000, 3, 1000, 0, 0});
  Round legacy;
  legacy.add(Command{"ZADD", k.legacy_scheduled, "9000", "old"});
  legacy.add(Command{"HSET", k.jobs, "old", record});
  run(legacy);
  EXPECT_EQ(*migrate_legacy_schedule(*store_, "q"), 1);
  EXPECT_TRUE(filter_exact());
  EXPECT_EQ(enqueue({qjob("old")}, 6000), std::vector<int64_t>{0});

  Round rest;
  rest.add(calls::promote("q", 100'000, 5000));
  EXPECT_EQ(calls::parse_promote(run(rest))->moved, 1009);
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' scheduled"), "0");
  EXPECT_EQ(filter_bits(k.schedule_filter), 0);
}

// The filter is what spares an enqueue its look into the partition: with a
// counter wrongly zero, a scheduled id's duplicate is not seen. The audit
// reports such a counter and repair makes it exact.
TEST_F(Scripts, AnEnqueueLooksIntoThePartitionOnlyWhereTheFilterCounts) {
  const QueueKeys k("q");
  enqueue({qjob("a", 9000), qjob("b", 9000)}, 1000);
  EXPECT_EQ(enqueue({qjob("a")}, 1000), std::vector<int64_t>{0});
  delete_filter(k.schedule_filter);
  auto report = audit_queue(*store_, "q", /*repair=*/false);
  ASSERT_TRUE(report) << report.error().message;
  ASSERT_EQ(report->problems.size(), 2u);
  EXPECT_EQ(report->problems[0].first.rfind("schedule filter ", 0), 0u);
  EXPECT_EQ(report->problems[0].second, "counter 0 for 1 scheduled ids");
  EXPECT_EQ(enqueue({qjob("a")}, 1000), std::vector<int64_t>{1});  // not looked for: a second job
  auto repaired = audit_queue(*store_, "q", /*repair=*/true);
  ASSERT_TRUE(repaired) << repaired.error().message;
  EXPECT_EQ(repaired->repaired.size(), 2u);
  EXPECT_EQ(enqueue({qjob("b")}, 1000), std::vector<int64_t>{0});
  auto after = check_schedule_filter(*store_, "q", k.schedule_filter, false);
  ASSERT_TRUE(after);
  EXPECT_TRUE(after->empty());
}

// 300 ids in one bucket: its counter saturates at 255 and stays there while
// they leave (it can no longer be lowered soundly), so the last of them is
// still found; repair then makes it exact.
TEST_F(Scripts, ASaturatedFilterCounterStaysUntilRepairMakesItExact) {
  const QueueKeys k("q");
  const uint32_t partition = schedule_partition("seed-xyz");
  std::vector<std::string> ids;
  for (int i = 0; ids.size() < 300; ++i) {
    const std::string id = std::to_string(i) + "-xyz";  // one tail: only the partition varies
    if (schedule_partition(id) == partition) ids.push_back(id);
  }
  ASSERT_EQ(filter_tail(ids[0]), filter_tail(ids[299]));
  std::vector<proto::NewJob> jobs;
  for (size_t i = 0; i < ids.size(); ++i) jobs.push_back(qjob(ids[i], i < 299 ? 5000 : 9000));
  enqueue(jobs, 1000);
  auto counter = [&] { return redis_->cli(filter_bitfield(k.schedule_filter, partition, filter_tail(ids[0]), "GET")); };
  EXPECT_EQ(counter(), "255");
  Round promote;
  promote.add(calls::promote("q", 5000, 5000));
  EXPECT_EQ(calls::parse_promote(run(promote))->moved, 299);
  EXPECT_EQ(counter(), "255");
  EXPECT_EQ(enqueue({qjob(ids[299])}, 1000), std::vector<int64_t>{0});
  auto check = check_schedule_filter(*store_, "q", k.schedule_filter, false);
  ASSERT_TRUE(check);
  EXPECT_TRUE(check->empty());  // saturated is not wrong
  auto set = check_schedule_filter(*store_, "q", k.schedule_filter, true);
  ASSERT_TRUE(set);
  ASSERT_EQ(set->size(), 1u);
  EXPECT_EQ(set->at(0).counter, 255);
  EXPECT_EQ(set->at(0).ids, 1);
  EXPECT_EQ(counter(), "1");
}

// A store written before the filter existed has scheduled jobs and no
// filter, and one written before it came in chunks has it as one string:
// the broker builds the chunks at start, aside, and moves them into place
// in one transaction (dropping the string).
TEST_F(Scripts, TheMissingScheduleFilterOfAnOlderStoreIsBuiltOnce) {
  const QueueKeys k("q");
  EXPECT_EQ(*build_missing_schedule_filter(*store_, "q"), false);  // no schedule: nothing to build
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 1000; ++i) jobs.push_back(qjob("j" + std::to_string(i), 9000));
  enqueue(jobs, 1000);
  const std::vector<std::string> built_by_enqueue = filter_chunks(k.schedule_filter);
  for (const bool single_string : {false, true}) {
    delete_filter(k.schedule_filter);
    if (single_string) redis_->cli("SET '" + k.schedule_filter + "' old-layout");
    redis_->cli("SET '" + schedule_filter_chunk_key(k.schedule_filter + ":building", 7) + "' junk");  // left by a broker stopped halfway
    auto built = build_missing_schedule_filter(*store_, "q");
    ASSERT_TRUE(built) << built.error().message;
    EXPECT_TRUE(*built);
    EXPECT_EQ(filter_bits(k.schedule_filter + ":building"), 0);
    EXPECT_EQ(filter_chunks(k.schedule_filter), built_by_enqueue);
    EXPECT_EQ(redis_->cli("EXISTS '" + k.schedule_filter + "'"), "0");
    EXPECT_EQ(*build_missing_schedule_filter(*store_, "q"), false);
    EXPECT_EQ(enqueue({qjob("j7")}, 1000), std::vector<int64_t>{0});
  }
}

// The filter is sized by what a queue holds: one scheduled job costs one
// chunk of 100,000 counters, wherever its partition is (one string for all
// 32,768 partitions cost up to 3.3 MB, 1.7 MB on average); a million jobs
// cost all 33.
TEST_F(Scripts, AQueueWithOneScheduledJobHasAFilterOfKilobytes) {
  const QueueKeys k("q");
  std::string far;  // an id in one of the last partitions
  for (int i = 0; far.empty(); ++i)
    if (schedule_partition("far-" + std::to_string(i)) >= 32'700) far = "far-" + std::to_string(i);
  enqueue({qjob(far, 9000)}, 1000);
  size_t bytes = 0, chunks = 0;
  for (const auto& chunk : filter_chunks(k.schedule_filter)) {
    bytes += chunk.size();
    chunks += !chunk.empty();
  }
  EXPECT_EQ(chunks, 1u);
  EXPECT_LE(bytes, 100'000u);
  EXPECT_GT(bytes, 0u);
  const std::string used = redis_->cli("MEMORY USAGE '" + schedule_filter_chunk_key(k.schedule_filter, schedule_partition(far) / kPartitionsPerFilterChunk) + "'");
  EXPECT_LE(std::stoll(used), 120'000) << used;
  EXPECT_EQ(enqueue({qjob(far)}, 1000), std::vector<int64_t>{0});  // still found: a duplicate
}

// An empty schedule costs nothing: when the last scheduled job leaves (by
// promotion or cancel), every chunk of the filter goes, and a job scheduled
// later gets a fresh chunk and is still found as a duplicate.
TEST_F(Scripts, AScheduleThatEmptiesKeepsNoFilterChunks) {
  const QueueKeys k("q");
  const auto chunk_count = [&] {
    size_t n = 0;
    for (const auto& chunk : filter_chunks(k.schedule_filter)) n += !chunk.empty();
    return n;
  };
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 200; ++i) jobs.push_back(qjob("s" + std::to_string(i), 3000));
  jobs.push_back(qjob("later", 9000));
  enqueue(jobs, 1000);
  ASSERT_GE(chunk_count(), 20u);  // 200 ids spread over the 33 chunks
  Round promote;
  promote.add(calls::promote("q", 5000, 5000));
  ASSERT_EQ(calls::parse_promote(run(promote))->moved, 200);
  EXPECT_GE(chunk_count(), 1u);  // "later" is still scheduled
  Round cancel;
  cancel.add(calls::cancel("q", 5000, "later", 60));
  ASSERT_EQ(calls::parse_cancel(run(cancel))->status, CancelStatus::cancelled);
  EXPECT_EQ(chunk_count(), 0u);
  EXPECT_EQ(enqueue({qjob("again", 9000)}, 5000), std::vector<int64_t>{1});
  EXPECT_EQ(chunk_count(), 1u);
  EXPECT_EQ(enqueue({qjob("again", 9000)}, 5000), std::vector<int64_t>{0});
}

TEST_F(Scripts, FilterCheckRefusesBadArgumentsAndWritesNothing) {
  const QueueKeys k("q");
  enqueue({qjob("a", 9000)}, 1000);
  const std::vector<std::string> before = filter_chunks(k.schedule_filter);
  std::vector<std::string> too_many = {"set"};
  for (int p = 0; p < 257; ++p) too_many.push_back(std::to_string(p));
  for (const auto& argv : std::vector<std::vector<std::string>>{
           {"fix", "1"}, {"set"}, {"set", "32768"}, {"set", "01"}, {"set", "1", "x"}, too_many}) {
    Command cmd{"EVAL", lua::script(lua::ScriptId::filter_check).source, "3", k.schedule,
                k.schedule_filter, k.epoch};
    for (const auto& a : argv) cmd.add(a);
    cmd.add("1");  // epoch (lua/lib/fence.lua)
    Round round;
    round.add(std::move(cmd));
    EXPECT_NE(std::string(reply_error(run(round))).find("bad-args"), std::string::npos) << argv[0] << " " << argv.size();
  }
  EXPECT_EQ(filter_chunks(k.schedule_filter), before);
}

// A partition the schedule index does not name (or names later than its
// earliest job) is never promoted: the audit says so, and repair puts the
// entry back, after which the job is promoted.
TEST_F(Scripts, TheAuditChecksTheScheduleIndexAgainstThePartitionsAndRepairFixesIt) {
  enqueue({job("missing", 5000), job("late", 5000)}, 1000);
  const std::string index = "'" + QueueKeys("q").schedule + "'";
  const std::string missing = std::to_string(schedule_partition("missing"));
  const std::string late = std::to_string(schedule_partition("late"));
  ASSERT_NE(missing, late);
  ASSERT_EQ(redis_->cli("ZREM " + index + " " + missing), "1");
  ASSERT_EQ(redis_->cli("ZADD " + index + " XX CH 99999 " + late), "1");
  Round stuck;
  stuck.add(calls::promote("q", 6000, 100));
  EXPECT_EQ(calls::parse_promote(run(stuck))->moved, 0) << "the broken index hides both jobs from promote";

  auto found = audit_queue(*store_, "q", /*repair=*/false);
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_FALSE(found->clean());
  std::set<std::string> reported;
  for (const auto& [what, why] : found->problems)
    if (why.find("schedule index") != std::string::npos) reported.insert(what);
  EXPECT_EQ(reported, (std::set<std::string>{"schedule partition " + missing, "schedule partition " + late}));

  auto repaired = audit_queue(*store_, "q", /*repair=*/true);
  ASSERT_TRUE(repaired) << repaired.error().message;
  EXPECT_EQ(std::count_if(repaired->repaired.begin(), repaired->repaired.end(),
                          [](const std::string& r) { return r.starts_with("schedule partition "); }),
            2);
  Round promote;
  promote.add(calls::promote("q", 6000, 100));
  EXPECT_EQ(calls::parse_promote(run(promote))->moved, 2);
  auto after = audit_queue(*store_, "q", /*repair=*/false);
  ASSERT_TRUE(after);
  EXPECT_TRUE(after->clean());
}

// The audit walks each queue's schedule in audit_schedule steps: every id a
// partition holds, in its sorted set or only in its hash, and every filter
// counter that disagrees with the sorted set.
TEST_F(Scripts, AuditScheduleListsEveryIdItsPartitionsHoldAndTheirWrongCounters) {
  enqueue({job("a", 9000), job("b", 9000)}, 1000);
  const QueueKeys k("q");
  const uint32_t p = schedule_partition("a");
  auto step = [&](uint32_t first, uint32_t count) {
    Round round;
    round.add(calls::audit_schedule("q", first, count));
    auto parsed = calls::parse_audit_schedule(run(round));
    EXPECT_TRUE(parsed) << (parsed ? "" : parsed.error().message);
    return parsed ? *parsed : ScheduleStep{};
  };
  auto clean = step(p, 1);
  EXPECT_NE(std::find(clean.ids.begin(), clean.ids.end(), "a"), clean.ids.end());
  EXPECT_TRUE(clean.wrong.empty());

  // A record whose schedule entry is gone, and a counter zeroed under a.
  redis_->cli("HSET '" + k.schedule_jobs_key(p) + "' ghost x");
  const int tail = ('a' * 961) % 100;  // lib/schedule_filter.lua's tail of a one-byte id
  redis_->cli(filter_bitfield(k.schedule_filter, p, tail, "SET 0"));
  auto dirty = step(p, 1);
  EXPECT_NE(std::find(dirty.ids.begin(), dirty.ids.end(), "ghost"), dirty.ids.end());
  ASSERT_EQ(dirty.wrong.size(), 1u);
  EXPECT_EQ(dirty.wrong[0].partition, p);
  EXPECT_EQ(dirty.wrong[0].tail, tail);
  EXPECT_EQ(dirty.wrong[0].counter, 0);
  EXPECT_EQ(dirty.wrong[0].ids, 1);

  // The whole schedule in steps of 256: each id once.
  std::vector<std::string> all;
  for (uint32_t first = 0; first < kSchedulePartitions; first += 256) {
    auto some = step(first, 256);
    all.insert(all.end(), some.ids.begin(), some.ids.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<std::string>{"a", "b", "ghost"}));
}

TEST_F(Scripts, AuditScheduleRefusesBadArguments) {
  const QueueKeys k("q");
  for (const auto& [first, count] : std::vector<std::pair<std::string, std::string>>{
           {"07", "1"}, {"-1", "1"}, {"32768", "1"}, {"0", "0"}, {"0", "513"}, {"32767", "2"}, {"0", "1.5"}, {"0", "x"}}) {
    Round round;
    round.add(script_call(lua::ScriptId::audit_schedule, {k.schedule, k.schedule_filter}).add(first).add(count));
    EXPECT_NE(std::string(reply_error(run(round))).find("bad-args"), std::string::npos) << first << " " << count;
  }
}

// A queue's jobs, tokens and leased keys hold every job in flight; as
// listpacks each command on them scans the whole key. The encoding pin
// makes them a hashtable and a skiplist for good and must never pass for a
// job: not in the backlog, the stats, the audit, the id walk, a reclaim's
// next deadline or a lease cap.
TEST_F(Scripts, EncodingPinsKeepTheHotKeysOutOfListpacksAndAreNeverTakenForJobs) {
  for (int64_t added : {3, 0}) {  // the second time they are there already
    Round pin;
    pin.add(calls::pin_encoding("q", kEncodingPinBytes));
    const redisReply* r = run(pin);
    ASSERT_EQ(r->type, REDIS_REPLY_INTEGER) << reply_error(r);
    EXPECT_EQ(r->integer, added);
  }
  EXPECT_EQ(redis_->cli("OBJECT ENCODING 'dueq:{q}:jobs'"), "hashtable");
  EXPECT_EQ(redis_->cli("OBJECT ENCODING 'dueq:{q}:tokens'"), "hashtable");
  EXPECT_EQ(redis_->cli("OBJECT ENCODING 'dueq:{q}:leased'"), "skiplist");

  // A backlog of 2 takes 2 jobs beside the pin.
  EXPECT_EQ(enqueue({qjob("a"), qjob("b"), qjob("c")}, 1000, 3, 2), (std::vector<int64_t>{1, 1, 2}));
  auto leased = lease(2, 5000);
  ASSERT_EQ(leased.size(), 2u);
  auto in_flight = [&] {
    Round stats;
    stats.add(calls::stats("q"));
    return calls::parse_stats("q", run(stats))->in_flight;
  };
  EXPECT_EQ(in_flight(), 2);
  Round cap;
  cap.add(calls::cap_leases("q", 4000, 100));
  EXPECT_EQ(ints(run(cap))->at(0), 2);  // the two leases, not the pin
  Round ack;
  ack.add(calls::ack("q", 2000, 60, {{leased[0].id, leased[0].token}}));
  EXPECT_EQ(*ints(run(ack)), std::vector<int64_t>{1});
  Round reclaim;
  reclaim.add(calls::reclaim("q", 4000, 100, 60));
  auto r = *calls::parse_reclaim(run(reclaim));
  EXPECT_EQ(r.requeued, 1);
  EXPECT_EQ(r.next_deadline_ms, -1);  // nothing leased: the pin's +inf is no deadline
  EXPECT_EQ(in_flight(), 0);

  std::string cursor = "0";
  size_t ids = 0;
  do {
    Round scan;
    scan.add(calls::scan_ids(QueueKeys("q").jobs, cursor, 1000));
    const redisReply* step = run(scan);
    cursor = reply::str(step->element[0]);
    auto step_ids = strs(step->element[1]);
    ASSERT_TRUE(step_ids);
    for (const auto& id : *step_ids) {
      EXPECT_FALSE(is_encoding_pin(id));
      ++ids;
    }
  } while (cursor != "0");
  EXPECT_EQ(ids, 1u);  // the requeued job
  auto audit = audit_queue(*store_, "q", /*repair=*/false);
  ASSERT_TRUE(audit) << audit.error().message;
  EXPECT_TRUE(audit->clean());
  EXPECT_EQ(audit->counts.leased, 0);
  // The keys outlive their jobs, in their encodings.
  EXPECT_EQ(redis_->cli("ZSCORE 'dueq:{q}:leased' '" + encoding_pin() + "'"), "inf");
  EXPECT_EQ(redis_->cli("OBJECT ENCODING 'dueq:{q}:tokens'"), "hashtable");
  EXPECT_EQ(redis_->cli("OBJECT ENCODING 'dueq:{q}:leased'"), "skiplist");
}

// The audit walks the state sets while jobs leave them. Here every slice's
// jobs leave as soon as it is visited (acked meanwhile): a walk by rank would
// then read every other slice only, skipping jobs that were there all along.
TEST_F(Scripts, StateSetWalkVisitsEveryJobThatIsThereWhenItStartsEvenAsOthersLeave) {
  Round pin;
  pin.add(calls::pin_encoding("q", kEncodingPinBytes));
  run(pin);
  const std::string leased = QueueKeys("q").leased;
  std::set<std::string> all;
  Command add{"ZADD", leased};
  for (int i = 0; i < 3'000; ++i) {
    all.insert(fmt::format("job{:05}", i));
    add.add(int64_t{1'000'000} + i).add(fmt::format("job{:05}", i));
  }
  ASSERT_TRUE(store_->call(std::move(add)));
  std::set<std::string> visited;
  size_t slices = 0;
  auto walked = walk_state_set(*store_, leased, 50, [&](const std::vector<std::string>& ids) -> Result<void> {
    ++slices;
    Command leave{"ZREM", leased};
    for (const auto& id : ids) {
      EXPECT_FALSE(is_encoding_pin(id));
      visited.insert(id);
      leave.add(id);
    }
    if (!ids.empty()) {
      EXPECT_TRUE(store_->call(std::move(leave)));
    }
    return {};
  });
  ASSERT_TRUE(walked) << walked.error().message;
  EXPECT_GT(slices, 10u);  // walked in slices, not in one reply
  EXPECT_EQ(visited, all);
  EXPECT_EQ(redis_->cli("ZCARD " + leased), "1");  // the pin
}

TEST_F(Scripts, PinEncodingRefusesAPinThatCouldBeAJobId) {
  for (const std::string& bad : {std::string("short pin"), std::string(200, 'x'), std::string(70'000, ' ')}) {
    Command call = script_call(lua::ScriptId::pin_encoding, {"dueq:{q}:jobs", "dueq:{q}:tokens", "dueq:{q}:leased"});
    call.add(bad);
    Round round;
    round.add(std::move(call));
    EXPECT_NE(reply_error(run(round)).find("bad-args"), std::string_view::npos) << bad.size();
  }
  EXPECT_EQ(redis_->cli("EXISTS 'dueq:{q}:jobs' 'dueq:{q}:tokens' 'dueq:{q}:leased'"), "0");
}

namespace {

std::vector<int64_t> lead_answer(ScriptRegistry& redis, const std::string& instance, uint64_t epoch) {
  auto r = redis.call(calls::lead(instance, 2'000, epoch, "tcp://" + instance + ":7600"));
  EXPECT_TRUE(r);
  if (!r) return {};
  const redisReply* reply = r->get();
  EXPECT_EQ(reply->type, REDIS_REPLY_ARRAY) << reply_error(reply);
  if (reply->type != REDIS_REPLY_ARRAY) return {};
  return {reply->element[0]->integer, reply->element[1]->integer};
}

}  // namespace

// One broker leads; another asking is told who; a lapsed lease goes back to
// its holder when nobody led since, else to the next asker with the next
// epoch, and its old holder is told another leads.
TEST_F(Scripts, LeadGivesTheLeaseToOneBrokerAndANewEpochToEachNextLeader) {
  EXPECT_EQ(lead_answer(*store_, "a", 0), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(lead_answer(*store_, "b", 0), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(redis_->cli("GET dueq:{leader}:holder"), "1 a tcp://a:7600");
  EXPECT_EQ(lead_answer(*store_, "a", 1), (std::vector<int64_t>{1, 1}));  // renewed
  ASSERT_EQ(redis_->cli("DEL dueq:{leader}:holder"), "1");                // the lease lapses
  EXPECT_EQ(lead_answer(*store_, "a", 1), (std::vector<int64_t>{1, 1}));  // taken back: nobody led since
  ASSERT_EQ(redis_->cli("DEL dueq:{leader}:holder"), "1");
  EXPECT_EQ(lead_answer(*store_, "b", 0), (std::vector<int64_t>{2, 2}));  // taken by another
  EXPECT_EQ(lead_answer(*store_, "a", 1), (std::vector<int64_t>{0, 2}));
  // Resigning takes only one's own lease.
  EXPECT_EQ(reply::num(store_->call(calls::resign("a", 1))->get()), 0);
  EXPECT_EQ(reply::num(store_->call(calls::resign("b", 2))->get()), 1);
  EXPECT_EQ(redis_->cli("EXISTS dueq:{leader}:holder"), "0");
  for (const auto& bad : std::vector<Command>{calls::lead("", 2'000, 0, ""), calls::lead("a b", 2'000, 0, ""),
                                              calls::lead("a", 99, 0, ""), calls::lead("a", 2'000, 0, "tcp://x y")}) {
    auto r = store_->call(bad);
    ASSERT_TRUE(r);
    EXPECT_NE(reply_error(r->get()).find("bad-args"), std::string_view::npos);
  }
  EXPECT_EQ(redis_->cli("EXISTS dueq:{leader}:holder"), "0");
}

// A deposed leader's call on a queue the new leader fenced writes nothing and
// fails the round; the new leader's calls go on.
TEST_F(Scripts, AWriteWithAnEpochOlderThanTheQueuesFailsAndWritesNothing) {
  enqueue({qjob("a", 0)}, 1000);
  EXPECT_EQ(redis_->cli("GET dueq:{q}:epoch"), "1");
  ScriptRegistry next_leader(*parse_redis_url(redis_->url()));
  next_leader.set_epoch(2);
  ASSERT_TRUE(next_leader.connect());
  auto raised = next_leader.call(calls::fence_queue("q", 2));
  ASSERT_TRUE(raised);
  EXPECT_EQ(reply::num(raised->get()), 1);

  std::vector<proto::NewJob> late = {qjob("b", 0)};
  std::vector<const proto::NewJob*> ptrs = {&late[0]};
  auto refused = store_->call(calls::enqueue("q", ptrs, 1000, 3, 0));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::fenced);
  EXPECT_TRUE(store_->fenced());
  EXPECT_EQ(redis_->cli("HEXISTS dueq:{q}:jobs b"), "0");
  EXPECT_EQ(redis_->cli("GET dueq:{q}:epoch"), "2");

  auto accepted = next_leader.call(calls::enqueue("q", ptrs, 1000, 3, 0));
  ASSERT_TRUE(accepted);
  EXPECT_EQ(reply_error(accepted->get()), "");
  EXPECT_EQ(redis_->cli("HEXISTS dueq:{q}:jobs b"), "1");
  // An older leader cannot lower the epoch back either.
  auto lowered = next_leader.call(calls::fence_queue("q", 1));
  EXPECT_FALSE(lowered);
  EXPECT_EQ(redis_->cli("GET dueq:{q}:epoch"), "2");
}

// A deposed leader's call that arrives late, after a newer leader read the
// queue list, creates no queue: outside a Cluster every fenced call also
// compares its epoch with the newest one given.
TEST_F(Scripts, ALateCallOfADeposedLeaderCreatesNoQueue) {
  ASSERT_EQ(redis_->cli("SET dueq:{leader}:epochs 2"), "OK");  // a newer leader took over
  std::vector<proto::NewJob> late = {qjob("b", 0)};
  late[0].queue = "created-late";
  std::vector<const proto::NewJob*> ptrs = {&late[0]};
  auto refused = store_->call(calls::enqueue("created-late", ptrs, 1000, 3, 0));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::fenced);
  EXPECT_EQ(redis_->cli("KEYS 'dueq:{created-late}:*'"), "") << "nothing of the queue was written";

  ScriptRegistry next_leader(*parse_redis_url(redis_->url()));
  next_leader.set_epoch(2);
  ASSERT_TRUE(next_leader.connect());
  auto accepted = next_leader.call(calls::enqueue("created-late", ptrs, 1000, 3, 0));
  ASSERT_TRUE(accepted);
  EXPECT_EQ(reply_error(accepted->get()), "");
  EXPECT_EQ(redis_->cli("HEXISTS dueq:{created-late}:jobs b"), "1");
}

// A new queue's name goes into the known queues by a fenced script: a
// late registration by a deposed leader adds nothing, and the script takes
// only the queue set and the leader's counter with the queue's name.
TEST_F(Scripts, ALateRegistrationOfADeposedLeaderAddsNoQueue) {
  ASSERT_EQ(redis_->cli("SET dueq:{leader}:epochs 2"), "OK");  // a newer leader took over
  auto refused = store_->call(calls::register_queue("registered-late"));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::fenced);
  EXPECT_EQ(redis_->cli("SISMEMBER dueq:{leader}:queues registered-late"), "0");

  ScriptRegistry next_leader(*parse_redis_url(redis_->url()));
  next_leader.set_epoch(2);
  ASSERT_TRUE(next_leader.connect());
  auto added = next_leader.call(calls::register_queue("registered-late"));
  ASSERT_TRUE(added);
  EXPECT_EQ((*added)->integer, 1);
  auto again = next_leader.call(calls::register_queue("registered-late"));
  ASSERT_TRUE(again);
  EXPECT_EQ((*again)->integer, 0);
  EXPECT_EQ(redis_->cli("SISMEMBER dueq:{leader}:queues registered-late"), "1");

  Command mismatched = script_call(lua::ScriptId::register_queue, {QueueKeys("one").jobs, kQueuesKey});
  mismatched.add("another");
  auto bad = next_leader.call(std::move(mismatched));
  ASSERT_TRUE(bad);
  EXPECT_NE(reply_error(bad->get()).find("bad-args"), std::string_view::npos);
  EXPECT_EQ(redis_->cli("SISMEMBER dueq:{leader}:queues another"), "0");
}

// Behind a Redis Cluster the fence reads no leader counter (it may be in
// another slot than a queue's keys); register_queue.lua, whose keys share
// the leader's slot, compares it itself. The call is built as the
// connection builds it behind a Cluster: the tag's epoch key and "<epoch>c".
TEST_F(Scripts, BehindAClusterALateRegistrationIsFencedByTheLeadersCounter) {
  ASSERT_EQ(redis_->cli("SET dueq:{leader}:epochs 2"), "OK");  // a newer leader took over
  auto as_in_cluster = [&](uint64_t epoch) {
    Command call = calls::register_queue("registered-late");
    call.append_fence({epoch_key_of(kQueuesKey)}, std::to_string(epoch) + "c");
    return call;
  };
  auto raw = RedisConnection::connect_to(*parse_redis_url(redis_->url()), 2000);  // scripts loaded by store_
  ASSERT_TRUE(raw);
  auto refused = raw->run(as_in_cluster(1));
  ASSERT_TRUE(refused);
  EXPECT_NE(reply_error(refused->get()).find("ERR dueq fenced"), std::string_view::npos) << reply_error(refused->get());
  EXPECT_EQ(redis_->cli("SISMEMBER dueq:{leader}:queues registered-late"), "0");
  auto added = raw->run(as_in_cluster(2));
  ASSERT_TRUE(added);
  EXPECT_EQ(reply_error(added->get()), "");
  EXPECT_EQ(redis_->cli("SISMEMBER dueq:{leader}:queues registered-late"), "1");
}

// Every script that writes a queue's keys checks the epoch. A script is
// fenced unless it is named here as one that only reads (or keeps the lease
// itself): a new script that forgets the fence fails this test.
TEST(Fence, EveryScriptButTheReadersAndTheLeaseKeepersIncludesTheFence) {
  const std::set<std::string> readers = {"audit", "audit_schedule", "scan_ids", "show", "stats"};
  const std::set<std::string> lease_keepers = {"lead", "resign", "fence_queue"};
  for (const auto& script : lua::kScripts) {
    const bool exempt = readers.contains(script.name) || lease_keepers.contains(script.name);
    EXPECT_EQ(script.fenced, !exempt) << script.name;
  }
}

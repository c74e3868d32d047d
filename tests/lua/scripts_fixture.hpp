#pragma once
// The fixture of the Lua script tests (tests/lua/*_test.cpp): a real
// redis-server per test, the broker's Redis client with epoch 1, and the
// typed calls and readers the tests share.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include <bit>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "broker/admin/auditor.hpp"
#include "broker/store/encoding_pin.hpp"
#include "broker/store/job_record.hpp"
#include "broker/store/keys.hpp"
#include "broker/admin/admin.hpp"
#include "broker/admin/admin_commands.hpp"
#include "broker/loop/cron_scheduler.hpp"
#include "broker/admin/cron_commands.hpp"
#include "broker/admin/job_lookup.hpp"
#include "broker/admin/job_search.hpp"
#include "broker/loop/dispatcher.hpp"
#include "broker/loop/enqueuer.hpp"
#include "broker/loop/leadership.hpp"
#include "broker/loop/lease_extensions.hpp"
#include "broker/loop/stats_requests.hpp"
#include "broker/store/redis_settings.hpp"
#include "broker/loop/results.hpp"
#include "broker/store/schedule_partition.hpp"
#include "broker/loop/scheduler.hpp"
#include "broker/store/redis_client.hpp"
#include "broker/admin/store_upgrade.hpp"
#include "common/clock.hpp"
#include "tests/support/redis_server.hpp"

namespace dueq::testing::scripts {

using namespace dueq::broker;
using dueq::proto::StartCheck;

// A job of queue "q".
inline proto::NewJob job(std::string id, int64_t due = 0, uint32_t max = 0) {
  return proto::NewJob{"q", std::move(id), "t", proto::Bytes{"payload-" + std::string("x")}, due, max};
}
inline proto::NewJob qjob(std::string id, int64_t due = 0, uint32_t max = 0) { return job(std::move(id), due, max); }

class Scripts : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = std::make_unique<dueq::testing::RedisServer>();
    store_ = std::make_unique<RedisClient>(*parse_redis_url(redis_->url()));
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

  // `jobs` in calls of at most 500.
  void enqueue_in_batches(const std::vector<proto::NewJob>& jobs, int64_t now) {
    for (size_t i = 0; i < jobs.size(); i += 500) {
      const auto end = jobs.begin() + static_cast<std::ptrdiff_t>(std::min(jobs.size(), i + 500));
      enqueue(std::vector<proto::NewJob>(jobs.begin() + static_cast<std::ptrdiff_t>(i), end), now);
    }
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

  // Every step of a search of one state of queue "q" (lua/search.lua) from
  // the start to its end: the ids found, and the steps and the jobs looked
  // at added to `steps` and `examined`.
  std::multiset<std::string> search_all(const char* state, const SearchFilter& f, size_t& steps, size_t& examined) {
    std::multiset<std::string> found;
    std::string cursor = "0";
    do {
      Round step;
      step.add(calls::search("q", state, f, cursor));
      auto parsed = calls::parse_search(run(step));
      EXPECT_TRUE(parsed.has_value());
      if (!parsed) break;
      // A step stops once it has looked at kSearchStep jobs (with a prefix,
      // which a job looked at costs two fifths of: 2.5 times as many): its
      // last partitions (8 of a few jobs each) may pass that by a little.
      EXPECT_LE(parsed->examined, (f.id_prefix.empty() ? kSearchStep : kSearchStep * 5 / 2) + 100);
      found.insert(parsed->ids.begin(), parsed->ids.end());
      examined += parsed->examined;
      cursor = parsed->cursor;
      ++steps;
    } while (cursor != "0");
    return found;
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
  std::unique_ptr<RedisClient> store_;
  std::vector<ReplyPtr> replies_;
};


// The keys of the schedule partition that holds `id` in queue "q", quoted for redis-cli.
inline std::string partition_of(const std::string& id) {
  return "'" + QueueKeys("q").schedule_partition_key(schedule_partition(id)) + "'";
}
inline std::string partition_jobs_of(const std::string& id) {
  return "'" + QueueKeys("q").schedule_jobs_key(schedule_partition(id)) + "'";
}

}  // namespace dueq::testing::scripts

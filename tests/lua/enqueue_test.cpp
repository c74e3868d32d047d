// enqueue.lua and promote.lua: duplicates, partitions, bad arguments, the
// backlog, and the leases an enqueue writes for jobs due now.
// Run against a real redis-server through the broker's typed calls
// (docs/protocol.md's state diagram, rule by rule).
#include "tests/lua/scripts_fixture.hpp"

using namespace dueq;
using namespace dueq::broker;
using namespace dueq::testing::scripts;
using dueq::proto::StartCheck;

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
  EXPECT_EQ(sent[0].args().size(), 3 + 15 + 3 + 4 * jobs.size() + 4)
      << "EVALSHA, sha, 15, 15 keys, 3, 4 per job, lease pair, no unique jobs, not fair";
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
    Command cmd{"EVAL", lua::script(lua::ScriptId::enqueue).source, "11", k.schedule, k.ready, k.leased, k.stats, k.jobs, k.done, k.cancelled, k.tokens, k.paused, k.key_limits, k.epoch};
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
    Command cmd{"EVAL", lua::script(lua::ScriptId::enqueue).source, "11", k.schedule, k.ready, k.leased, k.stats, k.jobs, k.done, k.cancelled, k.tokens, k.paused, k.key_limits, k.epoch};
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
    // ... 7 values per job, then the two lease arguments, the count of
    // unique jobs (none) and the fair flag.
    const size_t lease_args = args.size() - 4;
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
  EXPECT_EQ(*ints(run(ack)), (std::vector<int64_t>{1, 1, -1}));
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

// The audit scripts and the auditor: the books of every state set, lost and
// misplaced records, walks that see every job while others move.
// Run against a real redis-server through the broker's typed calls
// (docs/protocol.md's state diagram, rule by rule).
#include "tests/lua/scripts_fixture.hpp"

using namespace dueq;
using namespace dueq::broker;
using namespace dueq::testing::scripts;
using dueq::proto::StartCheck;

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

// The audit checks the type index: a partition holding a job of a
// registered type that the type's bitmap does not name (a search by the
// type would skip it) is reported, and repair sets its bit; a search by
// the type then finds the job again.
TEST_F(Scripts, TheAuditFindsAndRepairsAPartitionTheTypeIndexMisses) {
  std::vector<proto::NewJob> jobs;
  for (int i = 0; i < 200; ++i) {
    auto j = qjob("t" + std::to_string(i), 9000 + i);
    j.type = i % 50 == 0 ? "needle" : "hay";
    jobs.push_back(std::move(j));
  }
  enqueue(jobs, 1000);
  auto clean = audit_queue(*store_, "q", /*repair=*/false);
  ASSERT_TRUE(clean) << clean.error().message;
  EXPECT_TRUE(clean->clean()) << (clean->problems.empty() ? "" : clean->problems[0].second);
  const std::string partition = std::to_string(schedule_partition("t50"));
  redis_->cli("SETBIT 'dueq:{q}:schedule:type:needle' " + partition + " 0");
  SearchFilter needles;
  needles.type = "needle";
  size_t steps = 0, examined = 0;
  EXPECT_EQ(search_all("scheduled", needles, steps, examined).count("t50"), 0U) << "the search skips the partition";

  auto found = audit_queue(*store_, "q", /*repair=*/false);
  ASSERT_TRUE(found) << found.error().message;
  ASSERT_EQ(found->problems.size(), 1U);
  EXPECT_EQ(found->problems[0].first, "schedule partition " + partition);
  EXPECT_NE(found->problems[0].second.find("type 'needle'"), std::string::npos) << found->problems[0].second;
  EXPECT_EQ(redis_->cli("GETBIT 'dueq:{q}:schedule:type:needle' " + partition), "0") << "an audit without repair changes nothing";

  auto repaired = audit_queue(*store_, "q", /*repair=*/true);
  ASSERT_TRUE(repaired) << repaired.error().message;
  ASSERT_EQ(repaired->repaired.size(), 1U);
  EXPECT_EQ(repaired->repaired[0], "schedule partition " + partition + " type needle");
  EXPECT_EQ(search_all("scheduled", needles, steps, examined).count("t50"), 1U);
  auto after = audit_queue(*store_, "q", /*repair=*/false);
  ASSERT_TRUE(after) << after.error().message;
  EXPECT_TRUE(after->clean());
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
    RedisClient other(*parse_redis_url(redis_->url()));
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

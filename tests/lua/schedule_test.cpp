// The schedule's partitions, its filter and the encoding pins: every script
// that moves a scheduled job keeps the index and the filter exact.
// Run against a real redis-server through the broker's typed calls
// (docs/protocol.md's state diagram, rule by rule).
#include "tests/lua/scripts_fixture.hpp"

using namespace dueq;
using namespace dueq::broker;
using namespace dueq::testing::scripts;
using dueq::proto::StartCheck;

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
                   {"2000", "0", "0", "60", "1", "a", "1", "retry", "x", bad, "w", "0.5"})
                  .find("bad-args"),
              std::string::npos)
        << bad;
  }
  EXPECT_EQ(field("a", "s"), "scheduled");  // nothing changed
  EXPECT_EQ(redis_->cli("HGET 'dueq:{q}:stats' scheduled"), "1");
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
  cap.add(calls::align_leases("q", 4000, 100));
  EXPECT_EQ(ints(run(cap))->at(0), 2);  // the two leases, not the pin
  Round ack;
  ack.add(calls::ack("q", 2000, 60, {{leased[0].id, leased[0].token}}));
  EXPECT_EQ(*ints(run(ack)), (std::vector<int64_t>{1, -1}));
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

// The type index under a random mix of every script that puts jobs into
// the schedule or takes them out (enqueue, promote, lease then ack or a
// retry with backoff, cancel, reschedule both ways): after each step the
// `scheduled` counter is the jobs in the partitions, and while the index
// is complete every partition holding a job of an indexed type has that
// type's bit, so a search by type misses none (checked by searching).
TEST_F(Scripts, TheTypeIndexNamesEveryPartitionHoldingItsTypeThroughRandomOperations) {
  const QueueKeys k("q");
  std::mt19937_64 rng(20261129);
  const std::vector<std::string> types = {"noop", "sleep", "fail"};
  std::map<std::string, std::string> type_of;  // every id ever enqueued
  int64_t now = 1'000'000;
  auto draw_id = [&] { return fmt::format("p{}-{}.", rng() % 2, rng() % 600); };
  // Every job in a schedule partition (found by SCAN, not by the index).
  auto scheduled_jobs = [&] {
    std::map<std::string, uint32_t> out;  // id -> partition
    std::vector<uint32_t> partitions;
    std::vector<Command> reads;
    std::string cursor = "0";
    do {
      auto r = store_->call(Command{"SCAN", cursor, "MATCH", k.schedule + ":*", "COUNT", "5000"});
      EXPECT_TRUE(r);
      if (!r) break;
      cursor = reply::str((*r)->element[0]);
      for (size_t i = 0; i < (*r)->element[1]->elements; ++i) {
        const std::string key = reply::str((*r)->element[1]->element[i]);
        const std::string tail = key.substr(k.schedule.size() + 1);
        if (tail.empty() || !std::all_of(tail.begin(), tail.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
        partitions.push_back(static_cast<uint32_t>(std::stoul(tail)));
        reads.push_back(Command{"ZRANGE", key, "0", "-1"});
      }
    } while (cursor != "0");
    auto replies = store_->pipeline(std::move(reads));
    EXPECT_TRUE(replies);
    for (size_t i = 0; replies && i < replies->size(); ++i) {
      const auto ids = strs((*replies)[i].get());
      for (const auto& id : *ids)
        if (!is_encoding_pin(id)) out[id] = partitions[i];
    }
    return out;
  };
  size_t indexed_steps = 0, emptied = 0;  // the test covers both: checked at the end
  for (int step = 0; step < 1500; ++step) {
    const uint64_t op = rng() % 10;
    now += static_cast<int64_t>(rng() % 400);
    if (op < 3) {
      std::vector<proto::NewJob> jobs;
      for (uint64_t i = 0, n = 1 + rng() % 20; i < n; ++i) {
        auto j = job(draw_id(), rng() % 4 == 0 ? 0 : now + static_cast<int64_t>(rng() % 20'000), 3);
        j.type = type_of.emplace(j.id, types[rng() % types.size()]).first->second;
        jobs.push_back(std::move(j));
      }
      enqueue(jobs, now);
    } else if (op < 5) {
      Round promote;
      promote.add(calls::promote("q", now, static_cast<int>(1 + rng() % 50)));
      run(promote);
    } else if (op < 7) {
      auto leased = lease(static_cast<int>(1 + rng() % 10), now + 30'000);
      std::vector<AckItem> acks;
      std::vector<NackItem> retries;
      for (const auto& l : leased) {
        if (rng() % 2 == 0) acks.push_back({l.id, l.token});
        else retries.push_back({l.id, l.token, NackMode::retry, "again", 1.0});
      }
      Round finish;
      if (!acks.empty()) finish.add(calls::ack("q", now, 60, acks));
      if (!retries.empty()) finish.add(calls::nack("q", now, 1'000, 10'000, 60, retries));
      if (finish.calls() > 0) run(finish);
    } else if (op < 8) {
      Round cancel;
      cancel.add(calls::cancel("q", now, draw_id(), 60));
      run(cancel);
    } else {
      std::vector<std::string> ids;
      for (uint64_t i = 0, n = 1 + rng() % 5; i < n; ++i) ids.push_back(draw_id());
      Round moved;
      moved.add(calls::reschedule("q", now, rng() % 3 == 0 ? now - 1 : now + static_cast<int64_t>(rng() % 20'000), ids));
      run(moved);
    }
    const auto scheduled = scheduled_jobs();
    auto text = [&](Command c) {
      auto r = store_->call(std::move(c));
      if (!r || (*r)->type == REDIS_REPLY_NIL) return std::string();
      return (*r)->type == REDIS_REPLY_INTEGER ? std::to_string((*r)->integer) : reply::str(r->get());
    };
    const std::string counted = text(Command{"HGET", k.stats, "scheduled"});
    ASSERT_EQ(counted.empty() ? 0 : std::stoll(counted), static_cast<int64_t>(scheduled.size())) << "step " << step;
    if (scheduled.empty()) ++emptied;
    if (text(Command{"EXISTS", k.schedule + ":typed"}) != "1") continue;
    ++indexed_steps;
    const auto members = store_->call(Command{"SMEMBERS", k.schedule + ":types"});
    ASSERT_TRUE(members);
    const auto registered = strs(members->get());
    std::vector<std::string> checked;
    std::vector<Command> bits;
    for (const auto& [id, partition] : scheduled) {
      const std::string& t = type_of.at(id);
      if (std::find(registered->begin(), registered->end(), t) == registered->end()) continue;
      checked.push_back(fmt::format("{} of type {} in partition {}", id, t, partition));
      bits.push_back(Command{"GETBIT", k.schedule + ":type:" + t, std::to_string(partition)});
    }
    auto got = store_->pipeline(std::move(bits));
    ASSERT_TRUE(got);
    for (size_t i = 0; i < got->size(); ++i) ASSERT_EQ((*got)[i]->integer, 1) << "step " << step << ": " << checked[i];
    if (step % 50 == 0 && !scheduled.empty()) {
      const auto& [id, partition] = *std::next(scheduled.begin(), static_cast<std::ptrdiff_t>(rng() % scheduled.size()));
      SearchFilter f;
      f.type = type_of.at(id);
      f.id_prefix = id;
      size_t steps = 0, examined = 0;
      EXPECT_EQ(search_all("scheduled", f, steps, examined).count(id), 1U) << "step " << step << ": " << id;
    }
  }
  EXPECT_GT(indexed_steps, 500U);
  EXPECT_GT(emptied, 0U) << "the schedule emptied (and the index went) at least once";
}

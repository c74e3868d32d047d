// The client's request bookkeeping without a broker: resends, expiry, merged
// enqueue frames and how their replies are split.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "clients/cpp/enqueue_merge.hpp"
#include "clients/cpp/request_tracker.hpp"

namespace dueq::client {
namespace {

ClientError timed_out() { return ClientError{"timeout", "test", 0}; }

TEST(RequestTracker, AnUnansweredRequestIsSentAgainAtItsDeadlineAndFailsAfterItsLastAttempt) {
  RequestTracker tracker(100, 3);
  std::vector<FrameResult> answers;
  tracker.track(7, "request-7", [&](FrameResult r) { answers.push_back(std::move(r)); }, 1000);
  int sends = 0;
  auto send = [&](std::string_view bytes) {
    EXPECT_EQ(bytes, "request-7");
    ++sends;
    return true;
  };
  tracker.send_unsent(send);
  EXPECT_EQ(sends, 1);
  EXPECT_FALSE(tracker.has_unsent());
  EXPECT_EQ(tracker.ms_until_next_deadline(1040), 60);

  EXPECT_EQ(tracker.expire(1099, timed_out), 0U);  // not yet
  tracker.send_unsent(send);
  EXPECT_EQ(sends, 1);
  EXPECT_EQ(tracker.expire(1100, timed_out), 1U);  // attempt 2
  EXPECT_TRUE(tracker.has_unsent());
  tracker.send_unsent(send);
  tracker.expire(1200, timed_out);  // attempt 3
  tracker.send_unsent(send);
  EXPECT_EQ(sends, 3);
  EXPECT_TRUE(answers.empty());
  // Attempts spent: it timed out all the same (the connection leaves a
  // broker that let a request time out, its last attempt too).
  EXPECT_EQ(tracker.expire(1300, timed_out), 1U);
  ASSERT_EQ(answers.size(), 1u);
  ASSERT_FALSE(answers[0].has_value());
  EXPECT_EQ(answers[0].error().code, "timeout");
  EXPECT_EQ(tracker.ms_until_next_deadline(1300), -1);
}

TEST(RequestTracker, ARequestTheSocketRefusesWaitsUnsentAndAReplyAnswersItOnce) {
  RequestTracker tracker(100, 3);
  int answered = 0;
  tracker.track(1, "one", [&](FrameResult r) { answered += r.has_value() ? 1 : 100; }, 0);
  tracker.send_unsent([](std::string_view) { return false; });
  EXPECT_TRUE(tracker.has_unsent());
  EXPECT_TRUE(tracker.answer(proto::Frame{proto::StatsReply{1, {}, 0}}));
  EXPECT_FALSE(tracker.has_unsent());
  EXPECT_FALSE(tracker.answer(proto::Frame{proto::StatsReply{1, {}, 0}}));  // a late second reply
  EXPECT_FALSE(tracker.answer(proto::Frame{proto::StatsReply{2, {}, 0}}));  // a request never made
  EXPECT_EQ(answered, 1);
}

TEST(RequestTracker, AnErrorFrameFailsTheRequestItNamesWithTheBrokersCodeAndRetryAfter) {
  RequestTracker tracker(100, 3);
  std::vector<FrameResult> answers;
  tracker.track(5, "five", [&](FrameResult r) { answers.push_back(std::move(r)); }, 0);
  tracker.track(6, "six", [&](FrameResult r) { answers.push_back(std::move(r)); }, 0);
  proto::ErrorFrame error;
  error.request_id = 5;
  error.code = "overloaded";
  error.message = "busy";
  error.retry_after_ms = 250;
  EXPECT_TRUE(tracker.answer(proto::Frame{error}));
  ASSERT_EQ(answers.size(), 1u);
  ASSERT_FALSE(answers[0].has_value());
  EXPECT_EQ(answers[0].error().code, "overloaded");
  EXPECT_EQ(answers[0].error().retry_after_ms, 250u);
  tracker.fail_all(ClientError{"unavailable", "closing", 0});
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[1].error().code, "unavailable");
  EXPECT_FALSE(tracker.has_unsent());
}

proto::Enqueue jobs_of(size_t count, size_t payload_bytes, const std::string& prefix) {
  proto::Enqueue request;
  for (size_t i = 0; i < count; ++i)
    request.jobs.push_back(proto::NewJob{"q", prefix + std::to_string(i), "t",
                                         proto::Bytes{std::string(payload_bytes, 'x')}, 0, 0, 0, 0});
  return request;
}

TEST(EnqueueMerge, RequestsTakenTogetherShareOneFrameAndEachHearsItsOwnJobsOutcomes) {
  std::vector<std::vector<std::string>> heard(3);
  std::vector<QueuedEnqueue> queued;
  for (uint64_t r = 0; r < 3; ++r)
    queued.push_back({r + 1, jobs_of(r + 1, 10, "r" + std::to_string(r) + "-"), [&heard, r](FrameResult reply) {
                        ASSERT_TRUE(reply.has_value());
                        const auto& own = std::get<proto::EnqueueReply>(*reply);
                        EXPECT_EQ(own.request_id, r + 1);
                        for (const auto& result : own.results) heard[r].push_back(result.id);
                      }});
  uint64_t next_id = 100;
  auto frames = merge_enqueues(std::move(queued), [&] { return ++next_id; });
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].request_id, 101u);
  auto decoded = proto::decode(frames[0].bytes, proto::kMaxReplyValues);
  ASSERT_TRUE(decoded.has_value());
  const auto& merged = std::get<proto::Enqueue>(*decoded);
  ASSERT_EQ(merged.jobs.size(), 6u);

  proto::EnqueueReply reply{101, {}, 0};
  for (const auto& job : merged.jobs) reply.results.push_back({job.id, proto::EnqueueStatus::accepted, ""});
  frames[0].done(proto::Frame{reply});
  EXPECT_EQ(heard[0], (std::vector<std::string>{"r0-0"}));
  EXPECT_EQ(heard[1], (std::vector<std::string>{"r1-0", "r1-1"}));
  EXPECT_EQ(heard[2], (std::vector<std::string>{"r2-0", "r2-1", "r2-2"}));
}

TEST(EnqueueMerge, ALoneRequestKeepsItsOwnIdAndRequestsPastTheBatchLimitGoInAnotherFrame) {
  std::vector<QueuedEnqueue> queued;
  queued.push_back({1, jobs_of(proto::kMaxBatch - 1, 1, "a"), [](FrameResult) {}});
  queued.push_back({2, jobs_of(2, 1, "b"), [](FrameResult) {}});
  auto frames = merge_enqueues(std::move(queued), [] { return uint64_t{99}; });
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].request_id, 1u);
  EXPECT_EQ(frames[1].request_id, 2u);
}

TEST(EnqueueMerge, AReplyOfTheWrongShapeFailsEveryMergedRequest) {
  int failures = 0;
  std::vector<QueuedEnqueue> queued;
  for (uint64_t r = 1; r <= 2; ++r)
    queued.push_back({r, jobs_of(1, 1, "j" + std::to_string(r)), [&](FrameResult reply) {
                        EXPECT_EQ(reply ? std::string("a reply") : reply.error().code, "bad_frame");
                        ++failures;
                      }});
  auto frames = merge_enqueues(std::move(queued), [] { return uint64_t{50}; });
  ASSERT_EQ(frames.size(), 1u);
  frames[0].done(proto::Frame{proto::EnqueueReply{50, {{"j10", proto::EnqueueStatus::accepted, ""}}, 0}});  // one outcome for two jobs
  EXPECT_EQ(failures, 2);
}

}  // namespace
}  // namespace dueq::client

#include "clients/cpp/enqueue_merge.hpp"

#include <iterator>
#include <memory>
#include <utility>

namespace dueq::client {

namespace {

// One enqueue request inside a merged frame: its own id, its jobs' count.
struct MergedPart {
  uint64_t request_id;
  size_t jobs;
  Completion done;
};

// Hands each request of a merged frame its own share of the reply (its
// jobs' outcomes, in order) or the error that answered the frame.
Completion answer_parts(std::shared_ptr<std::vector<MergedPart>> parts, size_t jobs) {
  return [parts = std::move(parts), jobs](FrameResult frame) {
    auto* reply = frame ? std::get_if<proto::EnqueueReply>(&*frame) : nullptr;
    if (frame && (reply == nullptr || reply->results.size() != jobs))
      frame = std::unexpected(ClientError{"bad_frame", "unexpected reply to enqueue", 0});
    size_t at = 0;
    for (auto& part : *parts) {
      if (!frame) {
        part.done(std::unexpected(frame.error()));
        continue;
      }
      proto::EnqueueReply own{part.request_id, {}, reply->retry_after_ms};
      const auto first = reply->results.begin() + static_cast<std::ptrdiff_t>(at);
      own.results.assign(std::make_move_iterator(first),
                         std::make_move_iterator(first + static_cast<std::ptrdiff_t>(part.jobs)));
      at += part.jobs;
      part.done(proto::Frame{std::move(own)});
    }
  };
}

MergedFrame merge(std::vector<QueuedEnqueue>& group, size_t jobs, const std::function<uint64_t()>& new_request_id) {
  if (group.size() == 1) return {group[0].request_id, proto::encode(group[0].request), std::move(group[0].done)};
  proto::Enqueue merged;
  merged.request_id = new_request_id();
  merged.jobs.reserve(jobs);
  auto parts = std::make_shared<std::vector<MergedPart>>();
  parts->reserve(group.size());
  for (auto& queued : group) {
    parts->push_back({queued.request_id, queued.request.jobs.size(), std::move(queued.done)});
    std::move(queued.request.jobs.begin(), queued.request.jobs.end(), std::back_inserter(merged.jobs));
  }
  return {merged.request_id, proto::encode(merged), answer_parts(std::move(parts), jobs)};
}

}  // namespace

std::vector<MergedFrame> merge_enqueues(std::vector<QueuedEnqueue> enqueues,
                                        const std::function<uint64_t()>& new_request_id) {
  std::vector<MergedFrame> frames;
  std::vector<QueuedEnqueue> group;
  size_t group_jobs = 0, group_bytes = 0;
  auto close_group = [&] {
    if (group.empty()) return;
    frames.push_back(merge(group, group_jobs, new_request_id));
    group.clear();
    group_jobs = group_bytes = 0;
  };
  for (auto& queued : enqueues) {
    size_t bytes = 0;
    for (const auto& job : queued.request.jobs) bytes += job.payload.data.size();
    if (group_jobs + queued.request.jobs.size() > proto::kMaxBatch || group_bytes + bytes > proto::kMaxPayloadBytes)
      close_group();
    group_jobs += queued.request.jobs.size();
    group_bytes += bytes;
    group.push_back(std::move(queued));
  }
  close_group();
  return frames;
}

}  // namespace dueq::client

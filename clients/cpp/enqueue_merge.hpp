#pragma once
// Enqueue requests taken from the queue at one moment share frames: many
// threads (or futures) enqueueing one job each cost the broker one message
// per batch, not per job, and wait no longer for it. Each frame stays
// within the broker's batch and payload limits; its reply is split back
// into one reply per request.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "clients/cpp/request_tracker.hpp"

namespace dueq::client {

struct QueuedEnqueue {
  uint64_t request_id;
  proto::Enqueue request;
  Completion done;
};

// One frame to send: its own request id, its bytes, and who hears the reply.
struct MergedFrame {
  uint64_t request_id;
  std::string bytes;
  Completion done;
};

// Merges `enqueues` in order into as few frames as the limits allow; a
// frame of several requests gets a request id from `new_request_id`.
std::vector<MergedFrame> merge_enqueues(std::vector<QueuedEnqueue> enqueues,
                                        const std::function<uint64_t()>& new_request_id);

}  // namespace dueq::client

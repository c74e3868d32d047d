#pragma once
// The dueq wire protocol: msgpack frames [version, type, body] where body is a
// msgpack array of the frame's fields in declaration order. docs/protocol.md
// is the normative description; this header is its implementation.
// It is split by who speaks: common/worker_frames.hpp and
// common/client_frames.hpp, on common/protocol_fields.hpp; this header adds
// the ERROR frame either may get, and decodes and encodes any frame.
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include <msgpack.hpp>

#include "common/client_frames.hpp"
#include "common/error.hpp"
#include "common/worker_frames.hpp"

namespace dueq::proto {

struct ErrorFrame {
  static constexpr Type kType = Type::error;
  uint64_t request_id = 0;
  std::string code;
  std::string message;
  uint32_t retry_after_ms = 0;
  DUEQ_FIELDS(request_id, code, message, retry_after_ms)
};

using Frame = std::variant<Hello, Welcome, Tasks, Received, Heartbeat, Pong, Results, Confirm, Cancel, Bye, Enqueue, EnqueueReply,
                           StatsRequest, StatsReply, JobRequest, JobReply, AdminRequest, AdminReply, ErrorFrame, Starting,
                           StartReply, HandBack, WaitRequest, WaitReply, Progress, GroupEnqueue, GroupEnqueueReply>;

// The most values (array elements and map keys and values, nested ones
// included) a frame may hold. A full ENQUEUE of 10,000 jobs holds about
// 90,000, or 100,000 when every job has a key; replies to clients get more: a STATS_REPLY of max_queues' most,
// 100,000 queues, holds about 2.2 million (unit-tested).
inline constexpr size_t kMaxFrameValues = 110'000;
inline constexpr size_t kMaxReplyValues = 4'000'000;

// The checks decode() makes of a frame's fields, for a sender to make
// before it sends one.
Result<void> validate(const Frame& frame);

// Decodes and validates one frame. Never throws; every problem is an Error
// with code bad_frame and a message naming what was wrong. Work is bounded by
// the frame size and `max_values`, checked before anything is allocated.
Result<Frame> decode(std::string_view bytes, size_t max_values = kMaxFrameValues);

template <typename T>
std::string encode(const T& body) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> packer(buffer);
  packer.pack_array(3);
  packer.pack(kVersion);
  packer.pack(static_cast<uint8_t>(T::kType));
  packer.pack(body);
  return std::string(buffer.data(), buffer.size());
}

const char* type_name(Type type);

inline Type type_of(const Frame& frame) {
  return std::visit([](const auto& f) { return std::decay_t<decltype(f)>::kType; }, frame);
}

// The request id of a frame decode() refused, when its first bytes still
// read as a request ([version, type, [request_id, ...]] with a request
// type): the broker's ERROR then names it, and the client fails that request
// alone. 0 when they do not. Reads a few dozen bytes at most.
uint64_t peek_request_id(std::string_view bytes);

// The request id a reply to `frame` carries (0 for frames that are not requests).
inline uint64_t request_id_of(const Frame& frame) {
  return std::visit(
      [](const auto& f) -> uint64_t {
        if constexpr (requires { f.request_id; }) return f.request_id;
        else return 0;
      },
      frame);
}

}  // namespace dueq::proto

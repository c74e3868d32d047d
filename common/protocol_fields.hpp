#pragma once
// What every dueq frame is made of (docs/protocol.md): the version, the
// limits, the frame types, how a struct's fields become a msgpack array
// (DUEQ_FIELDS), and the bytes and job references the frames share.
#include <cstdint>
#include <stdexcept>
#include <string>

#include <msgpack.hpp>

namespace dueq::proto {

inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kMaxFrameBytes = 16u << 20;
inline constexpr size_t kMaxBatch = 10'000;
inline constexpr size_t kMaxPayloadBytes = 1u << 20;
inline constexpr size_t kMaxErrorText = 4096;
// A job's key (NewJob::key): any bytes, at most this many.
inline constexpr size_t kMaxKeyBytes = 128;
// A worker lists every job it holds in each heartbeat, so what it may hold is
// bounded by the batch limit.
inline constexpr uint32_t kMaxWorkerCapacity = kMaxBatch;

enum class Type : uint8_t {
  hello = 1,
  welcome = 2,
  // 3 was a single-task frame in pre-release drafts; it is not reused.
  heartbeat = 4,
  pong = 5,
  results = 6,
  confirm = 7,
  bye = 8,
  cancel = 9,
  enqueue = 10,
  enqueue_reply = 11,
  stats_request = 12,
  stats_reply = 13,
  job_request = 14,
  job_reply = 15,
  admin_request = 16,
  admin_reply = 17,
  tasks = 18,
  received = 19,
  error = 20,
  starting = 21,
  start_reply = 22,
  hand_back = 23,
  wait = 24,
  wait_reply = 25,
  progress = 26,
  group_enqueue = 27,
  group_enqueue_reply = 28,
};

namespace detail {
// A body or nested item with fewer fields than its struct: msgpack-cxx would
// leave the missing ones at their defaults (a RESULTS item without its outcome
// read as "done"); the protocol says such a frame MUST be rejected.
struct MissingFields : std::runtime_error {
  MissingFields(size_t have, size_t need)
      : std::runtime_error("an array of " + std::to_string(have) + " fields where " + std::to_string(need) + " are needed") {}
};
template <typename... Fields>
constexpr size_t count_fields(const Fields&...) { return sizeof...(Fields); }
inline void require_fields(const msgpack::object& o, size_t need) {
  if (o.type == msgpack::type::ARRAY && o.via.array.size < need) throw MissingFields(o.via.array.size, need);
}
}  // namespace detail

// MSGPACK_DEFINE_ARRAY that refuses arrays shorter than `min_fields` (newer
// peers MAY append fields, so longer ones are read; fields appended in a
// later release are left at their defaults when an older peer sends fewer).
#define DUEQ_FIELDS_SINCE(min_fields, ...)                                                 \
  template <typename Packer>                                                              \
  void msgpack_pack(Packer& msgpack_pk) const {                                           \
    msgpack::type::make_define_array(__VA_ARGS__).msgpack_pack(msgpack_pk);               \
  }                                                                                       \
  void msgpack_unpack(const msgpack::object& msgpack_o) {                                 \
    ::dueq::proto::detail::require_fields(msgpack_o, min_fields);                         \
    msgpack::type::make_define_array(__VA_ARGS__).msgpack_unpack(msgpack_o);              \
  }

// The same, but the last field, `key` (a Bytes), is left out when it is
// empty: a job without a key is sent byte for byte as before keys, and a
// peer that predates them reads it as it always did.
#define DUEQ_FIELDS_KEY_LAST(min_fields, ...)                                              \
  template <typename Packer>                                                              \
  void msgpack_pack(Packer& msgpack_pk) const {                                           \
    if (key.data.empty()) {                                                               \
      msgpack::type::make_define_array(__VA_ARGS__).msgpack_pack(msgpack_pk);             \
    } else {                                                                              \
      msgpack::type::make_define_array(__VA_ARGS__, key).msgpack_pack(msgpack_pk);        \
    }                                                                                     \
  }                                                                                       \
  void msgpack_unpack(const msgpack::object& msgpack_o) {                                 \
    ::dueq::proto::detail::require_fields(msgpack_o, min_fields);                         \
    msgpack::type::make_define_array(__VA_ARGS__, key).msgpack_unpack(msgpack_o);         \
  }

// Every field is required.
#define DUEQ_FIELDS(...) DUEQ_FIELDS_SINCE(::dueq::proto::detail::count_fields(__VA_ARGS__), __VA_ARGS__)

// Opaque job payload bytes; encoded as msgpack bin (str is accepted too).
struct Bytes {
  std::string data;
  bool operator==(const Bytes&) const = default;
};

struct JobRef {
  std::string queue;
  std::string id;
  uint64_t token = 0;
  bool operator==(const JobRef&) const = default;
  DUEQ_FIELDS(queue, id, token)
};

}  // namespace dueq::proto

namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
  namespace adaptor {

  template <>
  struct convert<dueq::proto::Bytes> {
    const msgpack::object& operator()(const msgpack::object& o, dueq::proto::Bytes& v) const {
      if (o.type == msgpack::type::BIN) v.data.assign(o.via.bin.ptr, o.via.bin.size);
      else if (o.type == msgpack::type::STR) v.data.assign(o.via.str.ptr, o.via.str.size);
      else throw msgpack::type_error();
      return o;
    }
  };

  template <>
  struct pack<dueq::proto::Bytes> {
    template <typename Stream>
    packer<Stream>& operator()(msgpack::packer<Stream>& o, const dueq::proto::Bytes& v) const {
      o.pack_bin(static_cast<uint32_t>(v.data.size()));
      o.pack_bin_body(v.data.data(), static_cast<uint32_t>(v.data.size()));
      return o;
    }
  };

  }  // namespace adaptor
}
}  // namespace msgpack

// Fuzz target: what a Redis Cluster node answers, as the broker reads it
// (broker/store/cluster_slots.hpp): the bytes go through hiredis's reply reader,
// and every reply it makes is read as a CLUSTER SLOTS answer and, when it is
// an error or a string, as a MOVED / ASK redirection. Any bytes give a slot
// map or an error, never a crash; whatever is accepted is in range. The
// bytes are also hashed to a slot, which must be below 16384.
#include <hiredis/hiredis.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "broker/store/cluster_slots.hpp"

namespace {

struct ReaderDeleter {
  void operator()(redisReader* reader) const { redisReaderFree(reader); }
};
struct ReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};

void check(const redisReply* reply) {
  using namespace dueq::broker;
  if (auto ranges = parse_cluster_slots(reply, dueq::HostPort{"10.0.0.1", 7000})) {
    for (const auto& range : *ranges)
      if (range.first > range.last || range.last >= kClusterSlots || range.master.port < 1 ||
          range.master.port > 65535 || range.master.host.empty())
        std::abort();
  } else if (ranges.error().message.empty()) {
    std::abort();
  }
  if (reply->type == REDIS_REPLY_ERROR || reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_STATUS) {
    if (auto redirect = parse_redirect(std::string_view(reply->str, reply->len)))
      if (redirect->slot >= kClusterSlots || redirect->to.port < 1 || redirect->to.port > 65535 || redirect->to.host.empty())
        std::abort();
  }
}

// hiredis 0.14 allocates an array as soon as its header announces it: an
// input announcing millions of elements only measures hiredis's calloc, so
// such inputs are left out (Redis, not a network peer, writes these bytes).
bool announces_a_huge_array(std::string_view bytes) {
  for (size_t at = bytes.find('*'); at != std::string_view::npos; at = bytes.find('*', at + 1)) {
    size_t digits = 0;
    while (at + 1 + digits < bytes.size() && bytes[at + 1 + digits] >= '0' && bytes[at + 1 + digits] <= '9') ++digits;
    if (digits > 4) return true;  // 10,000 or more
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (dueq::broker::key_slot(bytes) >= dueq::broker::kClusterSlots) std::abort();
  if (announces_a_huge_array(bytes)) return 0;
  std::unique_ptr<redisReader, ReaderDeleter> reader(redisReaderCreate());
  if (redisReaderFeed(reader.get(), bytes.data(), bytes.size()) != REDIS_OK) return 0;
  for (int replies = 0; replies < 64; ++replies) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader.get(), &raw) != REDIS_OK || raw == nullptr) break;
    std::unique_ptr<redisReply, ReplyDeleter> reply(static_cast<redisReply*>(raw));
    check(reply.get());
  }
  return 0;
}

// Fuzz target: the wire frame decoder (common/protocol.hpp). Whatever bytes a
// peer sends, decode() returns a frame or an error and never crashes, leaks
// or overflows; a frame it accepts encodes to bytes it accepts again as the
// same frame (what the broker relays is what it understood).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>

#include "common/protocol.hpp"

namespace {

std::string encode_frame(const dueq::proto::Frame& frame) {
  return std::visit([](const auto& body) { return dueq::proto::encode(body); }, frame);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto frame = dueq::proto::decode(bytes);
  if (!frame) {
    if (frame.error().message.empty()) std::abort();  // every refusal says why
    (void)dueq::proto::peek_request_id(bytes);      // the broker reads a refused frame's request id
    return 0;
  }
  // A frame that decodes has the request id the peek reads, if any.
  const uint64_t peeked = dueq::proto::peek_request_id(bytes);
  if (peeked != 0 && peeked != dueq::proto::request_id_of(*frame)) std::abort();
  const std::string encoded = encode_frame(*frame);
  auto again = dueq::proto::decode(encoded);
  if (!again || again->index() != frame->index() || encode_frame(*again) != encoded) std::abort();
  return 0;
}

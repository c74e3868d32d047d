// Fuzz target: HttpFront's reading of a request's size from any bytes a
// client sends (broker/http/http_front.hpp). Never a crash or an exception; a
// request taken whole has its head within the limit and its body within
// the body limit; a refusal names a client error.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "broker/http/http_front.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using dueq::broker::HttpFront;
  constexpr size_t kMaxBody = size_t{64} * 1024;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const auto need = dueq::broker::http_request_size(in, kMaxBody);
  if (need.status != 0) {
    if (need.bytes != 0 || need.reason.empty()) std::abort();
    if (need.status != 400 && need.status != 411 && need.status != 413 && need.status != 431) std::abort();
    return 0;
  }
  if (need.bytes == 0) {
    if (in.size() > HttpFront::kMaxHeadBytes) std::abort();  // a head that long is refused, not waited for
    return 0;
  }
  const size_t head = in.find("\r\n\r\n") + 4;
  if (head > HttpFront::kMaxHeadBytes || need.bytes < head || need.bytes - head > kMaxBody) std::abort();
  return 0;
}

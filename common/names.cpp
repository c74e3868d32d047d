#include "common/names.hpp"

#include <algorithm>
#include <charconv>
#include <string>

namespace dueq {

namespace {

bool printable_no_space(std::string_view s) {
  for (unsigned char c : s)
    if (c <= 0x20 || c >= 0x7f) return false;
  return true;
}

}  // namespace

Result<void> validate_queue_name(std::string_view name) {
  if (name.empty() || name.size() > 64)
    return fail(Errc::bad_argument, "queue name must be 1..64 characters");
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    if (!ok) return fail(Errc::bad_argument, "queue name '" + std::string(name) + "' may only use A-Z a-z 0-9 _ - .");
  }
  return {};
}

Result<QueueWeight> parse_queue_weight(std::string_view text) {
  const size_t colon = text.rfind(':');
  QueueWeight out{std::string(text.substr(0, colon)), 1};
  if (auto ok = validate_queue_name(out.name); !ok) return std::unexpected(ok.error());
  if (colon == std::string_view::npos) return out;
  const std::string_view weight = text.substr(colon + 1);
  const auto [end, ec] = std::from_chars(weight.data(), weight.data() + weight.size(), out.weight);
  if (weight.empty() || ec != std::errc() || end != weight.data() + weight.size() || out.weight == 0 || out.weight > 1000)
    return fail(Errc::bad_argument, "queue weight in '" + std::string(text) + "' must be 1..1000 (NAME:WEIGHT)");
  return out;
}

Result<void> validate_job_id(std::string_view id) {
  if (id.empty() || id.size() > 128 || !printable_no_space(id))
    return fail(Errc::bad_argument, "job id must be 1..128 printable characters without spaces");
  return {};
}

Result<void> validate_job_type(std::string_view type) {
  if (type.empty() || type.size() > 128 || !printable_no_space(type))
    return fail(Errc::bad_argument, "job type must be 1..128 printable characters without spaces");
  return {};
}

namespace {

bool lower_hex(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool all_zero(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c == '0'; });
}

}  // namespace

Result<void> validate_trace_context(std::string_view traceparent, std::string_view tracestate) {
  if (traceparent.empty()) {
    if (!tracestate.empty()) return fail(Errc::bad_argument, "tracestate needs a traceparent");
    return {};
  }
  const bool shaped = traceparent.size() == kTraceparentChars && traceparent[2] == '-' && traceparent[35] == '-' &&
                      traceparent[52] == '-';
  if (!shaped || !lower_hex(traceparent.substr(0, 2)) || !lower_hex(traceparent.substr(3, 32)) ||
      !lower_hex(traceparent.substr(36, 16)) || !lower_hex(traceparent.substr(53, 2)))
    return fail(Errc::bad_argument, "traceparent must be VERSION-TRACEID-PARENTID-FLAGS in lower-case hex (2-32-16-2 digits)");
  if (traceparent.substr(0, 2) == "ff") return fail(Errc::bad_argument, "traceparent version ff is invalid");
  if (all_zero(traceparent.substr(3, 32)) || all_zero(traceparent.substr(36, 16)))
    return fail(Errc::bad_argument, "traceparent trace id and parent id must not be all zero");
  if (tracestate.size() > kMaxTracestateBytes || !std::all_of(tracestate.begin(), tracestate.end(), [](char c) {
        return c >= 0x20 && c <= 0x7e;
      }))
    return fail(Errc::bad_argument, "tracestate must be at most 512 printable ASCII characters");
  return {};
}

}  // namespace dueq

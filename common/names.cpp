#include "common/names.hpp"

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

}  // namespace dueq

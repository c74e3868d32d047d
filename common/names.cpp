#include "common/names.hpp"

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

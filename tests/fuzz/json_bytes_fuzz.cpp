// Fuzz target: bytes in JSON views (common/json_bytes.hpp) and the stored
// form of a cron entry. Any bytes, rendered as a view renders them, parse
// back to the same bytes; a cron entry with any payload is stored as JSON
// and read back unchanged. Never a crash, never an exception.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "broker/config/cron_entry.hpp"
#include "common/json_bytes.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const std::map<std::string, std::string> row{{"p", bytes}, {"e", bytes}};
  const std::string text = dueq::dump_json({{"rows", {dueq::bytes_json(row)}}, {"summary", dueq::bytes_json(bytes)}});
  const auto parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) std::abort();
  if (dueq::bytes_from_json(parsed["summary"]) != bytes || dueq::bytes_from_json(parsed["rows"][0]["p"]) != bytes) std::abort();
  if (dueq::is_utf8(bytes) != parsed["summary"].is_string()) std::abort();
  if (dueq::base64_decode(dueq::base64_encode(bytes)) != bytes) std::abort();
  (void)dueq::base64_decode(bytes);  // any text: bytes or nullopt

  auto entry = dueq::broker::make_cron_entry("f", {"* * * * * *", "UTC", "q", "t", bytes, "skip", 0});
  if (!entry) return 0;
  auto again = dueq::broker::CronEntry::from_json("f", entry->to_json());
  if (!again || again->payload != bytes || again->fingerprint() != entry->fingerprint()) std::abort();
  return 0;
}

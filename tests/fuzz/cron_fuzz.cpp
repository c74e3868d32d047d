// Fuzz target: the cron expression parser and its tick search
// (common/cron.hpp). The input is an expression, then optionally a newline
// and a time zone name. Any input gives a schedule or an error, never a
// crash; of an accepted schedule, 20 ticks from a time the input picks are
// each after the last, on whole seconds, and the same when asked from one
// second before (no tick is skipped or made twice).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/cron.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view zone = "UTC";
  if (const size_t newline = input.find('\n'); newline != std::string_view::npos) {
    zone = input.substr(newline + 1);
    input = input.substr(0, newline);
  }
  auto schedule = dueq::CronSchedule::parse(input, zone);
  if (!schedule) {
    if (schedule.error().message.empty()) std::abort();
    return 0;
  }
  // 2000-01-01 plus up to about 60 years, from the input's bytes.
  int64_t at = 946'684'800'000;
  for (size_t i = 0; i < size; ++i) at += static_cast<int64_t>(data[i]) * 7'919'993;
  for (int i = 0; i < 20; ++i) {
    const auto next = schedule->next_after(at);
    if (!next) break;
    if (*next <= at || *next % 1000 != 0) std::abort();
    if (schedule->next_after(*next - 1000) != next && *next - 1000 >= at) std::abort();
    at = *next;
  }
  return 0;
}

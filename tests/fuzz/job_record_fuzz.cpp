// Fuzz target: the stored job record decoder (broker/store/job_record.hpp). A record
// in Redis may be damaged or written by another version: reading it gives a
// record or an error ("unreadable record"), never a crash, and a record it
// accepts survives being written and read again unchanged.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "broker/store/job_record.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto record = dueq::broker::decode_job_record(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!record) return 0;
  auto again = dueq::broker::decode_job_record(dueq::broker::encode_job_record(*record));
  if (!again || *again != *record) std::abort();
  return 0;
}

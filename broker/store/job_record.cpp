#include "broker/store/job_record.hpp"

#include <fmt/format.h>

#include <msgpack.hpp>
#include <xxhash.h>

#include "common/protocol.hpp"

namespace dueq::broker {

namespace {

std::unexpected<Error> bad(std::string what) { return fail(Errc::internal, "job record: " + std::move(what)); }

}  // namespace

std::string record_version(std::string_view bytes) {
  return fmt::format("{:016x}", XXH3_64bits(bytes.data(), bytes.size()));
}

std::string encode_job_record(const JobRecord& r) {
  msgpack::sbuffer buffer(64 + r.type.size() + r.payload.size());
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  const bool traced = !r.traceparent.empty();
  const bool start_by = r.start_by_ms > 0 || traced;
  const bool keyed = !r.key.empty() || start_by;
  const int version = traced ? kTracedJobRecordVersion
                      : start_by ? kStartByJobRecordVersion
                      : keyed    ? kKeyedJobRecordVersion
                                 : kJobRecordVersion;
  pk.pack_array(static_cast<uint32_t>(7 + version + (traced ? 1 : 0)));
  pk.pack(version);
  pk.pack(r.type);
  if (keyed) {
    pk.pack_str(static_cast<uint32_t>(r.key.size()));
    pk.pack_str_body(r.key.data(), static_cast<uint32_t>(r.key.size()));
  }
  pk.pack_str(static_cast<uint32_t>(r.payload.size()));
  pk.pack_str_body(r.payload.data(), static_cast<uint32_t>(r.payload.size()));
  pk.pack(r.due_ms);
  pk.pack(r.max_attempts);
  pk.pack(r.created_ms);
  pk.pack(r.backoff_base_ms);
  pk.pack(r.backoff_cap_ms);
  pk.pack(r.payload_checksum);
  if (start_by) pk.pack(r.start_by_ms);
  if (traced) {
    pk.pack(r.traceparent);
    pk.pack(r.tracestate);
  }
  return std::string(buffer.data(), buffer.size());
}

Result<JobRecord> decode_job_record(std::string_view bytes) {
  static const msgpack::unpack_limit limits(/*array=*/13, /*map=*/0, /*str=*/proto::kMaxPayloadBytes,
                                            /*bin=*/0, /*ext=*/0, /*depth=*/2);
  try {
    std::size_t offset = 0;
    msgpack::object_handle handle =
        msgpack::unpack(bytes.data(), bytes.size(), offset, nullptr, nullptr, limits);
    if (offset != bytes.size()) return bad("trailing bytes");
    const msgpack::object& o = handle.get();
    if (o.type != msgpack::type::ARRAY || o.via.array.size < 8) return bad("not an array of 8 to 13");
    const msgpack::object* f = o.via.array.ptr;
    const int version = f[0].as<int>();
    if (version < 1 || version > kTracedJobRecordVersion) return bad(fmt::format("unknown version {}", version));
    const bool traced = version == kTracedJobRecordVersion;
    if (o.via.array.size != static_cast<uint32_t>(7 + version + (traced ? 1 : 0)))
      return bad(fmt::format("version {} with {} fields", version, o.via.array.size));
    JobRecord r;
    if (f[1].type != msgpack::type::STR) return bad("type must be str");
    r.type.assign(f[1].via.str.ptr, f[1].via.str.size);
    if (version == kStartByJobRecordVersion) {
      if (f[10].as<int64_t>() <= 0) return bad("start_by_ms must be positive");
      r.start_by_ms = f[10].as<int64_t>();
    }
    if (traced) {
      if (f[10].as<int64_t>() < 0) return bad("start_by_ms must not be negative");
      if (f[11].type != msgpack::type::STR || f[11].via.str.size == 0 || f[12].type != msgpack::type::STR)
        return bad("traceparent and tracestate must be str, the traceparent not empty");
      r.start_by_ms = f[10].as<int64_t>();
      r.traceparent.assign(f[11].via.str.ptr, f[11].via.str.size);
      r.tracestate.assign(f[12].via.str.ptr, f[12].via.str.size);
    }
    if (version >= kKeyedJobRecordVersion) {
      if (f[2].type != msgpack::type::STR || (version == kKeyedJobRecordVersion && f[2].via.str.size == 0))
        return bad("key must be a str, not empty");
      r.key.assign(f[2].via.str.ptr, f[2].via.str.size);
      ++f;  // the rest as in version 2
    }
    if (f[2].type != msgpack::type::STR) return bad("payload must be str");
    r.payload.assign(f[2].via.str.ptr, f[2].via.str.size);
    r.due_ms = f[3].as<int64_t>();
    r.max_attempts = f[4].as<uint32_t>();
    r.created_ms = f[5].as<int64_t>();
    r.backoff_base_ms = f[6].as<int64_t>();
    r.backoff_cap_ms = f[7].as<int64_t>();
    r.payload_checksum = version == 1 ? proto::payload_checksum(r.payload) : f[8].as<uint64_t>();
    return r;
  } catch (const std::exception& e) {
    return bad(e.what());
  }
}

}  // namespace dueq::broker

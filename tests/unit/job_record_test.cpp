#include <gtest/gtest.h>

#include <tuple>

#include <msgpack.hpp>

#include "broker/store/job_record.hpp"
#include "broker/store/round.hpp"
#include "common/protocol.hpp"

namespace dueq::broker {
namespace {

// The scripts compare tokens as text: 16 lowercase hex digits, zero-padded.
TEST(FencingToken, IsSixteenLowercaseHexDigitsAndReadsBack) {
  EXPECT_EQ(token_text(1), "0000000000000001");
  EXPECT_EQ(token_text(0xdeadbeef0badf00dULL), "deadbeef0badf00d");
  EXPECT_EQ(token_text(~0ULL), "ffffffffffffffff");
  for (uint64_t t : {1ULL, 0x10ULL, 0x8000000000000000ULL, 0x0123456789abcdefULL})
    EXPECT_EQ(token_from_text(token_text(t)), t);
  EXPECT_EQ(token_from_text("0000000000000000"), std::nullopt) << "zero is never a token";
  EXPECT_EQ(token_from_text("DEADBEEF0BADF00D1"), std::nullopt);
}

TEST(JobRecord, RoundTripsWithItsPayloadChecksum) {
  const JobRecord r{"email", "payload bytes", 5000, 3, 1000, 200, 9000, proto::payload_checksum("payload bytes")};
  auto back = decode_job_record(encode_job_record(r));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, r);
}

// Records stored before the checksum (version 1, 8 fields) stay readable;
// they carry the checksum of the payload as read.
TEST(JobRecord, AVersionOneRecordIsReadWithTheChecksumOfItsPayload) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(8);
  pk.pack(1).pack(std::string("email")).pack(std::string("old payload"));
  pk.pack(int64_t{5000}).pack(uint32_t{3}).pack(int64_t{1000}).pack(int64_t{0}).pack(int64_t{0});
  auto back = decode_job_record(std::string_view(buffer.data(), buffer.size()));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->payload, "old payload");
  EXPECT_EQ(back->payload_checksum, proto::payload_checksum("old payload"));
}

TEST(JobRecord, ARecordWithTheWrongFieldCountForItsVersionIsUnreadable) {
  for (const auto& [version, fields] : std::vector<std::pair<int, int>>{{2, 8}, {1, 9}, {3, 9}, {2, 10}, {4, 10}, {3, 11}, {5, 12}}) {
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> pk(buffer);
    pk.pack_array(fields);
    pk.pack(version).pack(std::string("t")).pack(std::string("p"));
    for (int i = 3; i < fields; ++i) pk.pack(int64_t{1});
    EXPECT_FALSE(decode_job_record(std::string_view(buffer.data(), buffer.size())))
        << "version " << version << " with " << fields << " fields";
  }
}

// A start-by deadline makes a version 4 record (its key kept, empty or
// not); records without one are written as before, byte for byte.
TEST(JobRecord, AStartByDeadlineIsKeptInAVersionFourRecord) {
  JobRecord r{"email", "p", 5000, 3, 1000, 0, 0, proto::payload_checksum("p")};
  const std::string plain = encode_job_record(r);
  EXPECT_EQ(static_cast<unsigned char>(plain[0]), 0x99) << "version 2 without a deadline";
  r.start_by_ms = 9000;
  for (const char* key : {"", "acct-1"}) {
    r.key = key;
    const std::string bytes = encode_job_record(r);
    EXPECT_EQ(static_cast<unsigned char>(bytes[0]), 0x9b);
    EXPECT_EQ(bytes[1], 4);
    auto back = decode_job_record(bytes);
    ASSERT_TRUE(back) << back.error().message;
    EXPECT_EQ(*back, r) << key;
  }
  r.start_by_ms = 0;
  r.key = "acct-1";
  EXPECT_EQ(static_cast<unsigned char>(encode_job_record(r)[0]), 0x9a) << "version 3 with a key alone";
}

// A trace context makes a version 5 record, with or without a key and a
// deadline; a damaged one is refused.
TEST(JobRecord, ATraceContextIsKeptInAVersionFiveRecord) {
  JobRecord r{"email", "p", 5000, 3, 1000, 0, 0, proto::payload_checksum("p")};
  r.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  for (const auto& [key, start_by, state] : {std::tuple{"", int64_t{0}, ""}, std::tuple{"acct-1", int64_t{9000}, "k=v"}}) {
    r.key = key;
    r.start_by_ms = start_by;
    r.tracestate = state;
    const std::string bytes = encode_job_record(r);
    EXPECT_EQ(static_cast<unsigned char>(bytes[0]), 0x9d);
    EXPECT_EQ(bytes[1], 5);
    auto back = decode_job_record(bytes);
    ASSERT_TRUE(back) << back.error().message;
    EXPECT_EQ(*back, r) << key;
  }
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(13);
  pk.pack(5);
  for (const char* text : {"t", "", "p"}) pk.pack(std::string(text));
  for (int i = 0; i < 7; ++i) pk.pack(int64_t{1});
  pk.pack(std::string());  // an empty traceparent: never written
  pk.pack(std::string());
  EXPECT_FALSE(decode_job_record(std::string_view(buffer.data(), buffer.size())));
}

}  // namespace
}  // namespace dueq::broker

#include <gtest/gtest.h>

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
  for (const auto& [version, fields] : std::vector<std::pair<int, int>>{{2, 8}, {1, 9}, {3, 9}, {2, 10}}) {
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> pk(buffer);
    pk.pack_array(fields);
    pk.pack(version).pack(std::string("t")).pack(std::string("p"));
    for (int i = 3; i < fields; ++i) pk.pack(int64_t{1});
    EXPECT_FALSE(decode_job_record(std::string_view(buffer.data(), buffer.size())))
        << "version " << version << " with " << fields << " fields";
  }
}

}  // namespace
}  // namespace dueq::broker

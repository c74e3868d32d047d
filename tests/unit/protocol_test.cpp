// Rules of the wire codec (docs/protocol.md): every frame round-trips, carries
// the version, and anything malformed is an error value, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "common/protocol.hpp"

using namespace dueq;
using namespace dueq::proto;

namespace {

template <typename T>
T round_trip(const T& frame) {
  auto decoded = decode(encode(frame));
  EXPECT_TRUE(decoded.has_value()) << (decoded ? "" : decoded.error().message);
  if (!decoded) return T{};
  EXPECT_TRUE(std::holds_alternative<T>(*decoded));
  return std::get<T>(*decoded);
}

std::string pack_raw(auto&&... values) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> p(buffer);
  p.pack_array(sizeof...(values));
  (p.pack(values), ...);
  return std::string(buffer.data(), buffer.size());
}

Task sample_task() {
  return Task{"emails", "job-1", "send", Bytes{std::string("\x00\x01\xffpayload", 10)}, 1700000000123, 2, 5, 77, 1700000000000};
}

Tasks sample_tasks() { return Tasks{{sample_task()}, 9}; }

}  // namespace

TEST(Protocol, TasksRoundTripWithBinaryPayload) {
  Tasks batch = sample_tasks();
  batch.items.push_back(sample_task());
  batch.items.back().id = "job-2";
  const Tasks decoded = round_trip(batch);
  ASSERT_EQ(decoded.items.size(), 2u);
  EXPECT_EQ(decoded.items[1].id, "job-2");
  const Task& in = batch.items[0];
  const Task& out = decoded.items[0];
  EXPECT_EQ(out.queue, in.queue);
  EXPECT_EQ(out.id, in.id);
  EXPECT_EQ(out.payload, in.payload);
  EXPECT_EQ(out.due_ms, in.due_ms);
  EXPECT_EQ(out.attempt, 2u);
  EXPECT_EQ(out.token, 77u);
  EXPECT_EQ(decoded.seq, 9u);
}

// The broker marks a delivery whose earlier delivery ended unstarted; the
// worker must read the mark, not default it, and refuse one it cannot know.
TEST(Protocol, ATaskCarriesItsStartCheckAndRefusesAnUnknownOne) {
  Tasks batch = sample_tasks();
  EXPECT_EQ(round_trip(batch).items.at(0).start_check, proto::StartCheck::none);
  batch.items[0].start_check = proto::StartCheck::announce_alone;
  EXPECT_EQ(round_trip(batch).items.at(0).start_check, proto::StartCheck::announce_alone);
  batch.items[0].start_check = static_cast<proto::StartCheck>(3);  // none such: refused
  auto bad = decode(encode(batch));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("start_check"), std::string::npos) << bad.error().message;
}

// A request the broker refuses as a whole is answered under its own id when
// the frame's first bytes still say it, so the client fails it alone.
TEST(Protocol, TheRequestIdOfARefusedFrameIsReadFromItsFirstBytes) {
  const std::string bad_id = encode(JobRequest{77, "a b", ""});
  ASSERT_FALSE(decode(bad_id));
  EXPECT_EQ(peek_request_id(bad_id), 77u);
  const std::string big_id = encode(StatsRequest{1ull << 40});
  EXPECT_EQ(peek_request_id(big_id), 1ull << 40);
  Enqueue many;
  many.request_id = 300;
  for (int i = 0; i < 20; ++i) many.jobs.push_back(NewJob{"bad queue", "j" + std::to_string(i), "t", {}, 0, 0, 0, 0});
  EXPECT_EQ(peek_request_id(encode(many)), 300u);  // uint16 id
  for (size_t cut = 0; cut < 5; ++cut) EXPECT_EQ(peek_request_id(bad_id.substr(0, cut)), 0u) << cut;
  EXPECT_EQ(peek_request_id(encode(Pong{"b"})), 0u);  // not a request
  EXPECT_EQ(peek_request_id(""), 0u);
}

// STARTING names at least one job; both lists are checked like any refs.
TEST(Protocol, StartingAndStartReplyRefuseBadReferences) {
  EXPECT_FALSE(decode(encode(Starting{})));
  EXPECT_FALSE(decode(encode(Starting{{{"a", "j", 0}}})));
  EXPECT_FALSE(decode(encode(StartReply{{}, {{"bad queue", "j", 1}}})));
  EXPECT_TRUE(decode(encode(StartReply{})));
}

TEST(Protocol, PayloadIsEncodedAsMsgpackBin) {
  const std::string bytes = encode(sample_tasks());
  auto handle = msgpack::unpack(bytes.data(), bytes.size());
  const auto& task = handle.get().via.array.ptr[2].via.array.ptr[0].via.array.ptr[0];
  EXPECT_EQ(task.via.array.ptr[3].type, msgpack::type::BIN);
}

TEST(Protocol, EveryFrameCarriesTheVersion) {
  const std::string bytes = encode(Pong{"b"});
  auto handle = msgpack::unpack(bytes.data(), bytes.size());
  ASSERT_EQ(handle.get().type, msgpack::type::ARRAY);
  EXPECT_EQ(handle.get().via.array.ptr[0].as<uint32_t>(), kVersion);
  EXPECT_EQ(handle.get().via.array.ptr[1].as<uint32_t>(), static_cast<uint32_t>(Type::pong));
}

TEST(Protocol, AllFrameTypesRoundTrip) {
  round_trip(Hello{"w1", {"a", "b"}, 8, {{"a", "j", 3}}, "host", 42});
  round_trip(Welcome{"b1", 500});
  round_trip(Heartbeat{{{"a", "j", 1}}, 4, true});
  round_trip(Pong{"b1"});
  round_trip(Received{12});
  round_trip(Results{{{"a", "j", 1, Outcome::done, ""}, {"a", "k", 2, Outcome::failed, "boom"}}});
  round_trip(Confirm{{{"a", "j", 1}}});
  round_trip(Bye{{{"a", "j", 1}}});
  EXPECT_EQ(round_trip(Starting{{{"a", "j", 5}}}).items.at(0).token, 5u);
  const StartReply reply = round_trip(StartReply{{{"a", "j", 5}}, {{"a", "k", 6}}});
  EXPECT_EQ(reply.go.at(0).id, "j");
  EXPECT_EQ(reply.drop.at(0).id, "k");
  round_trip(Enqueue{7, {{"a", "j", "t", Bytes{"p"}, 0, 3}}});
  round_trip(EnqueueReply{7, {{"j", EnqueueStatus::accepted, ""}}, 0});
  round_trip(StatsRequest{9});
  round_trip(StatsReply{9, {QueueStats{"a", 1, 2, 3, 4, 5, 6, 7, 8, 9}}, 2});
  round_trip(JobRequest{3, "j", ""});
  round_trip(JobReply{3, true, {{"s", "done"}}});
  round_trip(ErrorFrame{3, "bad_frame", "nope", 0});
}

TEST(Protocol, RejectsEmptyAndGarbage) {
  EXPECT_FALSE(decode(""));
  EXPECT_FALSE(decode("\xc1"));  // msgpack "never used" byte
  EXPECT_FALSE(decode("hello world"));
}

TEST(Protocol, RejectsUnknownVersion) {
  auto r = decode(pack_raw(2u, static_cast<uint8_t>(Type::pong), std::vector<std::string>{"b"}));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("version"), std::string::npos);
}

TEST(Protocol, RejectsUnknownType) {
  auto r = decode(pack_raw(kVersion, 99u, std::vector<int>{}));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("unknown frame type"), std::string::npos);
}

TEST(Protocol, RejectsTruncatedFrames) {
  const std::string bytes = encode(sample_tasks());
  for (size_t cut = 0; cut < bytes.size(); ++cut) EXPECT_FALSE(decode(bytes.substr(0, cut))) << "cut at " << cut;
}

TEST(Protocol, RejectsTrailingBytes) { EXPECT_FALSE(decode(encode(Pong{"b"}) + "x")); }

TEST(Protocol, RejectsWrongFieldTypes) {
  // A task whose id is an integer.
  auto r = decode(pack_raw(kVersion, static_cast<uint8_t>(Type::tasks),
                           std::make_tuple(std::make_tuple(std::make_tuple("q", 5, "t", "p", 0, 1, 1, 1, 0)), 1)));
  EXPECT_FALSE(r);
}

TEST(Protocol, RejectsMissingFields) {
  auto r = decode(pack_raw(kVersion, static_cast<uint8_t>(Type::tasks), std::make_tuple()));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("tasks frame: an array of 0 fields where 2 are needed"), std::string::npos);
  // A task cut short lacks its token, and a zero token is never valid.
  EXPECT_FALSE(decode(pack_raw(kVersion, static_cast<uint8_t>(Type::tasks),
                               std::make_tuple(std::make_tuple(std::make_tuple("q", "id", "t")), 1))));
}

TEST(Protocol, NestedItemsWithTooFewFieldsAreRejected) {
  // A RESULTS item without its outcome would otherwise read as "done".
  auto r = decode(pack_raw(kVersion, static_cast<uint8_t>(Type::results),
                           std::make_tuple(std::make_tuple(std::make_tuple("q", "id", 7)))));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("results frame: an array of 3 fields where 5 are needed"), std::string::npos)
      << r.error().message;
  // An ENQUEUE job without its payload would otherwise be accepted empty.
  r = decode(pack_raw(kVersion, static_cast<uint8_t>(Type::enqueue),
                      std::make_tuple(1, std::make_tuple(std::make_tuple("q", "id", "t")))));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("enqueue frame"), std::string::npos) << r.error().message;
  // A held job reference without its token.
  r = decode(pack_raw(kVersion, static_cast<uint8_t>(Type::heartbeat),
                      std::make_tuple(std::make_tuple(std::make_tuple("q", "id")), 1, false)));
  EXPECT_FALSE(r);
  // The same frames with every field decode.
  EXPECT_TRUE(decode(pack_raw(kVersion, static_cast<uint8_t>(Type::results),
                              std::make_tuple(std::make_tuple(std::make_tuple("q", "id", 7, 0, ""))))));
}

TEST(Protocol, AnOversizedPayloadDecodesSoThatOnlyItsJobIsRejected) {
  Enqueue batch{1, {NewJob{"q", "a", "t", Bytes{"small"}, 0, 0}, NewJob{"q", "b", "t", Bytes{}, 0, 0}}};
  batch.jobs[1].payload.data.assign(kMaxPayloadBytes + 1, 'x');
  auto r = decode(encode(batch));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(std::get<Enqueue>(*r).jobs[1].payload.data.size(), kMaxPayloadBytes + 1);
}

TEST(Protocol, TasksFrameIsRejectedWholeWhenEmptyOrWhenOneTaskIsInvalid) {
  EXPECT_FALSE(decode(encode(Tasks{})));
  Tasks unnumbered = sample_tasks();
  unnumbered.seq = 0;
  EXPECT_FALSE(decode(encode(unnumbered)));
  EXPECT_FALSE(decode(encode(Received{0})));
  Tasks batch = sample_tasks();
  batch.items.push_back(sample_task());
  batch.items.back().token = 0;
  auto r = decode(encode(batch));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("token 0"), std::string::npos);
  Tasks too_many;
  too_many.items.resize(kMaxBatch + 1, sample_task());
  EXPECT_FALSE(decode(encode(too_many)));
}

TEST(Protocol, AcceptsExtraTrailingFieldsFromNewerPeers) {
  auto r = decode(pack_raw(kVersion, static_cast<uint8_t>(Type::pong), std::make_tuple("b", "future-field")));
  EXPECT_TRUE(r);
}

// WELCOME tells a worker its timeouts; one of a broker before 0.3 (two
// fields) still reads, with them 0.
TEST(Protocol, WelcomeCarriesTheTimeoutsAndAnOlderOneStillReads) {
  auto now = decode(encode(Welcome{"b", 500, 1500, 2000}));
  ASSERT_TRUE(now);
  EXPECT_EQ(std::get<Welcome>(*now).worker_timeout_ms, 1500u);
  EXPECT_EQ(std::get<Welcome>(*now).delivery_timeout_ms, 2000u);
  auto older = decode(pack_raw(kVersion, static_cast<uint8_t>(Type::welcome), std::make_tuple("b", 500)));
  ASSERT_TRUE(older) << older.error().message;
  EXPECT_EQ(std::get<Welcome>(*older).heartbeat_ms, 500u);
  EXPECT_EQ(std::get<Welcome>(*older).delivery_timeout_ms, 0u);
}

// HELLO's weights are one per queue, 1..1000, or none; a HELLO of a worker
// before 0.3 (six fields) still reads, with no weights and not strict.
TEST(Protocol, HelloWeightsAreOnePerQueueOrNoneAndOlderHellosRead) {
  auto ok = decode(encode(Hello{"w", {"a", "b"}, 4, {}, "h", 1, {6, 1}, true}));
  ASSERT_TRUE(ok);
  const auto& hello = std::get<Hello>(*ok);
  EXPECT_EQ(hello.weights, (std::vector<uint32_t>{6, 1}));
  EXPECT_TRUE(hello.strict);
  EXPECT_FALSE(decode(encode(Hello{"w", {"a", "b"}, 4, {}, "h", 1, {6}, false})));
  EXPECT_FALSE(decode(encode(Hello{"w", {"a"}, 4, {}, "h", 1, {0}, false})));
  EXPECT_FALSE(decode(encode(Hello{"w", {"a"}, 4, {}, "h", 1, {1001}, false})));
  auto older = decode(pack_raw(kVersion, static_cast<uint8_t>(Type::hello),
                               std::make_tuple("w", std::vector<std::string>{"a"}, 4, std::vector<int>{}, "h", 1)));
  ASSERT_TRUE(older) << older.error().message;
  EXPECT_TRUE(std::get<Hello>(*older).weights.empty());
}

TEST(Protocol, RejectsInvalidNamesAndZeroTokens) {
  EXPECT_FALSE(decode(encode(Heartbeat{{{"bad queue", "j", 1}}, 1, false})));
  EXPECT_FALSE(decode(encode(Heartbeat{{{"q", "", 1}}, 1, false})));
  EXPECT_FALSE(decode(encode(Heartbeat{{{"q", "j", 0}}, 1, false})));
  EXPECT_FALSE(decode(encode(Hello{"w", {}, 1, {}, "", 0})));
  EXPECT_FALSE(decode(encode(Results{{{"q", "j", 1, static_cast<Outcome>(9), ""}}})));  // no such outcome
}

TEST(Protocol, RejectsOversizedFramesAndBatches) {
  EXPECT_FALSE(decode(std::string(kMaxFrameBytes + 1, '\x90')));
  Enqueue big{1, {}};
  big.jobs.resize(kMaxBatch + 1, NewJob{"q", "j", "t", Bytes{}, 0, 0});
  EXPECT_FALSE(decode(encode(big)));
  Tasks huge = sample_tasks();
  huge.items[0].payload.data.assign(kMaxPayloadBytes + 1, 'x');
  EXPECT_FALSE(decode(encode(huge)));
}

// 16 MB of nested nils: 19,000 arrays of 840, each within the per-array
// limit, 16 million values in all (msgpack alone spends over a second on
// them). The declared sizes pass the budget after about 100 arrays and the
// decoder stops there, before allocating.
std::string nested_nils_frame() {
  std::string bytes = "\x93\x01\x06\xdd";
  const uint32_t outer = 19'000;
  for (int shift = 24; shift >= 0; shift -= 8) bytes += static_cast<char>((outer >> shift) & 0xff);
  for (uint32_t i = 0; i < outer; ++i) {
    bytes += "\xdc\x03\x48";  // array16 of 840
    bytes.append(840, '\xc0');
  }
  return bytes;
}

TEST(Protocol, DecodeWorkPerFrameIsBoundedByAValueBudget) {
  const std::string bomb = nested_nils_frame();
  ASSERT_LT(bomb.size(), kMaxFrameBytes);
  auto r = decode(bomb);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("more than 110000 values"), std::string::npos) << r.error().message;
  // The largest frame a producer may send still decodes.
  Enqueue full{1, {}};
  for (size_t i = 0; i < kMaxBatch; ++i) full.jobs.push_back(NewJob{"q", "j" + std::to_string(i), "t", Bytes{"p"}, 0, 0});
  EXPECT_TRUE(decode(encode(full)));
  for (auto& job : full.jobs) job.key.data = "tenant-" + std::to_string(job.id.size());
  EXPECT_TRUE(decode(encode(full))) << "the largest batch of jobs with keys";
  // Clients read bigger replies: a STATS_REPLY of as many queues as
  // max_queues allows (20,001 and more failed on an array limit of 20,000).
  StatsReply stats{1, {}, 0};
  stats.queues.resize(20'001, QueueStats{"q"});
  EXPECT_FALSE(decode(encode(stats)));
  EXPECT_TRUE(decode(encode(stats), kMaxReplyValues));
  stats.queues.resize(100'000, QueueStats{"q"});
  auto most = decode(encode(stats), kMaxReplyValues);
  ASSERT_TRUE(most) << most.error().message;
  EXPECT_EQ(std::get<StatsReply>(*most).queues.size(), 100'000U);
}

TEST(Protocol, RejectsHostileNestingDepth) {
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += '\x91';  // fixarray of 1, nested
  deep += '\x00';
  EXPECT_FALSE(decode(deep));
}

// Seeded mutation fuzzing: flips, inserts and deletes bytes of valid frames.
// The decoder must return a value or an error for every input (ASan/UBSan
// catch what a plain run would not).
// Mutated frames: decode() never crashes (ASan/UBSan watch), every refusal
// says why, and a frame it accepts is one it accepts again after encoding
// it (what the broker acts on is what it decoded).
TEST(Protocol, FuzzedFramesNeverCrashTheDecoderAndAcceptedOnesRoundTrip) {
  const std::vector<std::string> seeds = {
      encode(sample_tasks()), encode(Hello{"w1", {"a"}, 8, {{"a", "j", 3}}, "h", 1}),
      encode(Results{{{"a", "j", 1, Outcome::failed, "boom"}}}), encode(Enqueue{7, {{"a", "j", "t", Bytes{"p"}, 5, 3}}}),
      encode(StatsReply{9, {QueueStats{"a"}}, 2})};
  std::mt19937 rng(20261122);
  size_t decoded_ok = 0, rejected = 0;
  for (int i = 0; i < 200'000; ++i) {
    std::string bytes = seeds[rng() % seeds.size()];
    const int edits = 1 + rng() % 4;
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      const size_t pos = rng() % bytes.size();
      switch (rng() % 3) {
        case 0: bytes[pos] = static_cast<char>(rng()); break;
        case 1: bytes.insert(bytes.begin() + pos, static_cast<char>(rng())); break;
        default: bytes.erase(pos, 1);
      }
    }
    auto frame = decode(bytes);
    if (!frame) {
      ++rejected;
      ASSERT_FALSE(frame.error().message.empty()) << "a refusal without a reason";
      continue;
    }
    ++decoded_ok;
    const std::string again = std::visit([](const auto& body) { return encode(body); }, *frame);
    auto redecoded = decode(again);
    ASSERT_TRUE(redecoded) << redecoded.error().message;
    ASSERT_EQ(redecoded->index(), frame->index());
    ASSERT_EQ(std::visit([](const auto& body) { return encode(body); }, *redecoded), again);
  }
  // Both paths ran: the mutations were neither all harmless nor all fatal.
  EXPECT_GT(rejected, 1'000u);
  EXPECT_GT(decoded_ok, 1'000u);
}

// docs/protocol.md Appendix A shows one example of every frame type; its
// bytes (conformance/frames, written by conformance/examples.py) must be
// frames this implementation reads as that type, and encodes back to the
// same bytes.
TEST(Protocol, EveryDocumentedExampleDecodes) {
  const std::filesystem::path dir = std::filesystem::path(DUEQ_SOURCE_DIR) / "conformance" / "frames";
  size_t examples = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string name = entry.path().filename().string();
    auto frame = proto::decode(bytes, proto::kMaxReplyValues);
    ASSERT_TRUE(frame.has_value()) << name << ": " << frame.error().message;
    EXPECT_EQ(static_cast<int>(proto::type_of(*frame)), std::stoi(name.substr(0, 2))) << name;
    const std::string again = std::visit([](const auto& f) { return proto::encode(f); }, *frame);
    EXPECT_EQ(again, bytes) << name << " encodes back to other bytes";
    ++examples;
  }
  EXPECT_EQ(examples, 27u) << "one example per frame type";
}

// A done result carries what its handler returned as a seventh field (bin,
// after a snooze_ms of 0) when there is one; without one it keeps five.
TEST(Protocol, ADoneResultCarriesItsResultAsASeventhField) {
  const std::string result("ok\0\xff", 4);
  const auto decoded = decode(encode(Results{{{"q", "j", 1, Outcome::done, "", 0, Bytes{result}}, {"q", "k", 2, Outcome::done, ""}}}));
  ASSERT_TRUE(decoded);
  const auto& items = std::get<Results>(*decoded).items;
  EXPECT_EQ(items.at(0).result.data, result);
  EXPECT_EQ(items.at(1).result.data, "");
  const std::string bytes = encode(Results{{{"q", "j", 1, Outcome::done, "", 0, Bytes{result}}, {"q", "k", 2, Outcome::done, ""}}});
  auto handle = msgpack::unpack(bytes.data(), bytes.size());
  const auto& wire = handle.get().via.array.ptr[2].via.array.ptr[0].via.array;
  EXPECT_EQ(wire.ptr[0].via.array.size, 7u);
  EXPECT_EQ(wire.ptr[0].via.array.ptr[6].type, msgpack::type::BIN);
  EXPECT_EQ(wire.ptr[1].via.array.size, 5u);
  // Only a done result carries one.
  const std::string failed = encode(Results{{{"q", "j", 1, Outcome::failed, "x", 0, Bytes{"r"}}}});
  auto failed_handle = msgpack::unpack(failed.data(), failed.size());
  EXPECT_EQ(failed_handle.get().via.array.ptr[2].via.array.ptr[0].via.array.ptr[0].via.array.size, 5u);
}

TEST(Protocol, AWaitIsBoundedAndItsReplyNamesAKnownState) {
  EXPECT_TRUE(decode(encode(WaitRequest{1, "q", "j", 60'000})));
  EXPECT_FALSE(decode(encode(WaitRequest{1, "q", "j", 60'001})));
  EXPECT_FALSE(decode(encode(WaitRequest{1, "q", "j", -1})));
  EXPECT_FALSE(decode(encode(WaitRequest{1, "", "j", 10}))) << "the queue is needed";
  EXPECT_FALSE(decode(encode(WaitRequest{1, "q", "", 10})));
  EXPECT_TRUE(decode(encode(WaitReply{1, "dead", 5, {}, "boom"}), kMaxReplyValues));
  EXPECT_FALSE(decode(encode(WaitReply{1, "finished", 5, {}, ""}), kMaxReplyValues));
}

// PROGRESS: 1..10,000 items of a job reference, a percent 0..100 and a
// text of at most 256 bytes (any bytes).
TEST(Protocol, ProgressItemsAreBoundedInCountPercentAndText) {
  const std::string text("\0\xff", 2);
  auto ok = decode(encode(Progress{{{"q", "j", 1, 100, Bytes{text}}, {"q", "k", 2, 0, Bytes{std::string(256, 'x')}}}}));
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(std::get<Progress>(*ok).items.at(0).text.data, text);
  EXPECT_FALSE(decode(encode(Progress{})));
  EXPECT_FALSE(decode(encode(Progress{{{"q", "j", 1, 101, Bytes{}}}})));
  EXPECT_FALSE(decode(encode(Progress{{{"q", "j", 1, 1, Bytes{std::string(257, 'x')}}}})));
  EXPECT_FALSE(decode(encode(Progress{{{"q", "j", 0, 1, Bytes{}}}}))) << "token 0";
  EXPECT_FALSE(decode(encode(Progress{{{"bad queue", "j", 1, 1, Bytes{}}}})));
  EXPECT_FALSE(decode(encode(Progress{std::vector<ProgressItem>(kMaxBatch + 1, ProgressItem{"q", "j", 1, 1, Bytes{}})})));
}

// A snoozed result carries its delay as a sixth field; every other result
// keeps its five fields, byte for byte as before 0.8, and a five-field
// item reads as no delay.
TEST(Protocol, ASnoozedResultCarriesItsDelayAndOthersKeepFiveFields) {
  const auto decoded = decode(encode(Results{{{"q", "j", 1, Outcome::snoozed, "busy", 30'000}, {"q", "k", 2, Outcome::failed, "x", 99}}}));
  ASSERT_TRUE(decoded);
  const auto& items = std::get<Results>(*decoded).items;
  EXPECT_EQ(items.at(0).outcome, Outcome::snoozed);
  EXPECT_EQ(items.at(0).snooze_ms, 30'000);
  EXPECT_EQ(items.at(1).snooze_ms, 0) << "not sent with any other outcome";
  const std::string bytes = encode(Results{{{"q", "k", 2, Outcome::failed, "x"}}});
  auto handle = msgpack::unpack(bytes.data(), bytes.size());
  EXPECT_EQ(handle.get().via.array.ptr[2].via.array.ptr[0].via.array.ptr[0].via.array.size, 5u);
  EXPECT_FALSE(decode(encode(Results{{{"q", "j", 1, Outcome::snoozed, "", -1}}})));
  EXPECT_FALSE(decode(encode(Results{{{"q", "j", 1, Outcome::snoozed, "", JobResult::kMaxSnoozeMs + 1}}})));
}

// The allow-list and key files: bad input is refused with an error that
// names the file and entry, and never shows a key.
#include <gtest/gtest.h>

#include <fstream>

#include "broker/loop/access.hpp"
#include "broker/config/config.hpp"
#include "common/curve.hpp"
#include "tests/support/redis_server.hpp"

using namespace dueq;
using namespace dueq::broker;

namespace {
class AllowListFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = dueq::testing::make_temp_dir("allow");
    key_ = generate_curve_key_pair()->public_key;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const std::string& text) {
    const auto path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }
  std::string entry(const std::string& name, const std::string& role, const std::string& rest = "queues = [\"q\"]\n") {
    return "[[key]]\nname = \"" + name + "\"\npublic = \"" + key_ + "\"\nrole = \"" + role + "\"\n" + rest;
  }
  std::filesystem::path dir_;
  std::string key_;
};
}  // namespace

TEST_F(AllowListFile, GrantsRolesQueuesAndCapacity) {
  auto list = AllowList::load(write("a.toml", entry("w1", "worker", "queues = [\"q\", \"r\"]\ncapacity = 4\n")));
  ASSERT_TRUE(list) << list.error().message;
  const Grant* g = list->by_key(key_);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g, list->by_name("w1"));
  EXPECT_EQ(g->role, Role::worker);
  EXPECT_TRUE(g->may_use("r"));
  EXPECT_FALSE(g->may_use("s"));
  EXPECT_EQ(g->capacity, 4u);
  auto admin = AllowList::load(write("b.toml", entry("ops", "admin", "")));
  ASSERT_TRUE(admin) << admin.error().message;
  EXPECT_TRUE(admin->by_name("ops")->may_use("anything"));
}

TEST_F(AllowListFile, ADirectoryIsReadFileByFileAndANameOrKeyListedTwiceIsRefused) {
  std::filesystem::create_directory(dir_ / "d");
  write("d/1.toml", entry("p1", "producer"));
  write("d/ignored.txt", "not toml at all [[[");
  auto list = AllowList::load((dir_ / "d").string());
  ASSERT_TRUE(list) << list.error().message;
  EXPECT_EQ(list->size(), 1u);
  write("d/2.toml", entry("p2", "producer"));
  auto twice = AllowList::load((dir_ / "d").string());
  ASSERT_FALSE(twice);
  EXPECT_NE(twice.error().message.find("listed twice"), std::string::npos) << twice.error().message;
  EXPECT_EQ(twice.error().message.find(key_), std::string::npos) << "the whole key is shown";
}

TEST_F(AllowListFile, BadEntriesAreRefusedWithTheirReason) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {entry("w", "boss"), "'role' must be"},
      {entry("w", "worker", ""), "'queues' is required"},
      {entry("w", "producer", "queues = [\"q\"]\ncapacity = 3\n"), "'capacity' is for worker keys"},
      {entry("w", "worker", "queues = [\"bad queue!\"]\n"), "key #1"},
      {entry("w", "worker", "queues = [\"q\"]\ncapacity = 0\n"), "'capacity' must be"},
      {entry("w", "worker", "queues = [\"q\"]\ncapacity = 1e300\n"), "'capacity' must be"},
      {entry("w", "worker", "queues = [\"q\"]\ncolour = \"red\"\n"), "unknown field 'colour'"},
      {"[[key]]\nname = \"w\"\npublic = \"short\"\nrole = \"worker\"\nqueues = [\"q\"]\n", "40-character Z85"},
      {"[[key]]\nname = \"w\"\nrole = \"worker\"\nqueues = [\"q\"]\n", "are required"},
      {"[other]\nx = 1\n", "unknown key 'other'"},
      {"[[key]\n", "allow-list"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    auto list = AllowList::load(write("bad" + std::to_string(i) + ".toml", cases[i].first));
    ASSERT_FALSE(list) << cases[i].first;
    EXPECT_NE(list.error().message.find(cases[i].second), std::string::npos) << list.error().message;
  }
  EXPECT_FALSE(AllowList::load((dir_ / "missing.toml").string()));
}

TEST_F(AllowListFile, KeyFilesRoundTripAndBadOnesAreRefused) {
  auto pair = generate_curve_key_pair();
  ASSERT_TRUE(pair);
  const std::string base = (dir_ / "k").string();
  ASSERT_TRUE(write_curve_key_files(base, *pair));
  EXPECT_FALSE(write_curve_key_files(base, *pair)) << "an existing key file is not overwritten";
  EXPECT_EQ((std::filesystem::status(base + ".key").permissions() & std::filesystem::perms::all),
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto read = read_curve_key_file(base + ".key");
  ASSERT_TRUE(read);
  EXPECT_EQ(read->secret_key, pair->secret_key);
  EXPECT_EQ(*read_curve_public_key(base + ".pub"), pair->public_key);
  EXPECT_EQ(*read_curve_public_key(pair->public_key), pair->public_key);
  EXPECT_FALSE(read_curve_key_file(base + ".pub")) << "a .pub file holds no secret";
  EXPECT_FALSE(read_curve_public_key("not-a-key"));
  auto half = load_client_curve(base + ".pub", "");
  ASSERT_FALSE(half);
  EXPECT_NE(half.error().message.find("needs both"), std::string::npos);
}

TEST(ListenPolicy, PlaintextIsForThisHostOnlyUnlessInsecure) {
  EXPECT_TRUE(is_local_endpoint("tcp://127.0.0.1:7600"));
  EXPECT_TRUE(is_local_endpoint("ipc:///run/dueq.sock"));
  EXPECT_TRUE(is_local_endpoint("tcp://[::1]:7600"));
  EXPECT_FALSE(is_local_endpoint("tcp://0.0.0.0:7600"));
  EXPECT_FALSE(is_local_endpoint("tcp://*:7600"));
  EXPECT_FALSE(is_local_endpoint("tcp://10.0.0.5:7600"));
  EXPECT_FALSE(is_local_endpoint("tcp://127.0.0.1.example.com:7600"));
  EXPECT_TRUE(is_local_endpoint("tcp://127.1.2.3:7600"));
  BrokerConfig config;
  config.listen = "tcp://0.0.0.0:7600";
  EXPECT_FALSE(validate_config(config));
  config.insecure = true;
  EXPECT_TRUE(validate_config(config));
  config.insecure = false;
  config.curve_key = "broker.key";
  EXPECT_FALSE(validate_config(config)) << "a key without an allow-list";
  config.allow_list = "allow.toml";
  EXPECT_TRUE(validate_config(config));
}

// The broker's Redis client running scripts: a lost script cache, pipelined
// rounds, bytes sent as they are, a Redis restart; the settings it refuses.
// Run against a real redis-server through the broker's typed calls
// (docs/protocol.md's state diagram, rule by rule).
#include "tests/lua/scripts_fixture.hpp"

using namespace dueq;
using namespace dueq::broker;
using namespace dueq::testing::scripts;
using dueq::proto::StartCheck;

TEST_F(Scripts, ScriptsSurviveALostScriptCache) {
  redis_->cli("SCRIPT FLUSH");
  EXPECT_EQ(enqueue({job("a")}, 1000), std::vector<int64_t>{1});
}

// `min_replicas` adds WAIT after a round's enqueues: when an enqueue is
// resent after NOSCRIPT, its WAIT is resent after it, or the producer would
// be told replicas have a write they were asked about before it ran.
TEST_F(Scripts, AWaitIsResentAfterTheCallsResentBeforeIt) {
  redis_->cli("SCRIPT FLUSH");
  redis_->cli("CONFIG RESETSTAT");
  proto::NewJob first = job("first");
  Round round;
  round.add(calls::enqueue("q", {&first}, 1000, 3, 0));
  round.add(Command{"WAIT", "0", "0"});
  ASSERT_TRUE(store_->send(round));
  auto replies = store_->receive();
  ASSERT_TRUE(replies) << replies.error().message;
  EXPECT_EQ(*ints((*replies)[0].get()), std::vector<int64_t>{1});
  EXPECT_EQ((*replies)[1]->type, REDIS_REPLY_INTEGER);
  EXPECT_NE(redis_->cli("INFO commandstats").find("cmdstat_wait:calls=2,"), std::string::npos)
      << redis_->cli("INFO commandstats");
}

// The broker keeps two rounds on the wire. After SCRIPT FLUSH both come back
// refused; each refused call is sent again, the older round's first, so the
// second round's lease still sees the first round's job.
TEST_F(Scripts, PipelinedRoundsSurviveALostScriptCacheInOrder) {
  redis_->cli("SCRIPT FLUSH");
  proto::NewJob first = job("first");
  Round enqueue_round;
  enqueue_round.add(calls::enqueue("q", {&first}, 1000, 3, 0));
  Round lease_round;
  lease_round.add(calls::lease("q", 5000, 10));
  ASSERT_TRUE(store_->send(enqueue_round));
  ASSERT_TRUE(store_->send(lease_round));
  EXPECT_EQ(store_->outstanding(), 2u);
  EXPECT_FALSE(store_->execute(enqueue_round)) << "a synchronous round while others are outstanding is refused";
  auto enqueued = store_->receive();
  ASSERT_TRUE(enqueued) << enqueued.error().message;
  EXPECT_EQ(*ints((*enqueued)[0].get()), std::vector<int64_t>{1});
  auto leased = store_->receive();
  ASSERT_TRUE(leased) << leased.error().message;
  auto batch = calls::parse_lease((*leased)[0].get());
  ASSERT_TRUE(batch);
  ASSERT_EQ(batch->jobs.size(), 1u);
  EXPECT_EQ(batch->jobs[0].id, "first");
  EXPECT_EQ(store_->outstanding(), 0u);
}

// The broker writes its commands in Redis's protocol itself
// (redis_connection.cpp): arguments reach Redis byte for byte, whatever they
// hold (CR LF, NUL, high bytes, nothing at all), and pipelined replies come
// back one per command.
TEST_F(Scripts, CommandsReachRedisByteForByte) {
  const std::string binary = std::string("a\r\nb\0c\xff$*\r\n", 11) + std::string(70'000, 'x');
  auto replies = store_->pipeline({Command{"SET", "bytes", binary}, Command{"SET", "empty", ""},
                                   Command{"GET", "bytes"}, Command{"STRLEN", "empty"}});
  ASSERT_TRUE(replies) << replies.error().message;
  ASSERT_EQ(replies->size(), 4u);
  ASSERT_EQ((*replies)[2]->type, REDIS_REPLY_STRING);
  EXPECT_EQ(std::string((*replies)[2]->str, (*replies)[2]->len), binary);
  EXPECT_EQ((*replies)[3]->integer, 0);
}

TEST_F(Scripts, ScriptsSurviveARedisRestartWithAof) {
  enqueue({job("a", 5000)}, 1000);
  redis_->cli("SHUTDOWN");  // graceful: AOF flushed
  redis_->kill(SIGKILL);
  redis_->start();
  store_->disconnect();
  ASSERT_TRUE(store_->connect());
  Round round;
  round.add(calls::promote("q", 6000, 10));
  EXPECT_EQ(calls::parse_promote(run(round))->moved, 1);
}

TEST(RedisSettings, BrokerRefusesRedisWithoutAof) {
  dueq::testing::RedisServer redis({"--appendonly", "no"});
  RedisClient store(*parse_redis_url(redis.url()));
  ASSERT_TRUE(store.connect());
  auto r = check_durability_settings(store);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("appendonly yes"), std::string::npos);
}

TEST(RedisSettings, BrokerRefusesAnEvictingRedis) {
  dueq::testing::RedisServer redis({"--maxmemory-policy", "allkeys-lru"});
  RedisClient store(*parse_redis_url(redis.url()));
  ASSERT_TRUE(store.connect());
  auto r = check_durability_settings(store);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("maxmemory-policy noeviction"), std::string::npos);
}

TEST(RedisSettings, ProductionSettingsPass) {
  dueq::testing::RedisServer redis;
  RedisClient store(*parse_redis_url(redis.url()));
  ASSERT_TRUE(store.connect());
  EXPECT_TRUE(check_durability_settings(store));
  EXPECT_EQ(settings_advice(store).value_or("failed"), "");
}

// A pin no longer than the listpack value limits would leave the hot keys
// listpacks without a word: its length follows the limits of the Redis in use.
TEST(RedisSettings, EncodingPinsAreOneBytePastTheLargerListpackValueLimit) {
  {
    dueq::testing::RedisServer redis;
    RedisClient store(*parse_redis_url(redis.url()));
    ASSERT_TRUE(store.connect());
    EXPECT_EQ(encoding_pin_bytes(store).value_or(0), kEncodingPinBytes);
  }
  dueq::testing::RedisServer redis({"--hash-max-listpack-value", "3000", "--zset-max-listpack-value", "2000"});
  RedisClient store(*parse_redis_url(redis.url()));
  ASSERT_TRUE(store.connect());
  EXPECT_EQ(encoding_pin_bytes(store).value_or(0), 3001u);
  ASSERT_EQ(redis.cli("CONFIG SET zset-max-listpack-value 65536"), "OK");
  auto refused = encoding_pin_bytes(store);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::bad_argument);
  EXPECT_NE(refused.error().message.find("zset-max-listpack-value 65536"), std::string::npos) << refused.error().message;
}

TEST(RedisSettings, SettingsBelowDeployRedisConfAreNamedInTheAdviceWithWhatTheyCost) {
  dueq::testing::RedisServer redis({"--hash-max-listpack-entries", "128", "--zset-max-listpack-entries", "64",
                                    "--auto-aof-rewrite-min-size", "64mb"});
  RedisClient store(*parse_redis_url(redis.url()));
  ASSERT_TRUE(store.connect());
  const std::string advice = settings_advice(store).value_or("failed");
  EXPECT_NE(advice.find("hash-max-listpack-entries is 128 (recommended: 256), zset-max-listpack-entries is 64 "
                        "(recommended: 256): scheduled jobs will use more Redis memory"),
            std::string::npos)
      << advice;
  EXPECT_NE(advice.find("; auto-aof-rewrite-min-size is 67108864 (recommended: 1073741824): under load AOF rewrites"),
            std::string::npos)
      << advice;
  EXPECT_EQ(advice.find("hash-max-listpack-value"), std::string::npos) << advice;
}

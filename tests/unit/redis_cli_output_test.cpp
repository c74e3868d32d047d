// The suite's in-process redis-cli (redis_cli_output in
// tests/support/redis_server.hpp): for the replies tests read, it prints
// what redis-cli itself prints, byte for byte.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/redis_server.hpp"

namespace dueq::testing {
namespace {

TEST(RedisCliOutput, PrintsWhatRedisCliPrintsForEveryKindOfReply) {
  RedisServer redis;
  const std::string cli = "redis-cli -p " + std::to_string(redis.port()) + " ";
  // Writes first, through redis-cli itself, so that what the reads see
  // does not depend on the code under test.
  for (const char* setup : {"SET plain value", "SET 'dueq:{q}:two words' 'a b'", "HSET h f1 v1 f2 ''", "ZADD z 1 a 2.5 b",
                            "SADD s only", "RPUSH l x y z"})
    ASSERT_FALSE(command_output(cli + setup + " 2>&1").starts_with("ERR")) << setup;
  const std::vector<std::string> reads = {
      "GET plain",                                        // a bulk string
      "GET 'dueq:{q}:two words'",                         // quoted key and value with a blank
      "GET \"dueq:{q}:two words\"",                       // the same in double quotes
      "GET missing",                                      // nil
      "PING",                                             // a status
      "EXISTS plain missing",                             // an integer
      "HGETALL h",                                        // an array, an empty string in it
      "ZRANGE z 0 -1 WITHSCORES",                         // scores as strings
      "KEYS 'nothing:*'",                                 // an empty array
      "EVAL \"return {1, {2, 'x'}, 'y'}\" 0",             // nested arrays
      "NOSUCHCOMMAND now",                                // an error
      "HGET h",                                           // an arity error
      "SMEMBERS s",
      "LRANGE l 0 -1",
      "OBJECT ENCODING h",
      "INFO keyspace",                                    // CRLF line ends in the text
      "SCAN 0 COUNT 100 MATCH 'l'",                       // cursor and an array
  };
  for (const auto& read : reads) EXPECT_EQ(redis.cli(read), command_output(cli + read + " 2>&1")) << read;
}

TEST(RedisCliOutput, LeavesWhatTheShellWouldDoMoreWithToTheShell) {
  EXPECT_TRUE(shell_words("GET 'a b' \"c\\\"d\" e\\ f").has_value());
  EXPECT_EQ(*shell_words("GET 'a b' \"c\\\"d\" e\\ f"), (std::vector<std::string>{"GET", "a b", "c\"d", "e f"}));
  for (const char* more : {"< script.txt", "GET a | head", "GET $HOME", "GET \"$HOME\"", "GET `x`", "-a pass PING", "GET 'open",
                           "GET a; rm b", "GET a > out"})
    EXPECT_FALSE(shell_words(more).has_value()) << more;
}

}  // namespace
}  // namespace dueq::testing

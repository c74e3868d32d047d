#pragma once
// A round: Redis calls sent in one pipelined write, each with the code that
// handles its reply. A component adds its call and its continuation side by
// side, so one operation reads top to bottom in one file; the broker only
// sends rounds and runs their continuations in order when the replies come.
#include <algorithm>
#include <array>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "broker/store/redis_connection.hpp"
#include "common/error.hpp"
#include "lua/scripts.hpp"

namespace dueq::broker {

// EVALSHA of `script` with its keys; the caller adds the arguments.
Command script_call(lua::ScriptId script, std::initializer_list<std::string_view> keys);

// A fencing token as the scripts store and compare it: 16 lowercase hex
// digits (lease.lua takes a lease's tokens as one string of them).
std::string token_text(uint64_t token);
// The token `text` stands for; nullopt unless 16 hex digits, not all zero.
std::optional<uint64_t> token_from_text(std::string_view text);

class Round {
 public:
  // The call's reply, or nullptr: the round failed (connection lost) and the
  // call is not known to have been applied.
  using OnReply = std::move_only_function<void(const redisReply* reply)>;
  // Runs after every earlier continuation of the round; `applied` is false
  // when the round failed.
  using OnDone = std::move_only_function<void(bool applied)>;

  void add(Command call, OnReply on_reply = {});
  void then(OnDone on_done);

  bool empty() const { return commands_.empty(); }
  size_t calls() const { return commands_.size(); }
  // Hands the calls to the connection; the continuations stay.
  std::vector<Command> take_commands() { return std::move(commands_); }

  // Runs every continuation in order: with its reply, or as failed.
  void apply(const std::vector<ReplyPtr>& replies);
  void fail();

 private:
  struct Step {
    bool has_call = false;
    OnReply on_reply;
    OnDone on_done;
  };
  std::vector<Command> commands_;
  std::vector<Step> steps_;
};

// Reply readers shared by the calls' parsers.
namespace reply {
std::unexpected<Error> bad(const redisReply* reply, std::string_view what);
std::string str(const redisReply* reply);
int64_t num(const redisReply* reply);
// An array of integers (or numeric strings).
Result<std::vector<int64_t>> integers(const redisReply* reply, std::string_view what);
Result<std::vector<std::string>> strings(const redisReply* reply, std::string_view what);
// TIME's answer (seconds, microseconds) in microseconds since the epoch.
Result<int64_t> server_time_us(const redisReply* reply);
// One reply code `value` as the named enum `E` whose values are `known`;
// nullopt for any other value.
template <typename E, size_t N>
std::optional<E> code(int64_t value, const std::array<E, N>& known) {
  const auto it = std::find_if(known.begin(), known.end(), [&](E e) { return static_cast<int64_t>(e) == value; });
  return it == known.end() ? std::nullopt : std::optional<E>(*it);
}
// A script's reply codes, an array of integers, as the named enum `E`
// whose values are `known`; any other value fails the parse.
template <typename E, size_t N>
Result<std::vector<E>> codes(const redisReply* reply, std::string_view what, const std::array<E, N>& known) {
  auto values = integers(reply, what);
  if (!values) return std::unexpected(values.error());
  std::vector<E> out;
  out.reserve(values->size());
  for (const int64_t v : *values) {
    const auto c = code(v, known);
    if (!c) return bad(reply, what);
    out.push_back(*c);
  }
  return out;
}
}  // namespace reply

}  // namespace dueq::broker

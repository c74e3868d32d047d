#include "broker/store/round.hpp"

#include <fmt/format.h>

#include <charconv>

namespace dueq::broker {

Command script_call(lua::ScriptId script, std::initializer_list<std::string_view> keys) {
  Command call{"EVALSHA", lua::script(script).sha1};
  call.add(static_cast<int64_t>(keys.size()));
  for (auto key : keys) call.add(key);
  if (lua::script(script).fenced) call.mark_fenced();
  return call;
}

void Round::add(Command call, OnReply on_reply) {
  commands_.push_back(std::move(call));
  steps_.push_back(Step{true, std::move(on_reply), {}});
}

void Round::then(OnDone on_done) { steps_.push_back(Step{false, {}, std::move(on_done)}); }

void Round::apply(const std::vector<ReplyPtr>& replies) {
  size_t next = 0;
  for (auto& step : steps_) {
    if (!step.has_call) {
      step.on_done(true);
      continue;
    }
    const redisReply* r = next < replies.size() ? replies[next].get() : nullptr;
    ++next;
    if (step.on_reply) step.on_reply(r);
  }
  steps_.clear();
}

void Round::fail() {
  for (auto& step : steps_) {
    if (step.has_call) {
      if (step.on_reply) step.on_reply(nullptr);
    } else {
      step.on_done(false);
    }
  }
  steps_.clear();
}

// By hand: fmt's "{:016x}" parsed its format spec for every token of every
// lease, a few percent of the broker's CPU at single-job rates.
std::string token_text(uint64_t token) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text(16, '0');
  for (int i = 15; i >= 0; --i, token >>= 4) text[static_cast<size_t>(i)] = kHex[token & 0xf];
  return text;
}

std::optional<uint64_t> token_from_text(std::string_view text) {
  uint64_t token = 0;
  if (text.size() != 16) return std::nullopt;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), token, 16);
  if (ec != std::errc{} || end != text.data() + text.size() || token == 0) return std::nullopt;
  return token;
}

namespace reply {

std::unexpected<Error> bad(const redisReply* r, std::string_view what) {
  if (r == nullptr) return fail(Errc::unavailable, fmt::format("{}: Redis connection lost", what));
  if (auto err = reply_error(r); !err.empty()) return fail(Errc::internal, fmt::format("{}: Redis said: {}", what, err));
  return fail(Errc::internal, fmt::format("{}: unexpected reply shape", what));
}

std::string str(const redisReply* r) {
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) return std::string(r->str, r->len);
  if (r->type == REDIS_REPLY_INTEGER) return std::to_string(r->integer);
  return {};
}

int64_t num(const redisReply* r) {
  if (r->type == REDIS_REPLY_INTEGER) return r->integer;
  if (r->type == REDIS_REPLY_STRING) return std::strtoll(r->str, nullptr, 10);
  return 0;
}

Result<std::vector<int64_t>> integers(const redisReply* r, std::string_view what) {
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return bad(r, what);
  std::vector<int64_t> out;
  out.reserve(r->elements);
  for (size_t i = 0; i < r->elements; ++i) out.push_back(num(r->element[i]));
  return out;
}

Result<std::vector<std::string>> strings(const redisReply* r, std::string_view what) {
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return bad(r, what);
  std::vector<std::string> out;
  out.reserve(r->elements);
  for (size_t i = 0; i < r->elements; ++i) out.push_back(str(r->element[i]));
  return out;
}

Result<int64_t> server_time_us(const redisReply* r) {
  auto parts = integers(r, "TIME");
  if (!parts || parts->size() != 2 || (*parts)[0] <= 0 || (*parts)[1] < 0 || (*parts)[1] >= 1'000'000) return bad(r, "TIME");
  return (*parts)[0] * 1'000'000 + (*parts)[1];
}

}  // namespace reply

}  // namespace dueq::broker

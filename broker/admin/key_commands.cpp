#include "broker/admin/key_commands.hpp"

#include <fmt/format.h>

#include <charconv>

#include "broker/store/keys.hpp"
#include "common/logging.hpp"
#include "common/names.hpp"
#include "common/protocol.hpp"

namespace dueq::broker {

namespace {
constexpr uint32_t kDefaultRows = 100;
constexpr uint32_t kMaxRows = 1'000;

std::optional<int64_t> whole_number(const std::string& text) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

std::string arg(const proto::AdminRequest& request, const char* name) {
  auto it = request.args.find(name);
  return it == request.args.end() ? std::string() : it->second;
}

// What each setting is called, where it is kept and what it may be.
struct SettingWords {
  const char* arg;    // the ADMIN argument and the script's name for it
  const char* range;  // for the refusal
  double least, most;
  bool decimals;
  const char* own;  // what a key has of its own
};
SettingWords words_of(KeySetting setting) {
  switch (setting) {
    case KeySetting::weight: return {"weight", "a whole number of 1..1000", 1, 1'000, false, "a weight"};
    case KeySetting::rate: return {"rate", "jobs per second, 0.001..1000000", 0.001, 1'000'000, true, "a rate limit"};
    case KeySetting::limit: break;
  }
  return {"limit", "a whole number of 1..1000000", 1, 1'000'000, false, "a limit"};
}
const std::string& setting_hash(const QueueKeys& k, KeySetting setting) {
  return setting == KeySetting::weight ? k.key_weights : setting == KeySetting::rate ? k.key_rates : k.key_limits;
}
}  // namespace

namespace calls {

Command key_limit(const std::string& queue, const std::string& key, const std::string& value, KeySetting setting) {
  QueueKeys k(queue);
  return script_call(lua::ScriptId::key_limit, {setting_hash(k, setting), k.key_running})
      .add(key)
      .add(value)
      .add(words_of(setting).arg);
}

Result<KeyLimitOutcome> parse_key_limit(const redisReply* r) {
  static constexpr std::array kKnown{KeyLimitChange::set, KeyLimitChange::too_many_keys};
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 3 || r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_STRING || r->element[2]->type != REDIS_REPLY_INTEGER)
    return reply::bad(r, "key_limit");
  const auto change = reply::code(r->element[0]->integer, kKnown);
  if (!change) return reply::bad(r, "key_limit");
  return KeyLimitOutcome{*change, reply::str(r->element[1]), r->element[2]->integer};
}

Command key_list(const std::string& queue, std::optional<KeySetting> listed, const std::string& cursor, int count) {
  QueueKeys k(queue);
  // The script reads own values from its second key: the rates or weights
  // stand in for the limits when they are listed.
  return script_call(lua::ScriptId::key_list, {k.key_running, setting_hash(k, listed.value_or(KeySetting::limit)), k.key_parked})
      .add(listed ? "limits" : "running")
      .add(cursor)
      .add(static_cast<int64_t>(count));
}

Result<KeyPage> parse_key_list(const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements < 1 || (r->elements - 1) % 4 != 0 ||
      r->element[0]->type != REDIS_REPLY_STRING)
    return reply::bad(r, "key_list");
  KeyPage page{reply::str(r->element[0]), {}};
  for (size_t i = 1; i < r->elements; i += 4) {
    if (r->element[i]->type != REDIS_REPLY_STRING || r->element[i + 1]->type != REDIS_REPLY_INTEGER ||
        r->element[i + 2]->type != REDIS_REPLY_STRING || r->element[i + 3]->type != REDIS_REPLY_INTEGER)
      return reply::bad(r, "key_list");
    page.rows.push_back({reply::str(r->element[i]), r->element[i + 1]->integer, reply::str(r->element[i + 2]),
                         r->element[i + 3]->integer});
  }
  return page;
}

}  // namespace calls

namespace {

// `dueq key limit`, `rate` and `weight`: the value as sent, or "clear".
Result<std::string> setting_value(const proto::AdminRequest& request, const SettingWords& w) {
  const std::string text = arg(request, w.arg);
  if (text == "clear") return text;
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, std::chars_format::fixed);
  const bool plain = !text.empty() && std::all_of(text.begin(), text.end(), [&](char ch) {
    return (ch >= '0' && ch <= '9') || (w.decimals && ch == '.');
  });
  if (ec != std::errc() || end != text.data() + text.size() || !plain || !(value >= w.least && value <= w.most))
    return fail(Errc::bad_argument, fmt::format("args.{}: {}, or \"clear\"", w.arg, w.range));
  return text;
}

std::string setting_summary(const proto::AdminRequest& request, const std::string& key, KeySetting setting,
                            const std::string& value) {
  if (value == "clear")
    return fmt::format("key '{}' of '{}' takes the queue's {}", loggable(key), request.queue,
                       setting == KeySetting::weight ? "weight, 1" : setting == KeySetting::rate ? "key_rate" : "limit");
  if (setting == KeySetting::weight)
    return fmt::format("key '{}' of '{}' has weight {} in fair dispatch", loggable(key), request.queue, value);
  if (setting == KeySetting::rate)
    return fmt::format("key '{}' of '{}' starts at most {} jobs a second", loggable(key), request.queue, value);
  return fmt::format("key '{}' of '{}' runs at most {} at a time", loggable(key), request.queue, value);
}

Result<proto::AdminReply> set_key_value(AdminContext& c, const proto::AdminRequest& request, KeySetting setting) {
  if (auto valid = validate_queue_name(request.queue); !valid) return std::unexpected(valid.error());
  const std::string key = arg(request, "key");
  if (key.empty() || key.size() > proto::kMaxKeyBytes) return fail(Errc::bad_argument, "args.key: 1..128 bytes");
  const SettingWords w = words_of(setting);
  auto value = setting_value(request, w);
  if (!value) return std::unexpected(value.error());
  auto r = c.redis.call(calls::key_limit(request.queue, key, *value, setting));
  if (!r) return std::unexpected(r.error());
  if (auto err = reply_error(r->get()); !err.empty()) return fail(Errc::internal, std::string(err));
  auto outcome = calls::parse_key_limit(r->get());
  if (!outcome) return std::unexpected(outcome.error());
  if (outcome->change == KeyLimitChange::too_many_keys)
    return fail(Errc::bad_argument, fmt::format("queue '{}' has 10000 keys with {} of their own: clear some first",
                                                loggable(request.queue), w.own));
  proto::AdminReply out;
  out.rows.push_back({{"queue", request.queue},
                      {"key", key},
                      {w.arg, *value == "clear" ? "default" : *value},
                      {"previous", outcome->previous.empty() ? "default" : outcome->previous},
                      {"running", std::to_string(outcome->running)}});
  out.summary = setting_summary(request, key, setting, *value);
  return out;
}

}  // namespace

Result<proto::AdminReply> key_limit(AdminContext& c, const proto::AdminRequest& request) {
  return set_key_value(c, request, KeySetting::limit);
}

Result<proto::AdminReply> key_weight(AdminContext& c, const proto::AdminRequest& request) {
  return set_key_value(c, request, KeySetting::weight);
}

Result<proto::AdminReply> key_rate(AdminContext& c, const proto::AdminRequest& request) {
  return set_key_value(c, request, KeySetting::rate);
}

Result<proto::AdminReply> key_list(AdminContext& c, const proto::AdminRequest& request) {
  if (auto valid = validate_queue_name(request.queue); !valid) return std::unexpected(valid.error());
  const std::string of = arg(request, "of");
  if (!of.empty() && of != "running" && of != "limits" && of != "rates" && of != "weights")
    return fail(Errc::bad_argument, "args.of: \"running\", \"limits\", \"rates\" or \"weights\"");
  std::optional<KeySetting> listed;
  if (of == "limits") listed = KeySetting::limit;
  if (of == "rates") listed = KeySetting::rate;
  if (of == "weights") listed = KeySetting::weight;
  const std::string after = arg(request, "after");
  std::string cursor = after.empty() ? std::string("0") : after;
  if (!whole_number(cursor)) return fail(Errc::bad_argument, "args.after: the `next` of an earlier page");
  if (request.limit > kMaxRows) return fail(Errc::bad_argument, "limit: at most 1000 rows");
  const auto rows = request.limit == 0 ? kDefaultRows : request.limit;
  proto::AdminReply out;
  // HSCAN's COUNT is a hint: pages are asked for until `rows` are in or the
  // scan ends, each call bounded.
  while (out.rows.size() < rows) {
    auto r = c.redis.call(calls::key_list(request.queue, listed, cursor, static_cast<int>(rows - out.rows.size())));
    if (!r) return std::unexpected(r.error());
    if (auto err = reply_error(r->get()); !err.empty()) return fail(Errc::internal, std::string(err));
    auto page = calls::parse_key_list(r->get());
    if (!page) return std::unexpected(page.error());
    for (auto& row : page->rows)
      out.rows.push_back({{"key", std::move(row.key)},
                          {"running", std::to_string(row.running)},
                          {"waiting", std::to_string(row.parked)},
                          {listed ? words_of(*listed).arg : "limit", row.own.empty() ? "default" : row.own}});
    cursor = page->next;
    if (cursor == "0") break;
  }
  out.next = cursor == "0" ? "" : cursor;
  out.summary = fmt::format("{} keys {}", out.rows.size(),
                            listed ? fmt::format("with {} of their own", words_of(*listed).own) : "holding turns");
  return out;
}

}  // namespace dueq::broker

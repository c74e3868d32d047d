#include "common/redis_url.hpp"

#include <charconv>

namespace dueq {

namespace {

// The URL as errors may show it: a password in it becomes "***". Where the
// URL is too malformed to tell user from password (no "://" before the '@':
// "redis:secret@host"), everything before the '@' goes.
std::string redacted(std::string_view url) {
  const auto scheme = url.find("://");
  const auto at = url.rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  if (scheme == std::string_view::npos || at < scheme) return "***" + std::string(url.substr(at));
  const std::string_view userinfo = url.substr(scheme + 3, at - scheme - 3);
  const auto colon = userinfo.find(':');
  const std::string user(colon == std::string_view::npos ? std::string_view{} : userinfo.substr(0, colon));
  return std::string(url.substr(0, scheme + 3)) + user + ":***" + std::string(url.substr(at));
}

Result<int> parse_int(std::string_view text, int lo, int hi, const std::string& what, const std::string& url) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < lo || value > hi)
    return fail(Errc::bad_argument, "bad " + what + " in redis URL '" + url + "'");
  return value;
}

}  // namespace

std::string RedisAddress::describe() const {
  std::string out = unix_path.empty() ? host + ":" + std::to_string(port) : unix_path;
  if (db != 0) out += "/" + std::to_string(db);
  return out;
}

Result<RedisAddress> parse_redis_url(std::string_view url) {
  const std::string original = redacted(url);
  RedisAddress addr;
  if (url.starts_with("/")) {
    addr.unix_path = std::string(url);
    return addr;
  }
  if (url.starts_with("unix://")) {
    std::string_view rest = url.substr(7);
    if (auto q = rest.find("?db="); q != std::string_view::npos) {
      auto db = parse_int(rest.substr(q + 4), 0, 1 << 20, "db", original);
      if (!db) return std::unexpected(db.error());
      addr.db = *db;
      rest = rest.substr(0, q);
    }
    if (!rest.starts_with("/")) return fail(Errc::bad_argument, "unix redis URL needs an absolute path: " + original);
    addr.unix_path = std::string(rest);
    return addr;
  }
  if (!url.starts_with("redis://"))
    return fail(Errc::bad_argument, "redis URL must start with redis:// or unix://, or be a socket path: " + original);
  std::string_view rest = url.substr(8);
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = rest.substr(0, at);
    // redis://password@host (the old form), redis://:password@host, or an
    // ACL user: redis://user:password@host.
    auto colon = userinfo.find(':');
    if (colon != std::string_view::npos) addr.user = std::string(userinfo.substr(0, colon));
    addr.password = std::string(colon == std::string_view::npos ? userinfo : userinfo.substr(colon + 1));
    rest = rest.substr(at + 1);
  }
  if (auto slash = rest.find('/'); slash != std::string_view::npos) {
    std::string_view db_text = rest.substr(slash + 1);
    if (!db_text.empty()) {
      auto db = parse_int(db_text, 0, 1 << 20, "db", original);
      if (!db) return std::unexpected(db.error());
      addr.db = *db;
    }
    rest = rest.substr(0, slash);
  }
  if (auto colon = rest.rfind(':'); colon != std::string_view::npos && rest.find(']') == std::string_view::npos) {
    auto port = parse_int(rest.substr(colon + 1), 1, 65535, "port", original);
    if (!port) return std::unexpected(port.error());
    addr.port = *port;
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return fail(Errc::bad_argument, "redis URL has no host: " + original);
  addr.host = std::string(rest);
  return addr;
}

}  // namespace dueq

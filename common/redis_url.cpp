#include "common/redis_url.hpp"

#include <charconv>

namespace dueq {

namespace {

// The URL as errors may show it: a password in it becomes "***". Where the
// URL is too malformed to tell user from password (no "://" before the '@':
// "redis:secret@host"), everything before the '@' goes.
std::string redacted_userinfo(std::string_view url) {
  const auto scheme = url.find("://");
  const auto at = url.rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  if (scheme == std::string_view::npos || at < scheme) return "***" + std::string(url.substr(at));
  const std::string_view userinfo = url.substr(scheme + 3, at - scheme - 3);
  const auto colon = userinfo.find(':');
  const std::string user(colon == std::string_view::npos ? std::string_view{} : userinfo.substr(0, colon));
  return std::string(url.substr(0, scheme + 3)) + user + ":***" + std::string(url.substr(at));
}

std::string redacted(std::string_view url) {
  std::string out = redacted_userinfo(url);
  // A sentinel URL's query may hold the sentinels' password, and a
  // password may hold '&': none of it is shown.
  if (out.starts_with("sentinel://"))
    if (auto query = out.find('?'); query != std::string::npos) out.replace(query + 1, std::string::npos, "***");
  return out;
}

Result<int> parse_int(std::string_view text, int lo, int hi, const std::string& what, const std::string& url) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < lo || value > hi)
    return fail(Errc::bad_argument, "bad " + what + " in redis URL '" + url + "'");
  return value;
}

// user:password before the last '@', taken off `rest`: password@ (the old
// form), :password@, or an ACL user's user:password@.
void take_userinfo(std::string_view& rest, std::string& user, std::string& password) {
  const auto at = rest.rfind('@');
  if (at == std::string_view::npos) return;
  const std::string_view userinfo = rest.substr(0, at);
  const auto colon = userinfo.find(':');
  if (colon != std::string_view::npos) user = std::string(userinfo.substr(0, colon));
  password = std::string(colon == std::string_view::npos ? userinfo : userinfo.substr(colon + 1));
  rest = rest.substr(at + 1);
}

Result<HostPort> parse_host_port(std::string_view text, int default_port, const std::string& url) {
  HostPort out{std::string(text), default_port};
  if (auto colon = text.rfind(':'); colon != std::string_view::npos) {
    auto port = parse_int(text.substr(colon + 1), 1, 65535, "port", url);
    if (!port) return std::unexpected(port.error());
    out = HostPort{std::string(text.substr(0, colon)), *port};
  }
  if (out.host.empty()) return fail(Errc::bad_argument, "redis URL has an empty host: " + url);
  return out;
}

// "host[:port],host[:port]...": the sentinels or cluster seeds of a URL.
Result<std::vector<HostPort>> parse_host_list(std::string_view hosts, int default_port, const std::string& url) {
  std::vector<HostPort> out;
  while (!hosts.empty()) {
    const auto comma = hosts.find(',');
    auto one = parse_host_port(hosts.substr(0, comma), default_port, url);
    if (!one) return std::unexpected(one.error());
    out.push_back(std::move(*one));
    if (comma == std::string_view::npos) break;
    hosts = hosts.substr(comma + 1);
  }
  return out;
}

// After "sentinel://": [userinfo@]hosts/master[/db][?query].
Result<RedisAddress> parse_sentinel_url(std::string_view rest, const std::string& original) {
  RedisAddress addr;
  std::string_view query;
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  take_userinfo(rest, addr.user, addr.password);
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos)
    return fail(Errc::bad_argument, "sentinel URL needs the master's name after the hosts (/mymaster): " + original);
  std::string_view path = rest.substr(slash + 1);
  std::string_view hosts = rest.substr(0, slash);
  if (auto db_slash = path.find('/'); db_slash != std::string_view::npos) {
    auto db = parse_int(path.substr(db_slash + 1), 0, 1 << 20, "db", original);
    if (!db) return std::unexpected(db.error());
    addr.db = *db;
    path = path.substr(0, db_slash);
  }
  if (path.empty()) return fail(Errc::bad_argument, "sentinel URL has an empty master name: " + original);
  addr.master_name = std::string(path);
  auto sentinels = parse_host_list(hosts, 26379, original);
  if (!sentinels) return std::unexpected(sentinels.error());
  addr.sentinels = std::move(*sentinels);
  if (addr.sentinels.empty()) return fail(Errc::bad_argument, "sentinel URL names no sentinel: " + original);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const auto eq = pair.find('=');
    const std::string_view key = pair.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
    if (key == "sentinel_user") addr.sentinel_user = std::string(value);
    else if (key == "sentinel_password") addr.sentinel_password = std::string(value);
    else  // not named: the text after '?' may hold a password
      return fail(Errc::bad_argument,
                  "a sentinel URL takes only sentinel_user and sentinel_password after '?': " + original);
    if (amp == std::string_view::npos) break;
    query = query.substr(amp + 1);
  }
  return addr;
}

// After "redis+cluster://": [userinfo@]host[:port],host[:port]...
Result<RedisAddress> parse_cluster_url(std::string_view rest, const std::string& original) {
  RedisAddress addr;
  take_userinfo(rest, addr.user, addr.password);
  if (rest.find_first_of("/?") != std::string_view::npos)
    return fail(Errc::bad_argument, "a cluster URL names seed nodes only (a cluster has no db): " + original);
  auto seeds = parse_host_list(rest, 6379, original);
  if (!seeds) return std::unexpected(seeds.error());
  addr.cluster_seeds = std::move(*seeds);
  if (addr.cluster_seeds.empty()) return fail(Errc::bad_argument, "cluster URL names no node: " + original);
  return addr;
}

}  // namespace

std::string RedisAddress::describe() const {
  if (via_cluster() && host.empty()) {
    std::string out = "cluster of ";
    for (size_t i = 0; i < cluster_seeds.size(); ++i)
      out += (i == 0 ? "" : ",") + cluster_seeds[i].host + ":" + std::to_string(cluster_seeds[i].port);
    return out;
  }
  if (via_sentinel() && host.empty()) {
    std::string out = "master '" + master_name + "' of sentinels ";
    for (size_t i = 0; i < sentinels.size(); ++i)
      out += (i == 0 ? "" : ",") + sentinels[i].host + ":" + std::to_string(sentinels[i].port);
    return db == 0 ? out : out + "/" + std::to_string(db);
  }
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
  if (url.starts_with("sentinel://")) return parse_sentinel_url(url.substr(11), original);
  if (url.starts_with("redis+cluster://")) return parse_cluster_url(url.substr(16), original);
  if (!url.starts_with("redis://"))
    return fail(Errc::bad_argument,
                "redis URL must start with redis://, sentinel://, redis+cluster:// or unix://, or be a socket path: " + original);
  std::string_view rest = url.substr(8);
  take_userinfo(rest, addr.user, addr.password);
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

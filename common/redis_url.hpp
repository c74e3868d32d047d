#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace dueq {

struct HostPort {
  std::string host;
  int port = 0;
};

struct RedisAddress {
  std::string host;         // empty when unix_path is set (or with sentinels, until resolved)
  int port = 6379;
  std::string unix_path;    // set for unix sockets
  std::string user;         // ACL user; empty: the default user
  std::string password;     // empty: no AUTH
  int db = 0;
  // Redis Sentinel: the master named `master_name` is asked of these, in
  // order, at every connect. Sentinels may have their own ACL user/password.
  std::vector<HostPort> sentinels;
  std::string master_name;
  std::string sentinel_user;
  std::string sentinel_password;

  // Redis Cluster: the slot map is asked of these seed nodes, in order.
  std::vector<HostPort> cluster_seeds;

  bool via_sentinel() const { return !sentinels.empty(); }
  bool via_cluster() const { return !cluster_seeds.empty(); }
  std::string describe() const;  // for logs; never includes the password
};

// Accepts redis://[[user]:password@]host[:port][/db],
// unix:///path/to.sock[?db=N], a bare absolute socket path, and
// sentinel://[[user]:password@]host[:port],host[:port].../master[/db]
// [?sentinel_user=U&sentinel_password=P] (port 26379 by default; the
// credentials before '@' are the master's), and
// redis+cluster://[[user]:password@]host[:port],host[:port]... (seed nodes
// of a Redis Cluster, port 6379 by default). Error messages show the URL
// with its passwords replaced by "***".
Result<RedisAddress> parse_redis_url(std::string_view url);

}  // namespace dueq

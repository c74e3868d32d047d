#pragma once
#include <string>
#include <string_view>

#include "common/error.hpp"

namespace dueq {

struct RedisAddress {
  std::string host;         // empty when unix_path is set
  int port = 6379;
  std::string unix_path;    // set for unix sockets
  std::string user;         // ACL user; empty: the default user
  std::string password;     // empty: no AUTH
  int db = 0;

  std::string describe() const;  // for logs; never includes the password
};

// Accepts redis://[[user]:password@]host[:port][/db],
// unix:///path/to.sock[?db=N] and a bare absolute socket path. Error messages
// show the URL with its password replaced by "***".
Result<RedisAddress> parse_redis_url(std::string_view url);

}  // namespace dueq

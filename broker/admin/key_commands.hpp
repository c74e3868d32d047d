#pragma once
// The ADMIN operations on per-key limits (docs/keys.md): `dueq key limit`
// gives one key of a queue a limit of its own or takes it away
// (lua/key_limit.lua), `dueq key list` pages through the keys that hold
// turns now or have their own limit (lua/key_list.lua).
#include "broker/admin/admin_commands.hpp"

namespace dueq::broker {

enum class KeyLimitChange : int64_t { set = 1, too_many_keys = 2 };
struct KeyLimitOutcome {
  KeyLimitChange change = KeyLimitChange::set;
  int64_t previous = 0;  // the key's own limit before (0: none)
  int64_t running = 0;   // turns it holds now
};

struct KeyRow {
  std::string key;
  int64_t running = 0;
  int64_t own_limit = 0;  // 0: the queue's key_concurrency
  int64_t parked = 0;     // ready jobs waiting for a turn of the key
};
struct KeyPage {
  std::string next;  // HSCAN cursor, "0" when done
  std::vector<KeyRow> rows;
};

namespace calls {
// `limit` 0 clears the key's own limit.
Command key_limit(const std::string& queue, const std::string& key, int64_t limit);
Result<KeyLimitOutcome> parse_key_limit(const redisReply* reply);
Command key_list(const std::string& queue, bool limits, const std::string& cursor, int count);
Result<KeyPage> parse_key_list(const redisReply* reply);
}  // namespace calls

// args: key, limit (1..1000000, or "clear").
Result<proto::AdminReply> key_limit(AdminContext& c, const proto::AdminRequest& request);
// args: of ("running", the default, or "limits"), after (the `next` of the
// page before); `limit` rows at most (default 100, at most 1,000). Rows:
// key, running, waiting (jobs parked for a turn), limit.
Result<proto::AdminReply> key_list(AdminContext& c, const proto::AdminRequest& request);

}  // namespace dueq::broker

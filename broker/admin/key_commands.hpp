#pragma once
// The ADMIN operations on keys (docs/keys.md): `dueq key limit` and `dueq
// key weight` give one key of a queue a limit or a weight of its own or take
// it away (lua/key_limit.lua), `dueq key list` pages through the keys that
// hold turns now or have their own limit or weight (lua/key_list.lua).
#include "broker/admin/admin_commands.hpp"

namespace dueq::broker {

enum class KeyLimitChange : int64_t { set = 1, too_many_keys = 2 };
struct KeyLimitOutcome {
  KeyLimitChange change = KeyLimitChange::set;
  std::string previous;  // the key's own value before, as it was set ("": none)
  int64_t running = 0;   // turns it holds now
};

struct KeyRow {
  std::string key;
  int64_t running = 0;
  std::string own;        // its own limit, rate or weight as set; "": the queue's
  int64_t parked = 0;     // ready jobs waiting for a turn of the key
};
struct KeyPage {
  std::string next;  // HSCAN cursor, "0" when done
  std::vector<KeyRow> rows;
};

// What a key may have of its own: a limit (over key_concurrency), a rate
// limit (over key_rate) or a weight in fair dispatch.
enum class KeySetting { limit, rate, weight };

namespace calls {
// `value` "clear" clears the key's own.
Command key_limit(const std::string& queue, const std::string& key, const std::string& value,
                  KeySetting setting = KeySetting::limit);
Result<KeyLimitOutcome> parse_key_limit(const redisReply* reply);
// `listed`: which hash to page through; nullopt: the keys holding turns.
Command key_list(const std::string& queue, std::optional<KeySetting> listed, const std::string& cursor, int count);
Result<KeyPage> parse_key_list(const redisReply* reply);
}  // namespace calls

// args: key, limit (1..1000000, or "clear").
Result<proto::AdminReply> key_limit(AdminContext& c, const proto::AdminRequest& request);
// args: key, weight (1..1000, or "clear").
Result<proto::AdminReply> key_weight(AdminContext& c, const proto::AdminRequest& request);
// args: key, rate (jobs per second, 0.001..1000000, or "clear").
Result<proto::AdminReply> key_rate(AdminContext& c, const proto::AdminRequest& request);
// args: of ("running", the default, "limits", "rates" or "weights"), after
// (the `next` of the page before); `limit` rows at most (default 100, at
// most 1,000). Rows: key, running, waiting (jobs parked for a turn or a
// token), and limit (rate or weight with those).
Result<proto::AdminReply> key_list(AdminContext& c, const proto::AdminRequest& request);

}  // namespace dueq::broker

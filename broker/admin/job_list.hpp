#pragma once
// Browsing one queue's jobs by state (`dueq list`, the dashboard's /api/list):
// the ADMIN operation "list", on the admin thread in bounded steps.
//
// A state's jobs are read in score order (scheduled and ready: due time;
// running: lease deadline; done, dead, cancelled: finish time), ties by id,
// from a cursor: the score and id of the last job a page looked at. A page
// holds at most `limit` matching jobs and looks at most kListExamined jobs,
// so a filter that matches little costs pages with few rows and a `next`,
// never one unbounded call.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "broker/admin/admin_commands.hpp"

namespace dueq::broker {

inline constexpr uint32_t kListMaxLimit = 1'000;
inline constexpr size_t kListExamined = 20'000;

// Where a listing goes on: "SCORE:ID" (the reply's `next`).
struct ListCursor {
  int64_t score = 0;
  std::string id;
  std::string text() const;
  // "" is the start (nullopt). A malformed text is bad_argument.
  static Result<std::optional<ListCursor>> parse(std::string_view text);
};

// The request's filters, every one checked (bad_argument names the first bad one).
struct ListFilter {
  std::string state;  // scheduled, ready, running, done, dead, cancelled
  std::string type;   // "" = any
  int64_t since_ms = 0;
  int64_t until_ms = INT64_MAX;
  std::string error;      // a substring of the last error ("" = any)
  std::string id_prefix;  // "" = any
  std::optional<ListCursor> after;
  static Result<ListFilter> parse(const std::map<std::string, std::string>& args);
};

// One page of `queue`'s jobs in the filter's state after `cursor`: at most
// `limit` matching rows (listed_row: no payloads) and 4 MiB of them, at most
// `examine` jobs looked at; `next` is where the following page starts
// (nullopt: the state was read to its end).
struct ListPage {
  proto::AdminReply rows;
  std::optional<ListCursor> next;
  size_t examined = 0;
};
Result<ListPage> scan_jobs(RedisClient& redis, const std::string& queue, const ListFilter& filter,
                           std::optional<ListCursor> cursor, size_t limit, size_t examine);
// The rows of `ids` of `queue` as a listing shows them (listed_row),
// appended to `reply`; an id gone meanwhile is left out.
Result<void> append_job_rows(RedisClient& redis, const std::string& queue, const std::vector<std::string>& ids,
                             proto::AdminReply& reply);
// A valid name of a queue the store knows (bad_argument, not_found).
Result<void> check_list_queue(RedisClient& redis, const std::string& queue);
// A page's size as asked (0: 100), at most kListMaxLimit.
Result<size_t> page_limit(const proto::AdminRequest& request);

Result<proto::AdminReply> list_jobs(AdminContext& c, const proto::AdminRequest& request);

}  // namespace dueq::broker

#include "common/protocol.hpp"

#include <optional>
#include <fmt/format.h>

#include <set>

#include "common/names.hpp"

namespace dueq::proto {

namespace {

// Bounds msgpack's allocations on hostile input before any conversion runs.
// Strings may reach the frame size: an oversized payload is answered for its
// job alone (the broker rejects that job), not by failing its whole batch.
// Arrays of a frame read with the reply budget (a STATS_REPLY lists every
// queue, up to max_queues' 100,000) are bounded by that budget alone; with
// 20,000 elements at most, a broker's 20,001st queue made its stats reply
// unreadable and the request timed out.
msgpack::unpack_limit limits_for(size_t max_values) {
  const size_t array = max_values > kMaxFrameValues ? max_values : kMaxBatch * 2;
  return msgpack::unpack_limit(/*array=*/array, /*map=*/256, /*str=*/kMaxFrameBytes, /*bin=*/kMaxFrameBytes, /*ext=*/0,
                               /*depth=*/8);
}

std::unexpected<Error> bad(std::string message) { return fail(Errc::bad_frame, std::move(message)); }

// Counts the values a frame declares, array and map sizes as they are read,
// and stops the parse once they pass the budget: 16 MiB of nested nils would
// otherwise cost msgpack a second of allocations before any check runs.
struct ValueBudget : msgpack::null_visitor {
  explicit ValueBudget(size_t budget) : left(budget) {}
  bool take(size_t n) {
    if (n > left) {
      exceeded = true;
      return false;
    }
    left -= n;
    return true;
  }
  bool start_array(uint32_t elements) { return take(elements); }
  bool start_map(uint32_t pairs) { return take(2 * static_cast<size_t>(pairs)); }
  size_t left;
  bool exceeded = false;
};

Result<void> check_ref(const JobRef& ref) {
  if (auto ok = validate_queue_name(ref.queue); !ok) return ok;
  if (auto ok = validate_job_id(ref.id); !ok) return ok;
  if (ref.token == 0) return bad("job reference has token 0");
  return {};
}

Result<void> check_refs(const std::vector<JobRef>& refs) {
  if (refs.size() > kMaxBatch) return bad(fmt::format("{} job references exceed the batch limit {}", refs.size(), kMaxBatch));
  for (const auto& ref : refs)
    if (auto ok = check_ref(ref); !ok) return ok;
  return {};
}

Result<void> validate(const Hello& f) {
  if (f.worker_id.empty() || f.worker_id.size() > 128) return bad("hello needs a worker_id of 1..128 bytes");
  if (f.queues.empty() || f.queues.size() > 256) return bad("hello needs 1..256 queues");
  for (const auto& q : f.queues)
    if (auto ok = validate_queue_name(q); !ok) return ok;
  if (f.capacity == 0 || f.capacity > kMaxWorkerCapacity) return bad(fmt::format("hello capacity must be 1..{}", kMaxWorkerCapacity));
  if (f.host.size() > 255) return bad("hello host exceeds 255 bytes");
  if (!f.weights.empty() && f.weights.size() != f.queues.size()) return bad("hello weights: none, or one per queue");
  for (const uint32_t w : f.weights)
    if (w == 0 || w > Hello::kMaxWeight) return bad(fmt::format("hello weights must be 1..{}", Hello::kMaxWeight));
  return check_refs(f.held);
}

Result<void> validate(const Welcome& f) {
  if (f.heartbeat_ms == 0) return bad("welcome heartbeat_ms must be positive");
  return {};
}

Result<void> validate(const Task& f) {
  if (auto ok = validate_queue_name(f.queue); !ok) return ok;
  if (auto ok = validate_job_id(f.id); !ok) return ok;
  if (auto ok = validate_job_type(f.type); !ok) return ok;
  if (f.token == 0) return bad("task has token 0");
  if (f.payload.data.size() > kMaxPayloadBytes) return bad("task payload exceeds 1 MiB");
  if (static_cast<uint8_t>(f.start_check) > static_cast<uint8_t>(StartCheck::announce_alone))
    return bad("task start_check must be 0, 1 or 2");
  return {};
}

Result<void> validate(const Tasks& f) {
  if (f.items.empty()) return bad("tasks carries no tasks");
  if (f.seq == 0) return bad("tasks seq must be at least 1");
  if (f.items.size() > kMaxBatch) return bad(fmt::format("{} tasks exceed the batch limit {}", f.items.size(), kMaxBatch));
  for (const auto& task : f.items)
    if (auto ok = validate(task); !ok) return ok;
  return {};
}

Result<void> validate(const Heartbeat& f) {
  if (f.capacity > kMaxWorkerCapacity) return bad(fmt::format("heartbeat capacity must be at most {}", kMaxWorkerCapacity));
  return check_refs(f.held);
}

Result<void> validate(const Pong&) { return {}; }

Result<void> validate(const Received& f) {
  if (f.seq == 0) return bad("received seq must be at least 1");
  return {};
}

Result<void> validate(const Results& f) {
  if (f.items.size() > kMaxBatch) return bad("results batch exceeds the batch limit");
  for (const auto& item : f.items) {
    if (auto ok = check_ref(JobRef{item.queue, item.id, item.token}); !ok) return ok;
    if (const auto outcome = static_cast<uint8_t>(item.outcome); outcome > static_cast<uint8_t>(Outcome::expired))
      return bad(fmt::format("unknown outcome {}", outcome));
    if (item.snooze_ms < 0 || item.snooze_ms > JobResult::kMaxSnoozeMs)
      return bad("result snooze_ms must be 0..10 years");
    if (item.error.size() > kMaxErrorText) return bad("result error text exceeds 4096 bytes");
  }
  return {};
}

Result<void> validate(const Confirm& f) { return check_refs(f.items); }
Result<void> validate(const Starting& f) {
  if (f.items.empty()) return bad("starting names no jobs");
  return check_refs(f.items);
}
Result<void> validate(const StartReply& f) {
  if (f.go.size() + f.drop.size() > kMaxBatch) return bad("start_reply exceeds the batch limit");
  if (auto ok = check_refs(f.go); !ok) return ok;
  return check_refs(f.drop);
}
Result<void> validate(const Cancel& f) { return check_ref(f.job); }
Result<void> validate(const Bye& f) { return check_refs(f.unstarted); }
Result<void> validate(const Progress& f) {
  if (f.items.empty()) return bad("progress names no jobs");
  if (f.items.size() > kMaxBatch) return bad("progress exceeds the batch limit");
  for (const auto& item : f.items) {
    if (auto ok = check_ref(JobRef{item.queue, item.id, item.token}); !ok) return ok;
    if (item.percent > ProgressItem::kMaxPercent) return bad(fmt::format("progress percent {} is over 100", item.percent));
    if (item.text.data.size() > ProgressItem::kMaxTextBytes)
      return bad(fmt::format("progress text exceeds {} bytes", ProgressItem::kMaxTextBytes));
  }
  return {};
}
Result<void> validate(const HandBack& f) {
  if (f.unstarted.empty()) return bad("hand_back names no jobs");
  return check_refs(f.unstarted);
}

Result<void> validate(const Enqueue& f) {
  if (f.jobs.empty()) return bad("enqueue carries no jobs");
  if (f.jobs.size() > kMaxBatch) return bad(fmt::format("enqueue of {} jobs exceeds the batch limit {}", f.jobs.size(), kMaxBatch));
  // Per-job problems are answered per job (rejected with a reason), so one bad
  // job does not fail its batch; see the broker's enqueue handler.
  return {};
}

Result<void> validate(const EnqueueReply&) { return {}; }

Result<void> validate(const GroupEnqueue& f) {
  if (auto ok = validate_queue_name(f.queue); !ok) return ok;
  if (f.jobs.size() > GroupEnqueue::kMaxJobs)
    return bad(fmt::format("group_enqueue of {} jobs exceeds the limit {}", f.jobs.size(), GroupEnqueue::kMaxJobs));
  if ((f.batch == BatchAction::none) != f.batch_id.empty() || f.batch_id.size() > GroupEnqueue::kMaxBatchIdBytes)
    return bad("a batch id (1..128 bytes) goes with a batch action open or add, and only with one");
  if (f.close && f.batch == BatchAction::none) return bad("close needs a batch");
  if (f.jobs.empty() && f.batch == BatchAction::none) return bad("group_enqueue carries no jobs (only a batch's open or close may)");
  if (f.jobs.empty() && f.batch == BatchAction::add && !f.close) return bad("an add to a batch carries jobs, or closes it");
  return {};
}

Result<void> validate(const GroupEnqueueReply&) { return {}; }
Result<void> validate(const StatsRequest&) { return {}; }
Result<void> validate(const StatsReply&) { return {}; }

Result<void> validate(const JobRequest& f) {
  if (auto ok = validate_job_id(f.id); !ok) return ok;
  if (!f.queue.empty())
    if (auto ok = validate_queue_name(f.queue); !ok) return ok;
  return {};
}

Result<void> validate(const JobReply&) { return {}; }

Result<void> validate(const WaitRequest& f) {
  if (auto ok = validate_queue_name(f.queue); !ok) return ok;
  if (auto ok = validate_job_id(f.id); !ok) return ok;
  if (f.timeout_ms < 0 || f.timeout_ms > WaitRequest::kMaxTimeoutMs) return bad("wait timeout_ms must be 0..60000");
  return {};
}

Result<void> validate(const WaitReply& f) {
  static const std::set<std::string> kStates = {"done", "dead", "cancelled", "pending", "unknown"};
  if (!kStates.contains(f.state)) return bad("unknown wait state '" + f.state + "'");
  return {};
}

Result<void> validate(const AdminRequest& f) {
  static const std::set<std::string> kOps = {"cancel", "dead_list", "replay", "purge", "audit", "scheduled", "pause",
                                             "resume", "cron_add", "cron_list", "cron_remove", "workers", "list", "search", "queue_delete",
                                             "bulk", "bulk_status", "key_limit", "key_rate", "key_weight", "key_list",
                                             "job_reschedule", "job_edit", "batch_close", "group"};
  if (!kOps.contains(f.op))
    return bad("unknown admin op '" + f.op + "' (cancel, dead_list, replay, purge, audit, scheduled, pause, resume, "
               "cron_add, cron_list, cron_remove, workers, list, search, queue_delete, bulk, bulk_status, key_limit, "
               "key_rate, key_weight, key_list, job_reschedule, job_edit, batch_close, group)");
  if (f.args.size() > 16) return bad("at most 16 args");
  // job_edit's payload may be as big as an enqueued one.
  for (const auto& [k, v] : f.args)
    if (k.size() > 64 || v.size() > (k == "payload" ? kMaxPayloadBytes : 65'536))
      return bad("an arg name is at most 64 bytes, its value 64 KiB (a payload 1 MiB)");
  if (!f.queue.empty())
    if (auto ok = validate_queue_name(f.queue); !ok) return ok;
  if ((f.op == "pause" || f.op == "resume" || f.op == "scheduled" || f.op == "list" || f.op == "search" || f.op == "queue_delete" || f.op == "bulk" || f.op == "key_limit" || f.op == "key_rate" || f.op == "key_weight" || f.op == "key_list" || f.op == "batch_close" || f.op == "group") && f.queue.empty()) return bad(f.op + " needs a queue");
  if (f.ids.size() > 1000) return bad("at most 1000 ids per admin request");
  for (const auto& id : f.ids)
    if (auto ok = validate_job_id(id); !ok) return ok;
  if (f.older_than_ms < 0) return bad("older_than_ms must not be negative");
  return {};
}

Result<void> validate(const AdminReply&) { return {}; }
Result<void> validate(const ErrorFrame&) { return {}; }

template <typename T>
Result<Frame> convert_body(const msgpack::object& body) {
  if (body.type != msgpack::type::ARRAY) return bad(fmt::format("{} body must be an array", type_name(T::kType)));
  T value;
  try {
    body.convert(value);
  } catch (const detail::MissingFields& e) {
    return bad(fmt::format("{} frame: {}", type_name(T::kType), e.what()));
  }
  if (auto ok = validate(value); !ok) {
    auto e = ok.error();
    e.code = Errc::bad_frame;
    return std::unexpected(e);
  }
  return Frame{std::move(value)};
}

}  // namespace

Result<void> validate(const Frame& frame) {
  return std::visit([](const auto& f) { return validate(f); }, frame);
}

const char* type_name(Type type) {
  switch (type) {
    case Type::hello: return "hello";
    case Type::welcome: return "welcome";
    case Type::tasks: return "tasks";
    case Type::received: return "received";
    case Type::heartbeat: return "heartbeat";
    case Type::pong: return "pong";
    case Type::results: return "results";
    case Type::confirm: return "confirm";
    case Type::bye: return "bye";
    case Type::cancel: return "cancel";
    case Type::admin_request: return "admin_request";
    case Type::admin_reply: return "admin_reply";
    case Type::enqueue: return "enqueue";
    case Type::enqueue_reply: return "enqueue_reply";
    case Type::stats_request: return "stats_request";
    case Type::stats_reply: return "stats_reply";
    case Type::job_request: return "job_request";
    case Type::job_reply: return "job_reply";
    case Type::error: return "error";
    case Type::starting: return "starting";
    case Type::start_reply: return "start_reply";
    case Type::hand_back: return "hand_back";
    case Type::wait: return "wait";
    case Type::wait_reply: return "wait_reply";
    case Type::progress: return "progress";
    case Type::group_enqueue: return "group_enqueue";
    case Type::group_enqueue_reply: return "group_enqueue_reply";
  }
  return "unknown";
}

// Hand-read rather than through msgpack::unpack, which would parse the
// whole of a frame already refused (up to 16 MiB) to find one integer.
uint64_t peek_request_id(std::string_view bytes) {
  size_t at = 0;
  auto byte = [&](size_t i) { return static_cast<uint8_t>(bytes[i]); };
  // A msgpack unsigned integer at `at`, moved past; nullopt if none.
  auto read_uint = [&]() -> std::optional<uint64_t> {
    if (at >= bytes.size()) return std::nullopt;
    const uint8_t head = byte(at++);
    if (head <= 0x7f) return head;
    size_t width = head == 0xcc ? 1 : head == 0xcd ? 2 : head == 0xce ? 4 : head == 0xcf ? 8 : 0;
    if (width == 0 || at + width > bytes.size()) return std::nullopt;
    uint64_t value = 0;
    for (size_t i = 0; i < width; ++i) value = (value << 8) | byte(at++);
    return value;
  };
  if (bytes.empty() || byte(at++) != 0x93) return 0;  // fixarray of 3
  auto version = read_uint();
  auto type = read_uint();
  if (!version || *version != kVersion || !type) return 0;
  switch (static_cast<Type>(*type)) {
    case Type::enqueue:
    case Type::stats_request:
    case Type::job_request:
    case Type::wait:
    case Type::admin_request: break;
    default: return 0;
  }
  if (at >= bytes.size()) return 0;
  const uint8_t body = byte(at++);
  if (body >= 0x91 && body <= 0x9f) {
  } else if (body == 0xdc && at + 2 <= bytes.size()) {
    at += 2;
  } else if (body == 0xdd && at + 4 <= bytes.size()) {
    at += 4;
  } else {
    return 0;
  }
  return read_uint().value_or(0);
}

Result<Frame> decode(std::string_view bytes, size_t max_values) {
  if (bytes.empty()) return bad("empty frame");
  if (bytes.size() > kMaxFrameBytes) return bad(fmt::format("frame of {} bytes exceeds the {} byte limit", bytes.size(), kMaxFrameBytes));
  try {
    size_t offset = 0;
    // Every value takes at least a byte: a frame no longer than the budget
    // cannot pass it (most frames), and needs no counting pass.
    if (bytes.size() > max_values) {
      ValueBudget budget(max_values);
      if (!msgpack::parse(bytes.data(), bytes.size(), offset, budget) && budget.exceeded)
        return bad(fmt::format("frame holds more than {} values", max_values));
      offset = 0;
    }
    msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size(), offset, nullptr, nullptr, limits_for(max_values));
    if (offset != bytes.size()) return bad("trailing bytes after the frame");
    const msgpack::object& root = handle.get();
    if (root.type != msgpack::type::ARRAY || root.via.array.size != 3) return bad("frame must be an array [version, type, body]");
    const msgpack::object& version = root.via.array.ptr[0];
    if (version.type != msgpack::type::POSITIVE_INTEGER) return bad("frame version must be a positive integer");
    if (version.via.u64 != kVersion) return bad(fmt::format("unsupported protocol version {} (this peer speaks {})", version.via.u64, kVersion));
    const msgpack::object& type = root.via.array.ptr[1];
    if (type.type != msgpack::type::POSITIVE_INTEGER || type.via.u64 > 255) return bad("frame type must be an integer 0..255");
    const msgpack::object& body = root.via.array.ptr[2];
    switch (static_cast<Type>(type.via.u64)) {
      case Type::hello: return convert_body<Hello>(body);
      case Type::welcome: return convert_body<Welcome>(body);
      case Type::tasks: return convert_body<Tasks>(body);
      case Type::received: return convert_body<Received>(body);
      case Type::heartbeat: return convert_body<Heartbeat>(body);
      case Type::pong: return convert_body<Pong>(body);
      case Type::results: return convert_body<Results>(body);
      case Type::confirm: return convert_body<Confirm>(body);
      case Type::bye: return convert_body<Bye>(body);
      case Type::cancel: return convert_body<Cancel>(body);
      case Type::admin_request: return convert_body<AdminRequest>(body);
      case Type::admin_reply: return convert_body<AdminReply>(body);
      case Type::enqueue: return convert_body<Enqueue>(body);
      case Type::enqueue_reply: return convert_body<EnqueueReply>(body);
      case Type::stats_request: return convert_body<StatsRequest>(body);
      case Type::stats_reply: return convert_body<StatsReply>(body);
      case Type::job_request: return convert_body<JobRequest>(body);
      case Type::job_reply: return convert_body<JobReply>(body);
      case Type::error: return convert_body<ErrorFrame>(body);
      case Type::starting: return convert_body<Starting>(body);
      case Type::start_reply: return convert_body<StartReply>(body);
      case Type::hand_back: return convert_body<HandBack>(body);
      case Type::wait: return convert_body<WaitRequest>(body);
      case Type::wait_reply: return convert_body<WaitReply>(body);
      case Type::progress: return convert_body<Progress>(body);
      case Type::group_enqueue: return convert_body<GroupEnqueue>(body);
      case Type::group_enqueue_reply: return convert_body<GroupEnqueueReply>(body);
    }
    return bad(fmt::format("unknown frame type {}", type.via.u64));
  } catch (const msgpack::type_error&) {
    return bad("a field has the wrong msgpack type");
  } catch (const std::exception& e) {
    return bad(std::string("undecodable msgpack: ") + e.what());
  }
}

}  // namespace dueq::proto

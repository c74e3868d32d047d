#pragma once
// What the client's calls share (clients/cpp/client.cpp, clients/cpp/groups.cpp):
// its connection, and a request's round trip as a future.
#include <future>
#include <memory>
#include <string>

#include "clients/cpp/connection.hpp"
#include "common/ids.hpp"
#include "common/protocol.hpp"
#include "dueq/client.hpp"

namespace dueq {

using client::Completion;
using client::FrameResult;

struct Client::Impl {
  Impl(const std::string& endpoints, ClientOptions options) : timeout_ms(options.timeout_ms), connection(endpoints, std::move(options)) {}
  int64_t timeout_ms;  // per attempt
  client::Connection connection;
};

namespace client {

inline ClientError unexpected_reply(const std::string& what) { return ClientError{"bad_frame", "unexpected reply to " + what, 0}; }

// The future of a call that answers through a callback.
template <typename T, typename Call>
std::future<std::expected<T, ClientError>> as_future(Call call) {
  auto promise = std::make_shared<std::promise<std::expected<T, ClientError>>>();
  auto future = promise->get_future();
  call([promise](std::expected<T, ClientError> result) { promise->set_value(std::move(result)); });
  return future;
}

// Sends `request`; the future holds what `convert` makes of the reply
// frame (run on the I/O thread) or the error.
template <typename T, typename Request, typename Convert>
std::future<std::expected<T, ClientError>> ask(client::Connection& connection, Request request, Convert convert) {
  return as_future<T>([&](auto on_done) {
    connection.submit(std::move(request), [on_done = std::move(on_done), convert = std::move(convert)](FrameResult frame) {
      on_done(frame ? convert(std::move(*frame)) : std::unexpected(std::move(frame.error())));
    });
  });
}

// The job as the protocol carries it; an id is made when it has none.
inline proto::NewJob new_job(JobSpec&& job) {
  if (job.id.empty()) job.id = new_job_id();
  return proto::NewJob{std::move(job.queue), std::move(job.id), std::move(job.type),
                       proto::Bytes{std::move(job.payload)}, job.due_ms, job.max_attempts,
                       job.backoff_base_ms, job.backoff_cap_ms, proto::Bytes{std::move(job.key)},
                       proto::Bytes{std::move(job.unique_key)},
                       static_cast<proto::UniqueUntil>(job.unique_until), job.unique_for_ms,
                       job.start_by_ms, std::move(job.traceparent), std::move(job.tracestate)};
}

inline ClientError blocking_from_callback(const std::string& what) {
  return ClientError{"bad_argument", what + ": a blocking call from a completion callback (the client's I/O thread) "
                                            "would wait forever; use the *_async calls there", 0};
}

}  // namespace client
}  // namespace dueq

#pragma once
// Runs a job by POSTing it to an HTTP(S) endpoint (`dueq-worker --exec
// 'TYPE=https://host/path'`): the payload is the body, the job's id,
// attempt, due time, queue, type and fencing token are headers; a 2xx
// answer is done; a 429 or 503 with a Retry-After header (seconds, or an
// HTTP date) snoozes the job that long (no attempt used); anything else
// fails the attempt with the status and the tail of the body. cpp-httplib (Debian's libcpp-httplib-dev, built with
// OpenSSL) makes the requests; TLS verifies the server against the system's
// CA store, or against `ca_file`. Each handler thread keeps its connection
// to the endpoint open between jobs.
#include <cstdint>
#include <optional>
#include <string>

#include "common/error.hpp"
#include "dueq/worker.hpp"

namespace dueq {

// http:// or https://, a host, an optional port and path.
bool is_http_target(std::string_view command);
Result<void> validate_http_target(std::string_view url);

// A Retry-After value (RFC 9110 §10.2.3: delay-seconds, or an IMF-fixdate
// such as "Wed, 21 Oct 2026 07:28:00 GMT") as a delay from `now_ms`;
// nullopt when it is neither.
std::optional<int64_t> retry_after_ms(std::string_view value, int64_t now_ms);

// `timeout_ms`: the whole request, connect to last byte of the answer.
Handler make_http_handler(std::string url, int64_t timeout_ms, std::string ca_file);

}  // namespace dueq

#include "worker/http_handler.hpp"

#include <fmt/format.h>
#include <httplib.h>

#include <date/date.h>

#include <charconv>
#include <chrono>
#include <map>
#include <memory>
#include <sstream>

#include "common/clock.hpp"

namespace dueq {

namespace {

constexpr size_t kBodyTail = 2048;

struct Target {
  std::string origin;  // scheme://host[:port]
  std::string path;
};

Result<Target> split(std::string_view url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return fail(Errc::bad_argument, "expected http:// or https://");
  const std::string_view scheme = url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") return fail(Errc::bad_argument, "expected http:// or https://");
  const size_t host_start = scheme_end + 3;
  const size_t path_start = url.find('/', host_start);
  const std::string_view host = url.substr(host_start, path_start == std::string_view::npos ? url.npos : path_start - host_start);
  if (host.empty() || host.size() > 255) return fail(Errc::bad_argument, "no host");
  for (char c : host)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' || c == '[' || c == ']'))
      return fail(Errc::bad_argument, fmt::format("bad character '{}' in the host", c));
  Target t{std::string(url.substr(0, path_start)), path_start == std::string_view::npos ? "/" : std::string(url.substr(path_start))};
  for (char c : t.path)
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) return fail(Errc::bad_argument, "spaces or control characters in the path");
  return t;
}

std::string tail(const std::string& body) {
  std::string out = body.size() > kBodyTail ? body.substr(body.size() - kBodyTail) : body;
  for (auto& c : out)
    if (static_cast<unsigned char>(c) < ' ' && c != '\n') c = ' ';
  return out;
}

}  // namespace

std::optional<int64_t> retry_after_ms(std::string_view value, int64_t now_ms) {
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
  if (value.empty() || value.size() > 64) return std::nullopt;
  if (std::isdigit(static_cast<unsigned char>(value.front()))) {
    int64_t seconds = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
    if (ec != std::errc() || end != value.data() + value.size() || seconds > 10LL * 366 * 86'400) return std::nullopt;
    return seconds * 1000;
  }
  std::istringstream in{std::string(value)};
  date::sys_seconds at;
  in >> date::parse("%a, %d %b %Y %H:%M:%S GMT", at);
  if (in.fail()) return std::nullopt;
  return std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count() - now_ms);
}

bool is_http_target(std::string_view command) { return command.starts_with("http://") || command.starts_with("https://"); }

Result<void> validate_http_target(std::string_view url) {
  auto t = split(url);
  if (!t) return fail(Errc::bad_argument, fmt::format("'{}': {}", url, t.error().message));
  return {};
}

Handler make_http_handler(std::string url, int64_t timeout_ms, std::string ca_file) {
  auto target = split(url);
  if (!target) throw std::invalid_argument(target.error().message);
  return [url = std::move(url), target = std::move(*target), timeout_ms, ca_file = std::move(ca_file)](const Job& job) {
    // One client, and so one kept-alive connection, per handler thread.
    thread_local std::map<std::string, std::unique_ptr<httplib::Client>> clients;
    auto& client = clients[target.origin];
    if (!client) {
      client = std::make_unique<httplib::Client>(target.origin);
      client->set_keep_alive(true);
      client->set_tcp_nodelay(true);  // headers and body go in separate writes: no wait for a delayed ACK
      client->enable_server_certificate_verification(true);
      if (!ca_file.empty()) client->set_ca_cert_path(ca_file.c_str());
    }
    const auto timeout = std::chrono::milliseconds(timeout_ms);
    client->set_connection_timeout(timeout);
    client->set_read_timeout(timeout);
    client->set_write_timeout(timeout);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    httplib::Request request;
    request.method = "POST";
    request.path = target.path;
    request.headers = {{"Content-Type", "application/octet-stream"},
                       {"Dueq-Job-Id", job.id},
                       {"Dueq-Attempt", std::to_string(job.attempt)},
                       {"Dueq-Max-Attempts", std::to_string(job.max_attempts)},
                       {"Dueq-Due-At-Ms", std::to_string(job.due_ms)},
                       {"Dueq-Queue", job.queue},
                       {"Dueq-Job-Type", job.type},
                       {"Dueq-Token", fmt::format("{:016x}", job.token)}};
    // The job's W3C trace context: the server's tracing library continues
    // the producer's trace as it would any incoming request's.
    if (!job.traceparent.empty()) request.headers.emplace("traceparent", job.traceparent);
    if (!job.tracestate.empty()) request.headers.emplace("tracestate", job.tracestate);
    request.body = job.payload;
    // Called as the answer arrives: a server that trickles bytes is cut off
    // at the deadline too (the read timeout alone allows that much per read).
    bool timed_out = false;
    request.progress = [&](uint64_t, uint64_t) {
      timed_out = std::chrono::steady_clock::now() > deadline;
      return !timed_out && !(job.cancelled != nullptr && job.cancelled->load());
    };
    auto result = client->send(request);
    if (!result) {
      client.reset();  // a new connection next time
      const bool over = timed_out || std::chrono::steady_clock::now() >= deadline;
      if (job.cancelled != nullptr && job.cancelled->load()) return HandlerResult::failed("cancelled");
      return HandlerResult::failed(over ? fmt::format("POST {}: timed out after {} ms", url, timeout_ms)
                                        : fmt::format("POST {}: {}", url, httplib::to_string(result.error())));
    }
    if (result->status >= 200 && result->status < 300) return HandlerResult::done();
    if ((result->status == 429 || result->status == 503) && result->has_header("Retry-After")) {
      if (auto delay = retry_after_ms(result->get_header_value("Retry-After"), wall_ms()))
        return HandlerResult::snooze(std::chrono::milliseconds(*delay),
                                     fmt::format("HTTP {} Retry-After {}", result->status, result->get_header_value("Retry-After")));
    }
    return HandlerResult::failed(fmt::format("HTTP {}: {}", result->status, tail(result->body)));
  };
}

}  // namespace dueq

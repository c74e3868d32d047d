#include "broker/http/http_server.hpp"

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "broker/config/config.hpp"
#include "common/clock.hpp"
#include "common/json_bytes.hpp"

namespace dueq::broker {

namespace {

// httplib's own pool queues every accepted connection without limit.
class BoundedTaskQueue final : public httplib::TaskQueue {
 public:
  BoundedTaskQueue(size_t threads, size_t max_queued) : max_queued_(max_queued) {
    for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
  }
  void enqueue(std::function<void()> fn) override {
    {
      std::unique_lock lock(mutex_);
      if (jobs_.size() < max_queued_) {
        jobs_.push_back(std::move(fn));
        wake_.notify_one();
        return;
      }
    }
    fn();  // full: served here, so no more connections are accepted meanwhile
  }
  void shutdown() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  void work() {
    while (true) {
      std::function<void()> fn;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      fn();
    }
  }

  const size_t max_queued_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

HttpServer::HttpServer(Metrics& metrics, Dashboard* dashboard) : metrics_(metrics), dashboard_(dashboard) {
  server_.new_task_queue = [] { return new BoundedTaskQueue(kThreads, kMaxQueued); };
  server_.set_read_timeout(kTimeoutS, 0);
  server_.set_write_timeout(kTimeoutS, 0);
  // One request per connection: an idle keep-alive connection holds one of
  // the few threads (a browser keeps several open), which starved the
  // dashboard's other requests for seconds.
  server_.set_keep_alive_max_count(1);
  server_.set_payload_max_length(kMaxBodyBytes);
  routes();
}

void HttpServer::routes() {
  // A handler that throws answers 500 with the reason in JSON (its text
  // through bytes_json); the thread goes on serving.
  server_.set_exception_handler([](const httplib::Request&, httplib::Response& res, const std::exception_ptr& error) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    res.status = 500;
    res.set_content(dump_json({{"error", "internal"}, {"message", bytes_json(what)}}), "application/json");
  });
  if (dashboard_ != nullptr) dashboard_->add_routes(server_);
  server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.prometheus_text(), "text/plain; version=0.0.4; charset=utf-8");
  });
  // Alive: the event loop publishes (every second while it leads, every
  // 100 ms standing by, at every try while it waits for Redis at start);
  // a stalled loop stops doing so.
  server_.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    const int64_t age = wall_ms() - metrics_.latest()->taken_ms;
    if (age > kStallMs) {
      res.status = 503;
      res.set_content(fmt::format("event loop silent for {} ms\n", age), "text/plain");
      return;
    }
    res.set_content("ok\n", "text/plain");
  });
  // Ready to serve workers and producers: leading, with Redis connected
  // (the connect loads the scripts).
  server_.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    const auto snapshot = metrics_.latest();
    std::string why;
    if (wall_ms() - snapshot->taken_ms > kStallMs) why = "event loop silent";
    else if (!metrics_.redis_up()) why = "Redis unreachable";
    else if (!metrics_.leading()) why = "standing by: another broker leads";
    res.status = why.empty() ? 200 : 503;
    res.set_content(why.empty() ? "ready\n" : why + "\n", "text/plain");
  });
}

Result<void> HttpServer::start(const std::string& address) {
  auto parsed = parse_http_address(address);
  if (!parsed) return std::unexpected(parsed.error());
  const auto& [host, port] = *parsed;
  // The server itself listens on loopback; clients reach it through the
  // front, which hands it whole requests only.
  const int backend_port = server_.bind_to_any_port("127.0.0.1");
  if (backend_port <= 0) return fail(Errc::internal, "http: cannot listen on a loopback port");
  thread_ = std::thread([this] { server_.listen_after_bind(); });
  auto front_port = front_.start(host, port, backend_port, kMaxBodyBytes);
  if (!front_port) {
    stop();
    return std::unexpected(front_port.error());
  }
  port_ = *front_port;
  spdlog::info("HTTP on {}:{} (the dashboard at /, /metrics, /healthz, /readyz)", host, port_);
  return {};
}

void HttpServer::stop() {
  front_.stop();
  server_.stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace dueq::broker

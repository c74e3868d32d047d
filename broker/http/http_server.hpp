#pragma once
// The broker's HTTP server (cpp-httplib): /metrics in Prometheus's text
// format, /healthz and /readyz. It runs on threads of its own and reads only
// the published metrics snapshot, so a slow or hostile client costs the
// event loop nothing. Clients reach it through HttpFront, which reads each
// request whole, within its deadline, before the server sees it (a slow
// client holds no server thread). What a client can make it spend is
// bounded: HttpFront's connections and deadlines, then kThreads requests
// at a time, kMaxQueued whole requests waiting, kTimeoutS per write of an
// answer to the front, kMaxBodyBytes of body.
#include <httplib.h>

#include <string>
#include <thread>

#include "broker/http/dashboard.hpp"
#include "broker/http/http_front.hpp"
#include "broker/loop/metrics.hpp"
#include "common/error.hpp"

namespace dueq::broker {

class HttpServer {
 public:
  static constexpr size_t kThreads = 4;
  static constexpr size_t kMaxQueued = 32;
  static constexpr time_t kTimeoutS = 5;
  static constexpr size_t kMaxBodyBytes = size_t{64} * 1024;
  // /healthz fails when the event loop published nothing for this long.
  static constexpr int64_t kStallMs = 10'000;

  // `dashboard`: its page and JSON are served too (nullptr: none).
  HttpServer(Metrics& metrics, Dashboard* dashboard);
  ~HttpServer() { stop(); }
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds "[host]:port" (port 0: any free one) and serves on a thread.
  Result<void> start(const std::string& address);
  void stop();
  int port() const { return port_; }

 private:
  void routes();

  Metrics& metrics_;
  Dashboard* dashboard_;
  httplib::Server server_;
  HttpFront front_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace dueq::broker

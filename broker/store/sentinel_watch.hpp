#pragma once
// Behind sentinels: a thread subscribed to `+switch-master` on one sentinel
// at a time (the next one when it is lost), so that the event loop leaves a
// master the moment the sentinels announce its successor, rather than at its
// next failed call. The loop polls ready_fd() and reconnects, asking the
// sentinels again.
#include <string>

#include "common/background_thread.hpp"
#include "common/redis_url.hpp"
#include "common/unique_fd.hpp"

namespace dueq::broker {

class SentinelWatch {
 public:
  explicit SentinelWatch(RedisAddress address);
  ~SentinelWatch() { stop(); }

  void start() { thread_.start([this] { run(); }); }
  void stop() { thread_.stop(); }

  // Readable once an announcement for this master arrived.
  int ready_fd() const { return ready_.get(); }
  // Event loop: the announcement ("old-host old-port new-host new-port"),
  // once; empty when none arrived.
  std::string take_announcement();

 private:
  void run();
  // Subscribes on one sentinel and reads until it is lost or stop().
  void watch(const HostPort& sentinel);

  RedisAddress address_;
  BackgroundThread thread_;
  UniqueFd ready_;
  std::string announcement_;  // guarded by thread_.mutex()
};

}  // namespace dueq::broker

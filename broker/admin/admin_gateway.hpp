#pragma once
// How the dashboard's HTTP threads reach the leading broker's admin thread
// (broker/admin/admin.hpp): the broker attaches its Admin while it leads and
// detaches it before the Admin goes; a call meanwhile answers "not leading".
#include <chrono>
#include <mutex>

#include "broker/admin/admin.hpp"

namespace dueq::broker {

class AdminGateway {
 public:
  void attach(Admin* admin) {
    std::lock_guard lock(mutex_);
    admin_ = admin;
  }
  void detach() { attach(nullptr); }

  // From an HTTP thread: runs `request` on the admin thread and waits up to
  // `timeout` for its answer (an ErrorFrame when there is none).
  Admin::AnswerFrame call(Admin::Request request, std::chrono::milliseconds timeout);

 private:
  std::mutex mutex_;
  Admin* admin_ = nullptr;
};

}  // namespace dueq::broker

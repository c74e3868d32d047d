#include "broker/admin/admin_gateway.hpp"

#include <future>
#include <memory>

namespace dueq::broker {

Admin::AnswerFrame AdminGateway::call(Admin::Request request, std::chrono::milliseconds timeout) {
  // Shared with the callback: an Admin that goes with the request unanswered
  // drops it, which breaks the promise instead of leaving the wait to time out.
  auto answer = std::make_shared<std::promise<Admin::AnswerFrame>>();
  auto future = answer->get_future();
  {
    std::lock_guard lock(mutex_);
    if (admin_ == nullptr) return proto::ErrorFrame{0, "not_leader", "this broker does not lead now", 1000};
    if (!admin_->submit_local(std::move(request), [answer](Admin::AnswerFrame frame) { answer->set_value(std::move(frame)); }))
      return proto::ErrorFrame{0, "overloaded", "the dashboard's requests are queued already; retry", 1000};
  }
  try {
    if (future.wait_for(timeout) == std::future_status::ready) return future.get();
  } catch (const std::future_error&) {
    return proto::ErrorFrame{0, "unavailable", "the broker stopped leading before it answered", 1000};
  }
  return proto::ErrorFrame{0, "timeout", "no answer from the admin thread in time; retry", 1000};
}

}  // namespace dueq::broker

#include "common/broker_endpoints.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace dueq {

Result<BrokerEndpoints> BrokerEndpoints::parse(std::string_view list) {
  std::vector<std::string> endpoints;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    const std::string_view one = list.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (one.empty()) return fail(Errc::bad_argument, fmt::format("broker endpoints '{}': an endpoint is empty", list));
    if (!(one.starts_with("tcp://") || one.starts_with("ipc://") || one.starts_with("inproc://")) ||
        one.find_first_of(" \t") != std::string_view::npos)
      return fail(Errc::bad_argument,
                  fmt::format("broker endpoint '{}': expected tcp://HOST:PORT (or ipc://, inproc://), several "
                              "separated by commas",
                              one));
    if (std::find(endpoints.begin(), endpoints.end(), one) != endpoints.end())
      return fail(Errc::bad_argument, fmt::format("broker endpoint '{}' is named twice", one));
    endpoints.emplace_back(one);
    if (endpoints.size() > kMaxEndpoints)
      return fail(Errc::bad_argument, fmt::format("at most {} broker endpoints", kMaxEndpoints));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return BrokerEndpoints(std::move(endpoints));
}

bool BrokerEndpoints::next() {
  at_ = (at_ + 1) % endpoints_.size();
  return at_ == 0;
}

bool BrokerEndpoints::learn_leader_from(std::string_view message) {
  constexpr std::string_view kSays = "the leader is at ";
  const size_t at = message.find(kSays);
  if (at == std::string_view::npos) return false;
  std::string_view leader = message.substr(at + kSays.size());
  leader = leader.substr(0, leader.find_first_of(" ;,\t\n"));
  if (leader.find("://*:") != std::string_view::npos || leader.find("://0.0.0.0:") != std::string_view::npos) return false;
  auto one = parse(leader);
  if (!one || endpoints_.size() >= kMaxEndpoints ||
      std::find(endpoints_.begin(), endpoints_.end(), one->current()) != endpoints_.end())
    return false;
  endpoints_.push_back(one->current());
  return true;
}

std::string BrokerEndpoints::describe() const { return fmt::format("{}", fmt::join(endpoints_, ",")); }

}  // namespace dueq

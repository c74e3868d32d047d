#include "broker/store/cluster_slots.hpp"

#include <charconv>

namespace dueq::broker {

namespace {

// The CCITT polynomial 0x1021, initial value 0, as the cluster
// specification gives it (a bit at a time: keys are short).
uint16_t crc16(std::string_view bytes) {
  uint16_t crc = 0;
  for (const unsigned char byte : bytes) {
    crc = static_cast<uint16_t>(crc ^ (byte << 8));
    for (int bit = 0; bit < 8; ++bit)
      crc = static_cast<uint16_t>((crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1);
  }
  return crc;
}

std::optional<int64_t> integer(const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_INTEGER) return std::nullopt;
  return r->integer;
}

std::optional<uint32_t> parse_number(std::string_view text, uint32_t max) {
  uint32_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value > max) return std::nullopt;
  return value;
}

}  // namespace

uint32_t key_slot(std::string_view key) {
  if (const auto open = key.find('{'); open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return crc16(key) % kClusterSlots;
}

Result<std::vector<SlotRange>> parse_cluster_slots(const redisReply* reply, const HostPort& asked) {
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY)
    return fail(Errc::internal, "CLUSTER SLOTS: not an array (is this node in cluster mode?)");
  std::vector<SlotRange> ranges;
  for (size_t i = 0; i < reply->elements; ++i) {
    const redisReply* range = reply->element[i];
    if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) return fail(Errc::internal, "CLUSTER SLOTS: a bad range");
    const auto first = integer(range->element[0]);
    const auto last = integer(range->element[1]);
    const redisReply* master = range->element[2];
    if (!first || !last || *first < 0 || *last < *first || *last >= kClusterSlots)
      return fail(Errc::internal, "CLUSTER SLOTS: a slot range out of bounds");
    if (master->type != REDIS_REPLY_ARRAY || master->elements < 2 || master->element[0]->type != REDIS_REPLY_STRING)
      return fail(Errc::internal, "CLUSTER SLOTS: a bad master entry");
    const auto port = integer(master->element[1]);
    if (!port || *port < 1 || *port > 65535) return fail(Errc::internal, "CLUSTER SLOTS: a bad master port");
    std::string host(master->element[0]->str, master->element[0]->len);
    if (host.empty()) host = asked.host;
    if (host.empty() || host.size() > 255) return fail(Errc::internal, "CLUSTER SLOTS: a bad master host");
    ranges.push_back(SlotRange{static_cast<uint32_t>(*first), static_cast<uint32_t>(*last),
                               HostPort{host, static_cast<int>(*port)}});
  }
  return ranges;
}

std::optional<Redirect> parse_redirect(std::string_view error) {
  Redirect redirect;
  if (error.starts_with("MOVED ")) error.remove_prefix(6);
  else if (error.starts_with("ASK ")) {
    redirect.ask = true;
    error.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const auto space = error.find(' ');
  const auto colon = error.rfind(':');
  if (space == std::string_view::npos || colon == std::string_view::npos || colon < space) return std::nullopt;
  const auto slot = parse_number(error.substr(0, space), kClusterSlots - 1);
  const auto port = parse_number(error.substr(colon + 1), 65535);
  const std::string_view host = error.substr(space + 1, colon - space - 1);
  if (!slot || !port || *port == 0 || host.empty() || host.size() > 255) return std::nullopt;
  redirect.slot = *slot;
  redirect.to = HostPort{std::string(host), static_cast<int>(*port)};
  return redirect;
}

}  // namespace dueq::broker

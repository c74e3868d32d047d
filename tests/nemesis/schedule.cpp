#include "tests/nemesis/schedule.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <random>

namespace dueq::nemesis {

namespace {

// std::uniform_int_distribution is not the same on every standard library;
// the schedule must be, so draws are made by hand from mt19937_64's output.
int64_t between(std::mt19937_64& rng, int64_t low, int64_t high) {
  return low + static_cast<int64_t>(rng() % static_cast<uint64_t>(high - low + 1));
}

template <typename T>
const T& pick(std::mt19937_64& rng, const std::vector<T>& from) {
  return from[static_cast<size_t>(between(rng, 0, static_cast<int64_t>(from.size()) - 1))];
}

// One to three nodes on side a; side b is the rest (and the host) or, one
// time in three, one to three of the rest.
void draw_partition(std::mt19937_64& rng, const Nodes& nodes, Fault& f) {
  std::vector<std::string> all = nodes.all();
  for (size_t i = all.size() - 1; i > 0; --i) std::swap(all[i], all[static_cast<size_t>(between(rng, 0, static_cast<int64_t>(i)))]);
  const auto a = static_cast<size_t>(between(rng, 1, 3));
  f.side_a.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(a));
  if (between(rng, 0, 2) == 0) {
    const auto b = static_cast<size_t>(between(rng, 1, 3));
    f.side_b.assign(all.begin() + static_cast<std::ptrdiff_t>(a), all.begin() + static_cast<std::ptrdiff_t>(a + b));
  } else {
    f.side_b.assign(all.begin() + static_cast<std::ptrdiff_t>(a), all.end());
    f.side_b.emplace_back("host");
  }
  f.one_way = between(rng, 0, 3) == 0;
}

Fault draw_one(std::mt19937_64& rng, const Nodes& nodes) {
  Fault f;
  const int64_t roll = between(rng, 0, 99);
  f.for_ms = between(rng, 1'000, 8'000);
  if (roll < 35) {
    f.kind = FaultKind::partition;
    draw_partition(rng, nodes, f);
  } else if (roll < 55) {
    f.kind = FaultKind::pause;
    f.target = pick(rng, nodes.all());
  } else if (roll < 80) {
    f.kind = FaultKind::kill;
    f.target = pick(rng, nodes.all());
    f.for_ms = between(rng, 200, 3'000);
  } else if (roll < 90) {
    f.kind = FaultKind::failover;
  } else {
    f.kind = FaultKind::demote;
  }
  return f;
}

}  // namespace

const char* name_of(FaultKind kind) {
  switch (kind) {
    case FaultKind::partition: return "partition";
    case FaultKind::pause: return "pause";
    case FaultKind::kill: return "kill";
    case FaultKind::failover: return "failover";
    case FaultKind::demote: return "demote";
  }
  return "?";
}

std::vector<std::string> Nodes::all() const {
  std::vector<std::string> out;
  for (const auto* group : {&brokers, &redis, &sentinels, &workers}) out.insert(out.end(), group->begin(), group->end());
  return out;
}

std::string Fault::describe() const {
  switch (kind) {
    case FaultKind::partition:
      return fmt::format("partition {} {} {}", fmt::join(side_a, ","), one_way ? "-/->" : "<-/->", fmt::join(side_b, ","));
    case FaultKind::pause: return "pause " + target;
    case FaultKind::kill: return "kill " + target;
    case FaultKind::failover: return "failover";
    case FaultKind::demote: return "demote master";
  }
  return "?";
}

std::vector<Fault> draw_schedule(uint64_t seed, int64_t length_ms, const Nodes& nodes) {
  std::mt19937_64 rng(seed);
  std::vector<Fault> schedule;
  int64_t at = between(rng, 2'000, 4'000);
  while (true) {
    Fault f = draw_one(rng, nodes);
    f.at_ms = at;
    if (at + f.for_ms > length_ms) break;
    at += f.for_ms + between(rng, 1'000, 4'000);
    schedule.push_back(std::move(f));
  }
  return schedule;
}

}  // namespace dueq::nemesis

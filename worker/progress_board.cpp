#include "worker/progress_board.hpp"

#include <algorithm>

#include "dueq/worker.hpp"

namespace dueq {

void Job::progress(int64_t percent, std::string_view text) const {
  if (progress_board != nullptr) progress_board->report(token, percent, text);
}

namespace worker {

std::string_view cut_utf8(std::string_view text, size_t max) {
  if (text.size() <= max) return text;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut);
}

void ProgressBoard::open(const proto::JobRef& ref) {
  std::lock_guard lock(mutex_);
  entries_[ref.token] = Entry{ref};
}

void ProgressBoard::close(uint64_t token) {
  std::lock_guard lock(mutex_);
  entries_.erase(token);  // a token left in changed_ is skipped at the take
}

bool ProgressBoard::report(uint64_t token, int64_t percent, std::string_view text) {
  const auto clamped = static_cast<uint32_t>(std::clamp<int64_t>(percent, 0, proto::ProgressItem::kMaxPercent));
  text = cut_utf8(text, proto::ProgressItem::kMaxTextBytes);
  std::lock_guard lock(mutex_);
  auto it = entries_.find(token);
  if (it == entries_.end()) return false;
  Entry& e = it->second;
  e.percent = clamped;
  e.text.assign(text);
  e.reported = true;
  if (!e.changed) {
    e.changed = true;
    changed_.push_back(token);
  }
  return true;
}

std::vector<proto::ProgressItem> ProgressBoard::take_changed(size_t max) {
  std::lock_guard lock(mutex_);
  std::vector<proto::ProgressItem> out;
  size_t used = 0;
  for (; used < changed_.size() && out.size() < max; ++used) {
    auto it = entries_.find(changed_[used]);
    if (it == entries_.end() || !it->second.changed) continue;
    Entry& e = it->second;
    e.changed = false;
    out.push_back({e.ref.queue, e.ref.id, e.ref.token, e.percent, proto::Bytes{e.text}});
  }
  changed_.erase(changed_.begin(), changed_.begin() + static_cast<std::ptrdiff_t>(used));
  return out;
}

void ProgressBoard::mark_all_changed() {
  std::lock_guard lock(mutex_);
  for (auto& [token, e] : entries_) {
    if (!e.reported || e.changed) continue;
    e.changed = true;
    changed_.push_back(token);
  }
}

size_t ProgressBoard::open_count() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace worker
}  // namespace dueq

#pragma once
// dueq top: every queue's counts and rates, how late its oldest ready job
// is, and the workers, redrawn every interval until q or Ctrl-C.
#include <cstdint>

#include "dueq/client.hpp"

namespace dueq::cli {

// `frames` > 0: that many refreshes, then exit (0: until q or a signal).
// `json`: one JSON object per refresh, one per line, no screen drawing.
int top(Client& client, int64_t interval_ms, int frames, bool json);

}  // namespace dueq::cli

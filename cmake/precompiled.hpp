// Headers nearly every translation unit of a library includes, parsed once
// per target instead of once per file (target_precompile_headers): spdlog,
// fmt, msgpack and cppzmq cost 1.4-2.4 s each per file, more under the
// sanitizers, and were most of the build's time.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <msgpack.hpp>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

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

// fmt 9 instantiates its whole formatting engine (vformat_to<char>: parsing,
// integers, floats) in every file that formats, though the shared libfmt
// exports that very instantiation; fmt 10 declares it extern itself. Using
// the library's copy took a third off the sanitized build's compile time.
#if FMT_VERSION < 100000 && !defined(FMT_HEADER_ONLY)
namespace fmt {
inline namespace v9 {
namespace detail {
extern template FMT_API void vformat_to<char>(buffer<char>&, string_view, format_args, locale_ref);
}  // namespace detail
}  // namespace v9
}  // namespace fmt
#endif

#pragma once
// `dueq`'s commands, flags and help, defined with CLI11 onto an Invocation.
#include <CLI/CLI.hpp>

#include "cli/invocation.hpp"

namespace dueq::cli {

// Every command and flag of `dueq`, their values bound to `v`.
void define_commands(CLI::App& app, Invocation& v);

}  // namespace dueq::cli

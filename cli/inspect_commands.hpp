#pragma once
// dueq stats, job, dead, cancel and audit: ask the broker, print the answer
// as a table or as JSON.
#include <string>

#include "dueq/client.hpp"

namespace dueq::cli {

int stats(Client& client, bool json);
int show_job(Client& client, const std::string& id, const std::string& queue, bool json);
// Exits 1 when an audit is not clean.
int admin(Client& client, const AdminCommand& command, bool json);

}  // namespace dueq::cli

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
// A bulk action's rows (dueq bulk run / status), as a table or JSON.
void print_bulk(const AdminResult& result, bool json);

}  // namespace dueq::cli

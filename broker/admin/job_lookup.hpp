#pragma once
// Finding jobs by id for operators and producers: JOB lookups (`dueq job`),
// and the queue an admin command's id belongs to. Reads only; runs on the
// admin thread's connection (and the auditor's, for the queue list).
#include <map>
#include <string>
#include <vector>

#include "broker/store/round.hpp"
#include "broker/store/redis_client.hpp"
#include "common/protocol.hpp"

namespace dueq::broker {

namespace calls {
// show.lua: the job as a field map (s, t, p, d, a, m, k, c, bb, bc, e, el, f,
// r, l, cx: docs/protocol.md, JOB_REPLY); empty when the job is unknown.
Command show(const std::string& queue, const std::string& id, bool with_result = false);
Result<std::map<std::string, std::string>> parse_show(const redisReply* reply);
}  // namespace calls

// Every queue the broker has seen, sorted.
Result<std::vector<std::string>> known_queues(RedisClient& redis);
// One job's fields (calls::show), empty when `queue` has no such job.
Result<std::map<std::string, std::string>> job_fields(RedisClient& redis, const std::string& queue, const std::string& id);
// `queue`, or every known queue when it is empty.
Result<std::vector<std::string>> queues_for(RedisClient& redis, const std::string& queue);
// The queue holding job `id` (within `queue` when given): not_found when
// none does, bad_argument when several do (ids are unique within a queue
// only, and one is not guessed at).
Result<std::string> find_job_queue(RedisClient& redis, const std::string& id, const std::string& queue);
// A JOB request: the first queue holding the id, with `also_in` naming the others.
Result<proto::JobReply> lookup_job(RedisClient& redis, const proto::JobRequest& request);

}  // namespace dueq::broker

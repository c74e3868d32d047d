// Rules for user input outside frames: durations, times, Redis URLs, names and
// the broker config file each give a clear error and never a silent default.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>

#include <filesystem>
#include <fstream>

#include "broker/config/config.hpp"
#include "common/broker_endpoints.hpp"
#include "common/duration.hpp"
#include "common/names.hpp"
#include "common/redis_url.hpp"
#include "tests/support/redis_server.hpp"

using namespace dueq;

TEST(Duration, ParsesUnits) {
  EXPECT_EQ(*parse_duration_ms("250ms"), 250);
  EXPECT_EQ(*parse_duration_ms("30s"), 30'000);
  EXPECT_EQ(*parse_duration_ms("5m"), 300'000);
  EXPECT_EQ(*parse_duration_ms("2h"), 7'200'000);
  EXPECT_EQ(*parse_duration_ms("30d"), 2'592'000'000);
  EXPECT_EQ(*parse_duration_ms("0"), 0);
}

TEST(Duration, RejectsGarbageNegativeAndUnknownUnits) {
  EXPECT_FALSE(parse_duration_ms(""));
  EXPECT_FALSE(parse_duration_ms("-1s"));
  EXPECT_FALSE(parse_duration_ms("10y"));
  EXPECT_FALSE(parse_duration_ms("s"));
  auto bare = parse_duration_ms("30");
  ASSERT_FALSE(bare);
  EXPECT_NE(bare.error().message.find("no unit: use ms, s, m, h or d"), std::string::npos) << bare.error().message;
  EXPECT_FALSE(parse_duration_ms("99999999999999999999d"));
  EXPECT_TRUE(parse_duration_ms("36500d"));
  EXPECT_FALSE(parse_duration_ms("36501d")) << "past 100 years: twice a duration could overflow";
}

TEST(Rfc3339, ParsesUtcOffsetsAndFractions) {
  EXPECT_EQ(*parse_rfc3339_ms("1970-01-01T00:00:01Z"), 1000);
  EXPECT_EQ(*parse_rfc3339_ms("1970-01-01T00:00:01.5Z"), 1500);
  EXPECT_EQ(*parse_rfc3339_ms("1970-01-01T01:00:00+01:00"), 0);
  EXPECT_EQ(*parse_rfc3339_ms("2026-11-22T03:00:00Z"), 1795316400000);
}

TEST(Rfc3339, RejectsMalformedTimes) {
  EXPECT_FALSE(parse_rfc3339_ms("2026-11-22 03:00:00"));
  EXPECT_FALSE(parse_rfc3339_ms("2026-13-22T03:00:00Z"));
  EXPECT_FALSE(parse_rfc3339_ms("2026-11-22T03:00:00"));
  EXPECT_FALSE(parse_rfc3339_ms("2026-11-22T03:00:00Zjunk"));
}

TEST(RedisUrl, ParsesAllForms) {
  auto a = parse_redis_url("redis://:s3cret@db.local:6380/2");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "db.local");
  EXPECT_EQ(a->port, 6380);
  EXPECT_EQ(a->password, "s3cret");
  EXPECT_EQ(a->db, 2);
  EXPECT_EQ(a->describe().find("s3cret"), std::string::npos);
  auto b = parse_redis_url("redis://localhost");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->port, 6379);
  auto c = parse_redis_url("/run/redis.sock");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->unix_path, "/run/redis.sock");
  auto d = parse_redis_url("unix:///run/redis.sock?db=3");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->db, 3);
}

TEST(RedisUrl, ReadsAnAclUserAndNeverShowsThePasswordInErrors) {
  auto a = parse_redis_url("redis://alice:s3cret@db.local:6380/1");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->user, "alice");
  EXPECT_EQ(a->password, "s3cret");
  auto old_form = parse_redis_url("redis://s3cret@db.local");
  ASSERT_TRUE(old_form);
  EXPECT_EQ(old_form->user, "");
  EXPECT_EQ(old_form->password, "s3cret");
  for (const char* url : {"redis://alice:s3cret@db.local:99999", "redis://:s3cret@db.local/x", "redis://alice:s3cret@"}) {
    auto bad = parse_redis_url(url);
    ASSERT_FALSE(bad) << url;
    EXPECT_EQ(bad.error().message.find("s3cret"), std::string::npos) << bad.error().message;
    EXPECT_NE(bad.error().message.find(":***@"), std::string::npos) << bad.error().message;
  }
  // A URL missing its "//" still hides what stood before the '@' (found by the URL fuzzer's rule).
  for (const char* url : {"redis:alice:s3cret@db.local", "alice:s3cret@db.local"}) {
    auto bad = parse_redis_url(url);
    ASSERT_FALSE(bad) << url;
    EXPECT_EQ(bad.error().message.find("s3cret"), std::string::npos) << bad.error().message;
  }
}

TEST(RedisUrl, ASentinelUrlNamesTheSentinelsTheMasterAndBothCredentials) {
  auto a = parse_redis_url("sentinel://dueq:s3cret@s1:26380,s2,10.0.0.3:26379/mymaster/2?sentinel_user=watch&sentinel_password=p4ss");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_TRUE(a->via_sentinel());
  ASSERT_EQ(a->sentinels.size(), 3u);
  EXPECT_EQ(a->sentinels[0].host, "s1");
  EXPECT_EQ(a->sentinels[0].port, 26380);
  EXPECT_EQ(a->sentinels[1].port, 26379);  // the default
  EXPECT_EQ(a->sentinels[2].host, "10.0.0.3");
  EXPECT_EQ(a->master_name, "mymaster");
  EXPECT_EQ(a->db, 2);
  EXPECT_EQ(a->user, "dueq");
  EXPECT_EQ(a->password, "s3cret");
  EXPECT_EQ(a->sentinel_user, "watch");
  EXPECT_EQ(a->sentinel_password, "p4ss");
  EXPECT_EQ(a->describe(), "master 'mymaster' of sentinels s1:26380,s2:26379,10.0.0.3:26379/2");
  EXPECT_FALSE(parse_redis_url("redis://s1")->via_sentinel());
}

TEST(RedisUrl, ABadSentinelUrlIsRefusedWithoutShowingEitherPassword) {
  for (const char* url : {"sentinel://s1:26379", "sentinel://s1:26379/", "sentinel:///mymaster",
                          "sentinel://s1:0/mymaster", "sentinel://s1,,s2/mymaster", "sentinel://s1/m/x",
                          "sentinel://u:s3cret@s1/m?sentinel_password=p4ss&color=red",
                          "sentinel://s1/m?sentinel_password=p4ss&s3cret"}) {
    auto bad = parse_redis_url(url);
    ASSERT_FALSE(bad) << url;
    EXPECT_EQ(bad.error().message.find("s3cret"), std::string::npos) << bad.error().message;
    EXPECT_EQ(bad.error().message.find("p4ss"), std::string::npos) << bad.error().message;
  }
}

TEST(RedisUrl, AClusterUrlNamesItsSeedNodesAndNoDb) {
  auto a = parse_redis_url("redis+cluster://dueq:s3cret@n1:7000,n2,10.0.0.3:7002");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_TRUE(a->via_cluster());
  ASSERT_EQ(a->cluster_seeds.size(), 3u);
  EXPECT_EQ(a->cluster_seeds[0].port, 7000);
  EXPECT_EQ(a->cluster_seeds[1].port, 6379);  // the default
  EXPECT_EQ(a->user, "dueq");
  EXPECT_EQ(a->password, "s3cret");
  EXPECT_EQ(a->describe(), "cluster of n1:7000,n2:6379,10.0.0.3:7002");
  for (const char* url : {"redis+cluster://", "redis+cluster://u:s3cret@n1:7000/1", "redis+cluster://n1,,n2",
                          "redis+cluster://n1:0", "redis+cluster://u:s3cret@n1?x=y"}) {
    auto bad = parse_redis_url(url);
    ASSERT_FALSE(bad) << url;
    EXPECT_EQ(bad.error().message.find("s3cret"), std::string::npos) << bad.error().message;
  }
}

TEST(RedisUrl, RejectsBadUrls) {
  EXPECT_FALSE(parse_redis_url("http://x"));
  EXPECT_FALSE(parse_redis_url("redis://host:99999"));
  EXPECT_FALSE(parse_redis_url("redis://host:abc"));
  EXPECT_FALSE(parse_redis_url("redis://:pw@"));
  EXPECT_FALSE(parse_redis_url("redis://host/x"));
}

TEST(Names, QueueNamesAreRestricted) {
  EXPECT_TRUE(validate_queue_name("emails.high-prio_1"));
  EXPECT_FALSE(validate_queue_name(""));
  EXPECT_FALSE(validate_queue_name("a{b}"));
  EXPECT_FALSE(validate_queue_name("a:b"));
  EXPECT_FALSE(validate_queue_name(std::string(65, 'a')));
  EXPECT_FALSE(validate_job_id("has space"));
  EXPECT_FALSE(validate_job_type(""));
}

namespace {

Result<void> load(const std::string& text, broker::BrokerConfig& config) {
  auto dir = dueq::testing::make_temp_dir("config");
  const auto path = dir / "broker.toml";
  std::ofstream(path) << text;
  auto r = broker::load_config_file(path.string(), config);
  std::filesystem::remove_all(dir);
  return r;
}

}  // namespace

TEST(ConfigFile, ReadsSettingsAndPerQueuePolicies) {
  broker::BrokerConfig c;
  auto r = load(R"(
redis = "redis://127.0.0.1:6390"
listen = "tcp://0.0.0.0:7700"
curve_key = "/etc/dueq/broker.key"
allow_list = "/etc/dueq/allow.d"
heartbeat = "250ms"
worker_timeout = "1s"
lease_ttl = "20s"
[defaults]
max_attempts = 7
[queues.reports]
max_attempts = 2
backoff_base = "5s"
backoff_cap = "1h"
max_run_time = "2h"
)", c);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(c.redis_url, "redis://127.0.0.1:6390");
  EXPECT_EQ(c.curve_key, "/etc/dueq/broker.key");
  EXPECT_EQ(c.allow_list, "/etc/dueq/allow.d");
  EXPECT_EQ(c.heartbeat_ms, 250);
  EXPECT_EQ(c.lease_ttl_ms, 20'000);
  EXPECT_EQ(c.policy("other").max_attempts, 7u);
  EXPECT_EQ(c.policy("reports").max_attempts, 2u);
  EXPECT_EQ(c.policy("reports").backoff_base_ms, 5'000);
  EXPECT_EQ(c.policy("reports").max_run_time_ms, 7'200'000);
  EXPECT_EQ(c.policy("other").max_run_time_ms, 1'800'000);
  EXPECT_TRUE(broker::validate_config(c));
}

TEST(ConfigFile, UnknownKeysAndBadValuesAreErrorsNamingTheKey) {
  broker::BrokerConfig c;
  auto unknown = load("heartbeet = \"1s\"\n", c);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("heartbeet"), std::string::npos);
  auto bad = load("[queues.q]\nmax_attempts = 0\n", c);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("queues.q.max_attempts"), std::string::npos);
  auto bad_name = load("[queues.\"a b\"]\nmax_attempts = 1\n", c);
  EXPECT_FALSE(bad_name);
  auto syntax = load("listen = \n", c);
  EXPECT_FALSE(syntax);
  auto cap = load("[defaults]\nbackoff_base = \"10s\"\nbackoff_cap = \"1s\"\n", c);
  EXPECT_FALSE(cap);
  for (const char* capacity : {"max_worker_capacity = 0\n", "max_worker_capacity = 10001\n"}) {
    auto r = load(capacity, c);
    ASSERT_FALSE(r) << capacity;
    EXPECT_NE(r.error().message.find("max_worker_capacity"), std::string::npos);
  }
  // A float is not an integer, however large (the config fuzzer's first find:
  // 1.4e102 was converted to int64_t, which is undefined behaviour).
  for (const char* fractional : {"max_worker_capacity = 1.44e102\n", "max_worker_capacity = 64.0\n", "heartbeat = 5e2\n"}) {
    auto r = load(fractional, c);
    ASSERT_FALSE(r) << fractional;
  }
  // ... and a duration past 100 years is refused before validate_config
  // doubles it (its second find: signed overflow).
  for (const char* huge : {"heartbeat = \"5138606774829735686s\"\n", "heartbeat = 5138606774829735686\n"}) {
    auto r = load(huge, c);
    ASSERT_FALSE(r) << huge;
    EXPECT_NE(r.error().message.find("heartbeat"), std::string::npos) << r.error().message;
  }
  // A duration without a unit: "30" could mean seconds or milliseconds.
  for (const char* bare : {"heartbeat = \"500\"\n", "heartbeat = 500\n"}) {
    auto r = load(bare, c);
    ASSERT_FALSE(r) << bare;
    EXPECT_NE(r.error().message.find("ms, s, m, h or d"), std::string::npos) << r.error().message;
  }
  for (const char* run_time : {"[defaults]\nmax_run_time = \"500ms\"\n", "[defaults]\nmax_run_time = 30\n"}) {
    auto r = load(run_time, c);
    ASSERT_FALSE(r) << run_time;
    EXPECT_NE(r.error().message.find("defaults.max_run_time"), std::string::npos) << r.error().message;
  }
  ASSERT_TRUE(load("max_worker_capacity = 64\n", c));
  EXPECT_EQ(c.max_worker_capacity, 64);
}

TEST(Names, AQueueMayCarryAWeight) {
  EXPECT_EQ(parse_queue_weight("critical:6")->weight, 6u);
  EXPECT_EQ(parse_queue_weight("critical:6")->name, "critical");
  EXPECT_EQ(parse_queue_weight("plain")->weight, 1u);
  for (const char* bad : {"q:0", "q:1001", "q:", "q:x", ":3", "a b:2", "q:-1"}) EXPECT_FALSE(parse_queue_weight(bad)) << bad;
}

TEST(ConfigFile, QueueLimitsAreReadAndOutOfRangeOnesRefused) {
  broker::BrokerConfig c;
  auto r = load("[queues.mail]\nrate_limit = 0.5\nrate_burst = 3\n[queues.pdf]\nconcurrency_limit = 4\nrate_limit = 200\n", c);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_DOUBLE_EQ(c.policy("mail").rate_limit, 0.5);
  EXPECT_EQ(c.policy("mail").rate_burst, 3);
  EXPECT_EQ(c.policy("mail").concurrency_limit, 0);
  EXPECT_EQ(c.policy("pdf").concurrency_limit, 4);
  EXPECT_DOUBLE_EQ(c.policy("pdf").rate_limit, 200);
  EXPECT_FALSE(c.policy("other").limited());
  for (const char* bad : {"rate_limit = -1\n", "rate_limit = 2e6\n", "rate_limit = \"10/s\"\n", "rate_limit = nan\n",
                          "rate_burst = 0\n", "concurrency_limit = -1\n", "concurrency_limit = 1.5\n"}) {
    broker::BrokerConfig d;
    auto refused = load(std::string("[queues.q]\n") + bad, d);
    ASSERT_FALSE(refused) << bad;
    EXPECT_NE(refused.error().message.find("queues.q."), std::string::npos) << refused.error().message;
  }
}

TEST(ConfigFile, NamedKeysSettingsAreReadAsTheCommandsWouldSendThemAndCheckedWhole) {
  broker::BrokerConfig c;
  auto r = load("[queues.api.keys.\"acme\"]\nlimit = 5\nrate = 2.5\nweight = 3\n[queues.api.keys.\"tiny\"]\nrate = 1000000\n", c);
  ASSERT_TRUE(r) << r.error().message;
  const auto& keys = c.policy("api").keys;
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys.at("acme").limit, "5");
  EXPECT_EQ(keys.at("acme").rate, "2.5");
  EXPECT_EQ(keys.at("acme").weight, "3");
  EXPECT_EQ(keys.at("tiny").rate, "1000000") << "plain decimal, as lua/key_limit.lua takes it";
  EXPECT_EQ(keys.at("tiny").limit, "");
  for (const char* bad : {"[queues.q.keys.\"a\"]\nlimit = 0\n", "[queues.q.keys.\"a\"]\nweight = 1001\n",
                          "[queues.q.keys.\"a\"]\nrate = 0.0001\n", "[queues.q.keys.\"a\"]\nrate = \"fast\"\n",
                          "[queues.q.keys.\"a\"]\nlimits = 2\n", "[queues.q.keys.\"a\"]\n", "[queues.q]\nkeys = 3\n",
                          "[defaults.keys.\"a\"]\nlimit = 2\n"}) {
    broker::BrokerConfig d;
    auto refused = load(bad, d);
    ASSERT_FALSE(refused) << bad;
    EXPECT_NE(refused.error().message.find("keys"), std::string::npos) << refused.error().message;
  }
  broker::BrokerConfig long_key;
  auto too_long = load("[queues.q.keys.\"" + std::string(129, 'k') + "\"]\nlimit = 2\n", long_key);
  ASSERT_FALSE(too_long);
  EXPECT_NE(too_long.error().message.find("1..128 bytes"), std::string::npos) << too_long.error().message;
}

TEST(ConfigFile, AFairQueueIsReadAndCannotAlsoBeOrdered) {
  broker::BrokerConfig c;
  auto r = load("[queues.tenants]\nfair = true\nkey_concurrency = 2\n", c);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(c.policy("tenants").fair);
  EXPECT_FALSE(c.policy("other").fair);
  broker::BrokerConfig d;
  auto both = load("[queues.q]\nfair = true\nordered = true\n", d);
  ASSERT_FALSE(both);
  EXPECT_EQ(both.error().message, "config key 'queues.q.fair': cannot be set with ordered = true");
  auto not_bool = load("[queues.q]\nfair = 1\n", d);
  ASSERT_FALSE(not_bool);
  EXPECT_NE(not_bool.error().message.find("queues.q.fair"), std::string::npos) << not_bool.error().message;
}

// History is off unless set; set under [defaults] it reaches every queue,
// cut to a queue's shorter done_retention or done_max; set in a queue's own
// table past those, it is refused.
TEST(ConfigFile, HistoryIsOffByDefaultAndNeverOutlivesTheIdsItIsKeptWith) {
  broker::BrokerConfig off;
  ASSERT_TRUE(load("[queues.q]\nmax_attempts = 3\n", off));
  EXPECT_FALSE(off.policy("q").keeps_history());
  broker::BrokerConfig c;
  auto r = load("[defaults]\nhistory_retention = \"1h\"\nhistory_max = 500\n"
                "[queues.short]\ndone_retention = \"10m\"\ndone_max = 100\n[queues.none]\nhistory_retention = \"0s\"\n", c);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(c.policy("other").keeps_history());
  EXPECT_EQ(c.policy("other").history_retention_s, 3600);
  EXPECT_EQ(c.policy("other").history_max, 500);
  EXPECT_EQ(c.policy("short").history_retention_s, 600);
  EXPECT_EQ(c.policy("short").history_max, 100);
  EXPECT_FALSE(c.policy("none").keeps_history());
  for (const char* bad : {"done_retention = \"10m\"\nhistory_retention = \"1h\"\n", "done_max = 10\nhistory_max = 11\n",
                          "history_max = -1\n", "history_retention = 5\n", "history_retention = \"soon\"\n"}) {
    broker::BrokerConfig d;
    auto refused = load(std::string("[queues.q]\n") + bad, d);
    ASSERT_FALSE(refused) << bad;
    EXPECT_NE(refused.error().message.find("queues.q.history"), std::string::npos) << refused.error().message;
  }
}

TEST(ConfigFile, CronEntriesAreReadAndCheckedWhole) {
  broker::BrokerConfig c;
  auto r = load("[cron.nightly]\nschedule = \"0 30 2 * * *\"\ntime_zone = \"Europe/Berlin\"\nqueue = \"reports\"\n"
                "type = \"build\"\npayload = \"{}\"\nmisfire = \"run_once\"\nmax_attempts = 3\n", c);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(c.cron.size(), 1u);
  EXPECT_EQ(c.cron[0].name, "nightly");
  EXPECT_EQ(c.cron[0].schedule.time_zone(), "Europe/Berlin");
  EXPECT_TRUE(c.cron[0].run_missed_once);
  EXPECT_TRUE(c.cron[0].from_config);
  EXPECT_EQ(c.cron[0].max_attempts, 3u);
  struct Bad {
    const char* text;
    const char* says;
  };
  for (const Bad& b : {Bad{"[cron.x]\nschedule = \"* * *\"\nqueue = \"q\"\ntype = \"t\"\n", "expected 6 fields"},
                       Bad{"[cron.x]\nschedule = \"* * * * * *\"\ntype = \"t\"\n", "needs a queue"},
                       Bad{"[cron.x]\nschedule = \"* * * * * *\"\nqueue = \"q\"\n", "needs a type"},
                       Bad{"[cron.x]\nqueue = \"q\"\ntype = \"t\"\n", "needs a schedule"},
                       Bad{"[cron.x]\nschedule = \"* * * * * *\"\nqueue = \"q\"\ntype = \"t\"\nevery = 1\n", "cron.x.every"},
                       Bad{"[cron.x]\nschedule = 5\nqueue = \"q\"\ntype = \"t\"\n", "cron.x.schedule"},
                       Bad{"[cron.x]\nschedule = \"* * * * * *\"\ntime_zone = \"Atlantis\"\nqueue = \"q\"\ntype = \"t\"\n", "unknown time zone"},
                       Bad{"[cron.\"a b\"]\nschedule = \"* * * * * *\"\nqueue = \"q\"\ntype = \"t\"\n", "a name is"}}) {
    broker::BrokerConfig d;
    auto refused = load(b.text, d);
    ASSERT_FALSE(refused) << b.text;
    EXPECT_NE(refused.error().message.find(b.says), std::string::npos) << refused.error().message;
  }
}

// The removed key is refused with the reason, not ignored: a user who set it
// learns that unstarted deliveries never use an attempt now.
TEST(ConfigFile, TheRemovedUnconfirmedDeliveryLimitIsRefusedWithItsReason) {
  broker::BrokerConfig c;
  auto r = load("max_unconfirmed_deliveries = 3\n", c);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("max_unconfirmed_deliveries"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("was removed"), std::string::npos) << r.error().message;
}

// The shipped example configuration loads as it is.
TEST(ConfigFile, TheDeployedBrokerTomlLoads) {
  broker::BrokerConfig c;
  const std::filesystem::path deployed = std::filesystem::path(DUEQ_SOURCE_DIR) / "deploy" / "broker.toml";
  auto r = broker::load_config_file(deployed.string(), c);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(broker::validate_config(c));
  EXPECT_EQ(c.max_queues, 1000);
}

TEST(ConfigFile, InconsistentTimingsAreRefused) {
  broker::BrokerConfig c;
  c.heartbeat_ms = 1000;
  c.worker_timeout_ms = 1500;
  EXPECT_FALSE(broker::validate_config(c));
}

TEST(ConfigFile, TheLeaderLeaseAndTheAdvertisedEndpointAreChecked) {
  broker::BrokerConfig c;
  ASSERT_TRUE(broker::load_config_text("leader_lease = \"5s\"\nadvertise = \"tcp://broker-a:7600\"\n", "t", c));
  EXPECT_EQ(c.leader_lease_ms, 5'000);
  EXPECT_EQ(c.advertise, "tcp://broker-a:7600");
  EXPECT_TRUE(broker::validate_config(c));
  for (const char* bad : {"leader_lease = \"100ms\"\n", "leader_lease = 2\n", "advertise = \"broker-a:7600\"\n",
                          "advertise = \"tcp://a b:7600\"\n", "advertise = 7600\n"}) {
    broker::BrokerConfig d;
    auto r = broker::load_config_text(bad, "t", d);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find(std::string(bad).substr(0, std::string(bad).find(' '))), std::string::npos)
        << r.error().message;
  }
  broker::BrokerConfig flags;  // as set by --leader-lease and --advertise
  flags.leader_lease_ms = int64_t{11} * 60'000;
  EXPECT_FALSE(broker::validate_config(flags));
  flags.leader_lease_ms = 2'000;
  flags.advertise = "ipc:///tmp/x";
  EXPECT_FALSE(broker::validate_config(flags));
}

// A client given only a standby follows the leader its not_leader names;
// nothing else in such a message adds an endpoint.
TEST(BrokerEndpoints, TheLeaderAStandbyNamesJoinsTheListOnce) {
  auto list = BrokerEndpoints::parse("tcp://standby:7600");
  ASSERT_TRUE(list);
  EXPECT_FALSE(list->learn_leader_from("this broker stands by; another broker leads"));
  EXPECT_FALSE(list->learn_leader_from("this broker stands by; the leader is at tcp://*:7600"));
  EXPECT_FALSE(list->learn_leader_from("this broker stands by; the leader is at tcp://0.0.0.0:7600"));
  EXPECT_FALSE(list->learn_leader_from("this broker stands by; the leader is at nonsense"));
  EXPECT_FALSE(list->several());
  EXPECT_TRUE(list->learn_leader_from("this broker stands by; the leader is at tcp://leader:7600"));
  EXPECT_FALSE(list->learn_leader_from("this broker stands by; the leader is at tcp://leader:7600")) << "once";
  EXPECT_EQ(list->describe(), "tcp://standby:7600,tcp://leader:7600");
  for (int i = 0; i < 40; ++i) (void)list->learn_leader_from(fmt::format("the leader is at tcp://h{}:7600", i));
  const std::string all = list->describe();
  EXPECT_EQ(std::count(all.begin(), all.end(), ','), 15) << "at most 16 endpoints";
}

TEST(BrokerEndpoints, OneOrSeveralCommaSeparatedEndpointsAreTakenInOrder) {
  auto one = BrokerEndpoints::parse("tcp://a:7600");
  ASSERT_TRUE(one);
  EXPECT_FALSE(one->several());
  EXPECT_TRUE(one->next());
  EXPECT_EQ(one->current(), "tcp://a:7600");
  auto two = BrokerEndpoints::parse("tcp://a:7600,tcp://b:7600");
  ASSERT_TRUE(two);
  EXPECT_TRUE(two->several());
  EXPECT_EQ(two->current(), "tcp://a:7600");
  EXPECT_FALSE(two->next());
  EXPECT_EQ(two->current(), "tcp://b:7600");
  EXPECT_TRUE(two->next()) << "back at the first: a whole pass";
  EXPECT_EQ(two->describe(), "tcp://a:7600,tcp://b:7600");
  std::string seventeen = "tcp://h0:7600";
  for (int i = 1; i < 17; ++i) {
    seventeen.append(",tcp://h");
    seventeen.append(std::to_string(i));
    seventeen.append(":7600");
  }
  for (const std::string bad : {"", ",", "tcp://a:7600,", "tcp://a:7600,,tcp://b:7600", "a:7600", "tcp://a:7600,tcp://a:7600",
                                "tcp://a b:7600", seventeen.c_str()}) {
    auto r = BrokerEndpoints::parse(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_EQ(r.error().code, Errc::bad_argument);
    }
  }
}

TEST(ConfigFile, TheHttpAddressTheTokenFileAndTheDataDirAreChecked) {
  broker::BrokerConfig c;
  ASSERT_TRUE(broker::load_config_text("http = \":9600\"\ndashboard_token_file = \"/etc/dueq/token\"\ndata_dir = \"/var/lib/dueq\"\n",
                                       "t", c));
  EXPECT_EQ(c.http, ":9600");
  EXPECT_EQ(c.dashboard_token_file, "/etc/dueq/token");
  EXPECT_EQ(c.data_dir, "/var/lib/dueq");
  EXPECT_TRUE(broker::validate_config(c));
  EXPECT_EQ(*broker::parse_http_address(":9600"), (std::pair<std::string, int>{"127.0.0.1", 9600}));
  EXPECT_EQ(*broker::parse_http_address("0.0.0.0:0"), (std::pair<std::string, int>{"0.0.0.0", 0}));
  EXPECT_EQ(*broker::parse_http_address("[::1]:9600"), (std::pair<std::string, int>{"::1", 9600}));
  for (const char* bad : {"9600", "host:", "host:70000", "host:-1", "ho st:80", "host:80x", "h;rm:80"})
    EXPECT_FALSE(broker::parse_http_address(bad)) << bad;
  for (const char* bad : {"http = 9600\n", "http = \"nowhere\"\n", "dashboard_token_file = \"\"\n", "data_dir = 3\n"}) {
    broker::BrokerConfig d;
    auto r = broker::load_config_text(bad, "t", d);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find(std::string(bad).substr(0, std::string(bad).find(' '))), std::string::npos)
        << r.error().message;
  }
  // A Redis address and a data directory for the embedded store exclude each other.
  broker::BrokerConfig both;
  both.redis_url = "redis://127.0.0.1:6379";
  both.data_dir = "/var/lib/dueq";
  EXPECT_FALSE(broker::validate_config(both));
}

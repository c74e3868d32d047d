// The web dashboard in a real browser (headless Chromium driven through its
// DevTools protocol by tests/support/browser.py): the page shows the numbers
// `dueq stats` shows, and a dead letter is replayed through it. Screenshots
// are kept in the build's test-artifacts/dashboard.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include "tests/support/cluster.hpp"

using namespace dueq;
using namespace dueq::testing;
using namespace std::chrono_literals;

namespace {

const std::filesystem::path kArtifacts = std::filesystem::path(DUEQ_ARTIFACT_DIR) / "dashboard";
constexpr const char* kToken = "a-dashboard-token-for-tests";

// Runs the browser steps; their results, or null when the driver failed.
nlohmann::json browse(const std::filesystem::path& dir, const nlohmann::json& steps) {
  const auto steps_file = dir / "steps.json";
  std::ofstream(steps_file) << steps.dump();
  const std::string output = command_output(fmt::format("/usr/bin/python3 {}/tests/support/browser.py {} {} 2>{}",
                                                        DUEQ_SOURCE_DIR, steps_file.string(), (dir / "profile").string(),
                                                        (dir / "browser.log").string()));
  auto parsed = nlohmann::json::parse(output, nullptr, false);
  return parsed.is_discarded() ? nlohmann::json() : parsed;
}

std::string js_string(const std::string& text) { return nlohmann::json(text).dump(); }

}  // namespace

TEST(Dashboard, ShowsTheNumbersOfDueqStatsAndReplaysADeadLetter) {
  const int http = free_port();
  TempDir keys("token");
  std::ofstream(keys / "token") << kToken << "\n";
  std::ofstream(keys / "broker.toml") << "[queues.pages]\nrate_limit = 500\nrate_burst = 100\n";
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http), "--dashboard-token-file", (keys / "token").string(),
                   "--config", (keys / "broker.toml").string()});
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "pages", "--queue", "mail",
                        "--queue", "waiting", "--concurrency", "8"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  // What the page shows besides the counts: a paused queue, a rate limit, a periodic entry.
  ASSERT_EQ(run_dueq(cluster.endpoint(), "pause --create waiting").code, 0);
  ASSERT_EQ(run_dueq(cluster.endpoint(), "cron add nightly --schedule '0 30 2 * * *' --time-zone Europe/Berlin --queue mail --type noop").code, 0);
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({.queue = "waiting", .type = "noop", .payload = "", .id = "waiting-1"}));
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 5; ++i) jobs.push_back({"mail", "fail", fmt::format("boom-{}", i), fmt::format("dead-{}", i), 0, 1});
  for (int i = 0; i < 12; ++i) jobs.push_back({"mail", "noop", "", fmt::format("later-{}", i), Client::in_ms(600'000 + i * 1000), 0});
  ASSERT_TRUE(client.enqueue_batch(jobs));
  // A flow into "pages" while the page is first loaded, so that it shows rates.
  // Stopped and joined on every way out (std::jthread).
  std::jthread producer([&](const std::stop_token& stop) {
    Client c(cluster.endpoint());
    for (int tick = 0; !stop.stop_requested(); ++tick) {
      std::vector<JobSpec> batch;
      for (int i = 0; i < 20; ++i) batch.push_back({"pages", "noop", "", fmt::format("p-{}-{}", tick, i), 0, 0});
      (void)c.enqueue_batch(batch);
      std::this_thread::sleep_for(100ms);
    }
  });
  std::this_thread::sleep_for(4s);
  std::filesystem::create_directories(kArtifacts);
  const std::string url = fmt::format("http://127.0.0.1:{}/", http);
  const auto flowing_page = browse(cluster.dir(), nlohmann::json::array({
      {{"navigate", url}},
      {{"wait", "document.body.dataset.loaded === 'yes' && document.querySelectorAll('#dead tbody tr[data-id]').length === 5 "
                "&& document.querySelectorAll('#scheduled tbody tr').length > 0"}},
      {{"wait", "Number(document.querySelector('#queues tr[data-queue=pages] [data-field=done_rate]').textContent) > 0"}},
      {{"screenshot", (kArtifacts / "dashboard.png").string()}},
  }));
  ASSERT_FALSE(flowing_page.is_null()) << read_file(cluster.dir() / "browser.log");
  producer.request_stop();
  producer.join();

  // Once the flow stopped and its jobs ran, the page and `dueq stats` must agree.
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("pages"); return s && s->waiting == 0 && s->in_flight == 0; }, 20s));
  const auto pages = *cluster.stats("pages");
  const auto mail = *cluster.stats("mail");
  const std::string row = "document.querySelector('#queues tr[data-queue=' + q + '] [data-field=' + f + ']').textContent";
  const auto settled = browse(cluster.dir(), nlohmann::json::array({
      {{"navigate", url}},
      {{"wait", fmt::format("document.body.dataset.loaded === 'yes' && "
                            "document.querySelector('#queues tr[data-queue=pages] [data-field=done]').textContent === '{}'",
                            pages.done)},
       {"timeout_ms", 10000}},
      {{"eval", fmt::format("(() => {{ const v = (q, f) => Number({}); return {{pages: {{done: v('pages', 'done'), "
                            "scheduled: v('pages', 'scheduled'), dead: v('pages', 'dead')}}, mail: {{done: v('mail', 'done'), "
                            "scheduled: v('mail', 'scheduled'), dead: v('mail', 'dead')}}, "
                            "workers: document.querySelectorAll('#workers tbody tr').length}}; }})()", row)},
       {"name", "numbers"}},
      {{"eval", "(() => { const c = (q) => document.querySelector('#queues tr[data-queue=' + q + '] [data-field=controls]').textContent; "
                "return {pages: c('pages'), waiting: c('waiting'), mail: c('mail'), "
                "cron: Array.from(document.querySelectorAll('#cron tbody td')).map((td) => td.textContent)}; })()"},
       {"name", "controls"}},
      // The replay: the token typed in, one dead letter ticked, the button clicked.
      {{"wait", "document.querySelectorAll('#dead tbody tr[data-id]').length === 5"}},
      {{"eval", fmt::format("(() => {{ const t = document.getElementById('token'); t.value = {}; "
                            "t.dispatchEvent(new Event('input')); "
                            "document.querySelector('#dead tr[data-id=\"dead-3\"] input').click(); "
                            "document.getElementById('replay').click(); return true; }})()",
                            js_string(kToken))}},
      {{"wait", "document.getElementById('message').textContent.includes('1 replayed')"}},
      {{"screenshot", (kArtifacts / "after-replay.png").string()}},
      {{"eval", "document.getElementById('message').textContent"}, {"name", "message"}},
  }));
  ASSERT_FALSE(settled.is_null()) << read_file(cluster.dir() / "browser.log");
  const auto& n = settled["numbers"];
  std::printf("[ page     ] pages done %lld (dueq stats %lld), mail dead %lld (dueq stats %lld)\n",
              n["pages"]["done"].get<long long>(), static_cast<long long>(pages.done), n["mail"]["dead"].get<long long>(),
              static_cast<long long>(mail.dead));
  EXPECT_EQ(n["pages"]["done"], pages.done);
  EXPECT_EQ(n["pages"]["scheduled"], pages.scheduled);
  EXPECT_EQ(n["mail"]["dead"], mail.dead);
  EXPECT_EQ(n["mail"]["scheduled"], mail.scheduled);
  EXPECT_EQ(n["mail"]["dead"], 5);
  EXPECT_EQ(n["workers"], 1);
  EXPECT_EQ(settled["message"], "1 replayed");
  const auto& controls = settled["controls"];
  EXPECT_EQ(controls["pages"], "500/s burst 100");
  EXPECT_EQ(controls["waiting"], "paused");
  EXPECT_EQ(controls["mail"], "-");
  ASSERT_GE(controls["cron"].size(), 5u) << controls.dump();
  EXPECT_EQ(controls["cron"][0], "nightly");
  EXPECT_EQ(controls["cron"][2], "0 30 2 * * *");
  EXPECT_EQ(controls["cron"][3], "Europe/Berlin");
  // The replayed job ran again (and, failing with one attempt, died again).
  EXPECT_TRUE(eventually([&] { auto s = cluster.stats("mail"); return s && s->replayed == 1 && s->died == 6; }, 10s));
}

// Rule: the dashboard changes nothing without the admin token: replay and
// purge are refused without it, with a wrong one, and when the broker has
// none configured; bad parameters are refused before the admin thread.
TEST(Dashboard, ChangesNothingWithoutTheAdminToken) {
  const int http = free_port(), read_only_http = free_port();
  TempDir keys("token");
  std::ofstream(keys / "token") << kToken << "\n";
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http), "--dashboard-token-file", (keys / "token").string()});
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "mail"});
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({"mail", "fail", "x", "d1", 0, 1}));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("mail"); return s && s->dead == 1; }, 10s));
  httplib::Client web("127.0.0.1", http);
  const std::string body = R"({"queue":"mail","ids":["d1"]})";
  EXPECT_EQ(web.Post("/api/dead/replay", body, "application/json")->status, 401);
  EXPECT_EQ(web.Post("/api/dead/purge", httplib::Headers{{"Authorization", "Bearer wrong-token-of-some-length"}}, body,
                     "application/json")->status, 401);
  EXPECT_EQ(web.Get("/api/dead?queue=bad%20name")->status, 400);
  EXPECT_EQ(web.Get("/api/scheduled")->status, 400) << "scheduled needs a queue";
  EXPECT_EQ(web.Get("/api/dead?limit=0")->status, 400);
  EXPECT_EQ(web.Post("/api/dead/replay", httplib::Headers{{"Authorization", std::string("Bearer ") + kToken}}, "not json",
                     "application/json")->status, 400);
  EXPECT_EQ(cluster.stats("mail")->dead, 1) << "nothing changed";
  EXPECT_EQ(cluster.stats("mail")->replayed, 0);

  Process read_only({bin("dueq-broker"), "--redis", cluster.redis().url(), "--listen",
                     fmt::format("tcp://127.0.0.1:{}", free_port()), "--http", fmt::format("127.0.0.1:{}", read_only_http)},
                    (cluster.dir() / "read-only.log").string());
  httplib::Client standby("127.0.0.1", read_only_http);
  ASSERT_TRUE(eventually([&] { auto r = standby.Get("/api/overview"); return r && r->status == 200; }, 10s));
  auto refused = standby.Post("/api/dead/replay", httplib::Headers{{"Authorization", std::string("Bearer ") + kToken}}, body,
                              "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403) << refused->body;
  // It stands by: its admin reads answer "not leading" rather than wait.
  auto dead = standby.Get("/api/dead");
  ASSERT_TRUE(dead);
  EXPECT_EQ(dead->status, 503) << dead->body;

  // With the token, on the leader, the purge goes through.
  auto purged = web.Post("/api/dead/purge", httplib::Headers{{"Authorization", std::string("Bearer ") + kToken}}, body,
                         "application/json");
  ASSERT_TRUE(purged);
  EXPECT_EQ(purged->status, 200) << purged->body;
  EXPECT_EQ(cluster.stats("mail")->dead, 0);
}

// Every dead letter can be reached, however many there are and however big
// their error texts: /api/dead stops a page at `limit` rows or its byte
// budget (4 MiB) and gives `next`, where the following page starts; pages
// walk every queue in name order and list each dead job once. `dueq dead
// list` pages the same way (--after).
TEST(Dashboard, DeadLettersPageThroughEveryQueueOncePastTheByteBudget) {
  const int http = free_port();
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http)});
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "pa", "--queue", "pb",
                        "--queue", "pc", "--concurrency", "16"});
  Client client(cluster.endpoint());
  // About 4.2 KB a row (the error text is capped at 4 KiB): 1,000 rows pass 4 MiB.
  std::vector<JobSpec> big, small;
  for (int i = 0; i < 1100; ++i) big.push_back({"pa", "fail", std::string(4080, 'e'), fmt::format("pa-{}", i), 0, 1});
  for (int i = 0; i < 5; ++i) small.push_back({"pb", "fail", "small", fmt::format("pb-{}", i), 0, 1});
  ASSERT_TRUE(client.enqueue_batch(std::vector<JobSpec>(big.begin(), big.begin() + 550)));
  ASSERT_TRUE(client.enqueue_batch(std::vector<JobSpec>(big.begin() + 550, big.end())));
  ASSERT_TRUE(client.enqueue_batch(small));
  ASSERT_TRUE(client.enqueue({"pc", "noop", "", "pc-done", 0, 1}));
  ASSERT_TRUE(eventually([&] {
    auto a = cluster.stats("pa"), b = cluster.stats("pb");
    return a && b && a->dead == 1100 && b->dead == 5;
  }, 60s));
  httplib::Client web("127.0.0.1", http);
  web.set_read_timeout(30, 0);
  auto walk = [&](int limit, std::vector<size_t>& page_sizes) {
    std::map<std::string, int> seen;
    std::string after;
    for (int page = 0; page < 100; ++page) {
      auto r = web.Get(fmt::format("/api/dead?limit={}&after={}", limit, after));
      if (!r || r->status != 200) {
        ADD_FAILURE() << (r ? r->body : "no answer");
        break;
      }
      const auto body = nlohmann::json::parse(r->body);
      page_sizes.push_back(body["rows"].size());
      for (const auto& row : body["rows"]) ++seen[row["id"].get<std::string>()];
      after = body["next"].get<std::string>();
      if (after.empty()) break;
    }
    EXPECT_TRUE(after.empty()) << "the walk did not end";
    return seen;
  };
  std::vector<size_t> pages;
  const auto seen = walk(1000, pages);
  EXPECT_EQ(seen.size(), 1105u);
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](const auto& s) { return s.second == 1; })) << "a dead job listed twice";
  ASSERT_GE(pages.size(), 2u);
  EXPECT_LT(pages[0], 1000u) << "the first page was not cut by its byte budget";
  std::printf("[ figures  ] 1,105 dead letters in %zu pages of at most 1,000 rows: the first %zu rows\n", pages.size(), pages[0]);
  std::vector<size_t> small_pages;
  EXPECT_EQ(walk(300, small_pages).size(), 1105u);
  EXPECT_EQ(small_pages.size(), 4u);  // 300 + 300 + 300 + 205
  // The page: 100 rows a page, "Next page" shows the following 100.
  const std::string url = fmt::format("http://127.0.0.1:{}/", http);
  const std::string ids = "[...document.querySelectorAll('#dead tbody tr[data-id]')].map((tr) => tr.dataset.id)";
  const auto browsed = browse(cluster.dir(), nlohmann::json::array({
      {{"navigate", url}},
      {{"wait", "document.body.dataset.loaded === 'yes' && document.querySelectorAll('#dead tbody tr[data-id]').length === 100"}},
      {{"eval", ids}, {"name", "first"}},
      {{"eval", "document.getElementById('dead-next').click(); true"}},
      {{"wait", "document.getElementById('dead-page').textContent === 'page 2' && "
                "document.querySelectorAll('#dead tbody tr[data-id]').length === 100"}},
      {{"eval", ids}, {"name", "second"}},
  }));
  ASSERT_FALSE(browsed.is_null()) << read_file(cluster.dir() / "browser.log");
  std::set<std::string> on_pages;
  for (const auto& id : browsed["first"]) on_pages.insert(id.get<std::string>());
  for (const auto& id : browsed["second"]) on_pages.insert(id.get<std::string>());
  EXPECT_EQ(on_pages.size(), 200u) << "the second page repeats rows of the first";
  for (const auto& id : on_pages) EXPECT_TRUE(seen.contains(id)) << id;
  // A cursor the broker did not give is refused.
  for (const char* bad : {"nonsense", "pa:-1", "pa:x", "bad%20name:3", ":4", "pa:"})
    EXPECT_EQ(web.Get(fmt::format("/api/dead?after={}", bad))->status, 400) << bad;
  // The CLI: one queue, two at a time.
  const auto first = run_dueq(cluster.endpoint(), "dead list --queue pb --limit 2");
  ASSERT_EQ(first.code, 0) << first.out;
  EXPECT_NE(first.out.find("dueq dead list --after pb:2"), std::string::npos) << first.out;
  const auto second = run_dueq(cluster.endpoint(), "dead list --queue pb --limit 2 --after pb:2 --json", false);
  ASSERT_EQ(second.code, 0) << second.out;
  const auto json = nlohmann::json::parse(second.out);
  EXPECT_EQ(json["rows"].size(), 2u);
  EXPECT_EQ(json["rows"][0]["id"], "pb-2");
  EXPECT_EQ(json["next"], "pb:4");
  const auto bad = run_dueq(cluster.endpoint(), "dead list --after nonsense");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("not a cursor"), std::string::npos) << bad.out;
}

// Holds the page's answer for a first page of jobs until the answer for a
// later page has been rendered, then records in window.afterStale the rows
// shown once the held answer has been read and rendered (or dropped): a task
// runs after the microtasks that render it.
const std::string kStaleFirstPage =
    "const realFetch = window.fetch; let laterShown; const later = new Promise((done) => { laterShown = done; });"
    "const shownIds = () => Array.from(document.querySelectorAll('#jobs tbody tr[data-id]')).map((tr) => tr.dataset.id);"
    "window.fetch = async (url, options) => {"
    "  const res = await realFetch(url, options);"
    "  if (!String(url).startsWith('/api/list')) return res;"
    "  const stale = String(url).endsWith('after=');"
    "  if (stale) { window.fetch = realFetch; await later; }"
    "  const json = res.json.bind(res);"
    "  res.json = async () => {"
    "    const body = await json();"
    "    setTimeout(() => { if (stale) window.afterStale = shownIds(); else laterShown(); }, 0);"
    "    return body;"
    "  };"
    "  return res;"
    "};"
    "loadJobs(); document.getElementById('jobs-next').click(); true";

// The jobs panel: a queue's jobs by state in pages of 25, the next page from
// the cursor the first gave, and a row's job document on a click.
TEST(Dashboard, TheJobsPanelPagesThroughAStateAndShowsAJobsDocument) {
  const int http = free_port();
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http)});
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "mail"});
  Client client(cluster.endpoint());
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 30; ++i) jobs.push_back({"mail", "noop", "", fmt::format("later-{:02}", i), Client::in_ms(600'000 + i * 1000), 0});
  for (int i = 0; i < 2; ++i) jobs.push_back({"mail", "fail", std::string("bad\xff", 4), fmt::format("dead-{}", i), 0, 1});
  ASSERT_TRUE(client.enqueue_batch(jobs));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("mail"); return s && s->dead == 2; }, 20s));
  std::filesystem::create_directories(kArtifacts);
  const std::string rows = "document.querySelectorAll('#jobs tbody tr[data-id]')";
  const auto page = browse(cluster.dir(), nlohmann::json::array({
      {{"navigate", fmt::format("http://127.0.0.1:{}/", http)}},
      {{"wait", "document.body.dataset.loaded === 'yes' && document.querySelector('#queues tr[data-queue=mail]') !== null"}},
      {{"eval", "document.querySelector('#queues tr[data-queue=mail]').click(), true"}},
      {{"wait", rows + ".length === 25"}},
      {{"eval", rows + "[0].dataset.id"}, {"name", "first"}},
      // The 5 s tick's request for the first page answers after the click's
      // for the second: the page must keep showing the second.
      {{"eval", kStaleFirstPage}},
      {{"wait", "window.afterStale !== undefined"}},
      {{"eval", "window.afterStale"}, {"name", "second_page"}},
      {{"eval", "document.querySelector('#job-states button[data-state=dead]').click(), true"}},
      {{"wait", rows + ".length === 2 && " + rows + "[0].dataset.id === 'dead-0'"}},
      {{"eval", rows + "[0].click(), true"}},
      {{"wait", "document.getElementById('lookup-result').textContent.includes('\"state\": \"dead\"')"}},
      {{"screenshot", (kArtifacts / "jobs.png").string()}},
      {{"eval", "JSON.parse(document.getElementById('lookup-result').textContent)"}, {"name", "document"}},
  }));
  ASSERT_FALSE(page.is_null()) << read_file(cluster.dir() / "browser.log");
  EXPECT_EQ(page["first"], "later-00");
  EXPECT_EQ(page["second_page"], nlohmann::json::array({"later-25", "later-26", "later-27", "later-28", "later-29"}));
  const auto& doc = page["document"];
  EXPECT_EQ(doc["id"], "dead-0");
  EXPECT_EQ(doc["queue"], "mail");
  EXPECT_EQ(doc["payload"]["encoding"], "base64") << doc.dump();
  EXPECT_EQ(doc["errors"].size(), 1U) << doc.dump();
}

// What runs where, and a queue whose ready jobs no worker serves: the page
// lists the job a worker holds and warns about the queue.
TEST(Dashboard, ShowsRunningJobsAndWarnsOfReadyJobsNoWorkerServes) {
  const int http = free_port();
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http)});
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "slow"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue_batch({{"slow", "sleep", "20000", "long-one", 0, 1}, {"orphan", "noop", "", "nobody-runs-me", 0, 1}}));
  std::filesystem::create_directories(kArtifacts);
  const auto page = browse(cluster.dir(), nlohmann::json::array({
      {{"navigate", fmt::format("http://127.0.0.1:{}/", http)}},
      {{"wait", "document.querySelector('#running tr[data-id=\"long-one\"]') !== null && "
                "document.querySelector('#running tr[data-id=\"long-one\"] td:nth-child(6)').textContent.includes('long-one slept') && "
                "document.querySelector('#queues tr[data-queue=orphan] [data-field=controls]') !== null && "
                "document.querySelector('#queues tr[data-queue=orphan] [data-field=controls]').textContent.includes('no worker')"},
       {"timeout_ms", 15000}},
      {{"screenshot", (kArtifacts / "running.png").string()}},
      {{"eval", "Array.from(document.querySelectorAll('#running tr[data-id=\"long-one\"] td')).map((td) => td.textContent)"},
       {"name", "running"}},
      {{"eval", "document.querySelector('#queues tr[data-queue=slow] [data-field=controls]').textContent"}, {"name", "served"}},
  }));
  ASSERT_FALSE(page.is_null()) << read_file(cluster.dir() / "browser.log");
  ASSERT_EQ(page["running"].size(), 6U) << page.dump();
  EXPECT_EQ(page["running"][1], "slow");
  // The sleep handler's progress: "N% long-one slept M of 20000 ms".
  EXPECT_TRUE(std::regex_match(page["running"][5].get<std::string>(), std::regex(R"(\d{1,3}% long-one slept \d+ of 20000 ms)")))
      << page.dump();
  EXPECT_EQ(page["served"], "-") << "a served queue gets no warning";
  ASSERT_EQ(run_dueq(cluster.endpoint(), "cancel long-one").code, 0);
}

// Bulk actions through the dashboard's API: only with the admin token, every
// field checked; a dry run counts, a run replays the dead jobs it selects.
TEST(Dashboard, BulkActionsNeedTheAdminTokenAndReplayWhatTheFilterSelects) {
  const int http = free_port();
  TempDir keys("token");
  std::ofstream(keys / "token") << kToken << "\n";
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http), "--dashboard-token-file", (keys / "token").string()});
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "mail"});
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue_batch({{"mail", "fail", "x", "d1", 0, 1}, {"mail", "fail", "y", "d2", 0, 1}}));
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("mail"); return s && s->dead == 2; }, 10s));
  httplib::Client web("127.0.0.1", http);
  const httplib::Headers admin{{"Authorization", std::string("Bearer ") + kToken}};
  const std::string dry = R"({"queue":"mail","action":"replay","state":"dead","id_prefix":"d1","dry_run":true})";
  EXPECT_EQ(web.Post("/api/bulk", dry, "application/json")->status, 401);
  for (const char* bad : {"[]", R"({"queue":"mail","action":"replay","state":"dead","rate":"fast"})",
                          R"({"queue":"mail","action":"replay","state":"dead","colour":"red"})",
                          R"({"queue":"bad name","action":"replay","state":"dead"})",
                          R"({"queue":"mail","action":"replay","state":"ready"})"})
    EXPECT_EQ(web.Post("/api/bulk", admin, bad, "application/json")->status, 400) << bad;
  auto counted = web.Post("/api/bulk", admin, dry, "application/json");
  ASSERT_TRUE(counted);
  ASSERT_EQ(counted->status, 200) << counted->body;
  EXPECT_EQ(nlohmann::json::parse(counted->body)["rows"][0]["matched"], "1");
  EXPECT_EQ(cluster.stats("mail")->replayed, 0) << "a dry run changes nothing";
  auto started = web.Post("/api/bulk", admin, R"({"queue":"mail","action":"replay","state":"dead","id_prefix":"d1"})",
                          "application/json");
  ASSERT_TRUE(started && started->status == 200) << (started ? started->body : "no answer");
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("mail"); return s && s->replayed == 1; }, 10s));
  ASSERT_TRUE(eventually([&] {
    auto status = web.Get("/api/bulk");
    return status && status->status == 200 && nlohmann::json::parse(status->body)["rows"][0]["status"] == "finished";
  }, 10s));
}

// The jobs panel's bulk buttons: with the token typed in, "Run all now"
// counts the queue's scheduled jobs, its confirmation starts the action,
// and the panel shows it finished; the jobs then run.
TEST(Dashboard, TheJobsPanelRunsEveryScheduledJobNowAfterItsCountIsConfirmed) {
  const int http = free_port();
  TempDir keys("token");
  std::ofstream(keys / "token") << kToken << "\n";
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http), "--dashboard-token-file", (keys / "token").string()});
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "reports"});
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 7; ++i) jobs.push_back({"reports", "noop", "", fmt::format("r-{}", i), Client::in_ms(3'600'000), 3});
  ASSERT_TRUE(client.enqueue_batch(jobs));
  std::filesystem::create_directories(kArtifacts);
  const auto page = browse(cluster.dir(), nlohmann::json::array({
      {{"navigate", fmt::format("http://127.0.0.1:{}/", http)}},
      {{"wait", "document.body.dataset.loaded === 'yes' && document.querySelector('#queues tr[data-queue=reports]') !== null"}},
      {{"eval", "document.querySelector('#queues tr[data-queue=reports]').click(), true"}},
      {{"wait", "document.querySelectorAll('#jobs tbody tr[data-id]').length === 7"}},
      {{"eval", "document.querySelector('#bulk-buttons button[data-bulk=run_now]').disabled"}, {"name", "without_token"}},
      {{"eval", fmt::format("(() => {{ const t = document.getElementById('token'); t.value = {}; "
                            "t.dispatchEvent(new Event('input')); return true; }})()", js_string(kToken))}},
      {{"wait", "!document.querySelector('#bulk-buttons button[data-bulk=run_now]').disabled"}},
      {{"eval", "document.querySelector('#bulk-buttons button[data-bulk=run_now]').click(), true"}},
      {{"wait", "document.getElementById('bulk-go') !== null"}},
      {{"eval", "document.getElementById('bulk-go').textContent"}, {"name", "confirm"}},
      {{"eval", "document.getElementById('bulk-go').click(), true"}},
      {{"wait", "document.getElementById('bulk-message').dataset.status === 'finished'"}},
      {{"screenshot", (kArtifacts / "bulk.png").string()}},
      {{"eval", "document.getElementById('bulk-message').textContent"}, {"name", "message"}},
  }));
  ASSERT_FALSE(page.is_null()) << read_file(cluster.dir() / "browser.log");
  EXPECT_EQ(page["without_token"], true);
  EXPECT_EQ(page["confirm"], "Confirm: run now 7 jobs");
  EXPECT_NE(page["message"].get<std::string>().find("run_now finished, 7 jobs changed"), std::string::npos) << page["message"];
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("reports"); return s && s->done == 7; }, 20s));
}

// A waiting job looked up on the page can have its payload replaced and be
// run now (with the admin token); the API refuses what it must: no token,
// bad bodies, a stale version, a job that is no longer waiting.
TEST(Dashboard, AWaitingJobLookedUpIsEditedAndRunNow) {
  const int http = free_port();
  TempDir keys("token");
  std::ofstream(keys / "token") << kToken << "\n";
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http), "--dashboard-token-file", (keys / "token").string()});
  Client client(cluster.endpoint());
  ASSERT_TRUE(client.enqueue({.queue = "mail", .type = "noop", .payload = "old", .id = "w-1", .due_ms = Client::in_ms(3'600'000)}));
  const std::string version = (*client.job_document("w-1"))->version;

  httplib::Client web("127.0.0.1", http);
  const httplib::Headers token{{"Authorization", std::string("Bearer ") + kToken}};
  const std::string run_now = R"({"id":"w-1","now":true})";
  EXPECT_EQ(web.Post("/api/job/reschedule", run_now, "application/json")->status, 401);
  for (const char* bad : {"not json", R"({"id":"w-1"})", R"({"id":"w-1","now":"yes"})", R"({"id":"w-1","at_ms":"soon"})",
                          R"({"id":"w 1","now":true})", R"({"id":"w-1","now":true,"at_ms":5})", R"({"id":"w-1","later":1})"})
    EXPECT_EQ(web.Post("/api/job/reschedule", token, bad, "application/json")->status, 400) << bad;
  for (const char* bad : {R"({"id":"w-1","payload":"x"})", R"({"id":"w-1","payload":7,"version":"x"})"})
    EXPECT_EQ(web.Post("/api/job/edit", token, bad, "application/json")->status, 400) << bad;
  auto stale = web.Post("/api/job/edit", token, R"({"id":"w-1","payload":"x","version":"0000000000000000"})", "application/json");
  ASSERT_TRUE(stale);
  EXPECT_EQ(stale->status, 409) << stale->body;
  EXPECT_EQ((*client.job_document("w-1"))->version, version) << "nothing changed";
  EXPECT_EQ((*client.job_document("w-1"))->state, "scheduled");

  const auto page = browse(cluster.dir(), nlohmann::json::array({
      {{"navigate", fmt::format("http://127.0.0.1:{}/", http)}},
      {{"wait", "document.body.dataset.loaded === 'yes'"}},
      {{"eval", fmt::format("document.getElementById('token').value = {}, document.getElementById('token')"
                            ".dispatchEvent(new Event('input')), true", js_string(kToken))}},
      {{"eval", "document.getElementById('lookup-id').value = 'w-1', document.querySelector('#lookup button').click(), true"}},
      {{"wait", "!document.getElementById('job-actions').hidden"}},
      {{"eval", "document.getElementById('job-payload').value"}, {"name", "payload_shown"}},
      {{"eval", "document.getElementById('job-payload').value = 'edited on the page', "
                "document.getElementById('job-edit').click(), true"}},
      {{"wait", "document.getElementById('job-message').textContent.includes('edited')"}},
      {{"eval", "document.getElementById('job-run-now').click(), true"}},
      {{"wait", "document.getElementById('job-message').textContent.includes('ready to run now')"}},
      {{"eval", "JSON.parse(document.getElementById('lookup-result').textContent).state"}, {"name", "state"}},
  }));
  ASSERT_FALSE(page.is_null()) << read_file(cluster.dir() / "browser.log");
  EXPECT_EQ(page["payload_shown"], "old");
  EXPECT_EQ(page["state"], "ready");
  const auto doc = *client.job_document("w-1");
  EXPECT_EQ(doc->payload, "edited on the page");
  EXPECT_EQ(doc->state, "ready");
  auto refused = web.Post("/api/job/edit", token, fmt::format(R"({{"id":"w-1","payload":"x","version":"{}"}})", doc->version),
                          "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 200) << "a ready job can still be edited: " << refused->body;
  cluster.start_worker({bin("dueq-example-worker"), "--broker", cluster.endpoint(), "--queue", "mail"});
  ASSERT_TRUE(eventually([&] { auto s = cluster.stats("mail"); return s && s->done == 1; }, 20s));
  auto done = web.Post("/api/job/reschedule", token, run_now, "application/json");
  ASSERT_TRUE(done);
  EXPECT_EQ(done->status, 409) << done->body;
}

// A flow parent looked up lists its children with their states and results
// (any bytes); a batch is looked up by its id; bad parameters are a 400.
TEST(Dashboard, AFlowParentShowsItsChildrenAndABatchItsMembers) {
  const int http = free_port();
  Cluster cluster({"--http", fmt::format("127.0.0.1:{}", http)});
  cluster.start_example_worker("flows", 2, (cluster.dir() / "starts.log").string());
  ASSERT_TRUE(cluster.wait_for_workers(1));
  Client client(cluster.endpoint());
  JobSpec later{.queue = "flows", .type = "echo", .payload = "not yet", .id = "late-child", .due_ms = Client::in_ms(3'600'000)};
  FlowJob flow{{.queue = "flows", .type = "echo", .id = "parent-1"}, ChildFailure::fail_parent,
               {FlowJob{{.queue = "flows", .type = "echo", .payload = std::string("r\xff", 2), .id = "child-1"}}, FlowJob{later}}};
  ASSERT_EQ(client.enqueue_flow("flows", flow)->status, GroupResult::Status::accepted);
  ASSERT_EQ(client.open_batch("flows", "batch-1", {}, {JobSpec{.queue = "flows", .type = "echo", .id = "member-1"}})->status,
            GroupResult::Status::accepted);
  ASSERT_TRUE(eventually([&] { auto c = client.children("flows", "parent-1"); return c && c->done == 1; }, 20s));

  httplib::Client web("127.0.0.1", http);
  for (const char* bad : {"/api/group?queue=flows", "/api/group?queue=flows&batch=b&parent=p", "/api/group?queue=flows&batch=b&later=1",
                          "/api/group?queue=flows&parent=a%20b", "/api/group?queue=flows&batch=b&after=x", "/api/group?batch=b",
                          "/api/group?queue=flows&batch=b&limit=101"})
    EXPECT_EQ(web.Get(bad)->status, 400) << bad;
  auto missing = web.Get("/api/group?queue=flows&batch=nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404) << missing->body;
  auto api = web.Get("/api/group?queue=flows&parent=parent-1");
  ASSERT_TRUE(api);
  ASSERT_EQ(api->status, 200) << api->body;
  EXPECT_NE(api->body.find(R"("encoding":"base64")"), std::string::npos) << "a result that is not UTF-8: " << api->body;

  const auto page = browse(cluster.dir(), nlohmann::json::array({
      {{"navigate", fmt::format("http://127.0.0.1:{}/", http)}},
      {{"wait", "document.body.dataset.loaded === 'yes'"}},
      {{"eval", "document.getElementById('lookup-id').value = 'parent-1', document.querySelector('#lookup button').click(), true"}},
      {{"wait", "!document.getElementById('group').hidden && document.getElementById('group-members').tBodies[0].rows.length === 2"}},
      {{"eval", "document.getElementById('group-summary').textContent"}, {"name", "flow"}},
      {{"eval", "Array.from(document.getElementById('group-members').tBodies[0].rows).map((r) => r.textContent).sort().join('|')"},
       {"name", "children"}},
      {{"eval", "document.getElementById('batch-id').value = 'batch-1', document.getElementById('batch-queue').value = 'flows', "
                "document.querySelector('#batch-lookup button').click(), true"}},
      {{"wait", "document.getElementById('group-summary').textContent.startsWith('batch')"}},
      {{"eval", "document.getElementById('group-summary').textContent"}, {"name", "batch"}},
  }));
  ASSERT_FALSE(page.is_null()) << read_file(cluster.dir() / "browser.log");
  EXPECT_EQ(page["flow"], "flow parent-1: waiting · total 2, pending 1, done 1, dead 0, cancelled 0");
  EXPECT_EQ(page["children"], "child-1doner\\xff|late-childscheduled");
  EXPECT_NE(page["batch"].get<std::string>().find("batch batch-1: waiting (open) · total 1"), std::string::npos) << page["batch"];
}

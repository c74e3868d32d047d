// The public job document (include/dueq/job.hpp) from a reply's fields.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/job_document.hpp"
#include "common/json_bytes.hpp"

using namespace dueq;

TEST(JobDocument, ErrorLogEntriesComeBackWithTheirEscapedBytes) {
  // As lua/lib/lost_delivery.lua writes them: worker and reason escaped.
  const auto errors = parse_error_log("attempt 1\t1000\tw\\\\1\tbo\\tom\\nx\n"
                                      "unstarted 2\t2000\t\tlease expired\n");
  ASSERT_EQ(errors.size(), 2U);
  EXPECT_EQ(errors[0].number, 1);
  EXPECT_TRUE(errors[0].counted);
  EXPECT_EQ(errors[0].at_ms, 1000);
  EXPECT_EQ(errors[0].worker, "w\\1");
  EXPECT_EQ(errors[0].reason, "bo\tom\nx");
  EXPECT_EQ(errors[1].number, 2);
  EXPECT_FALSE(errors[1].counted);
  EXPECT_EQ(errors[1].worker, "");
  EXPECT_EQ(errors[1].reason, "lease expired");
}

TEST(JobDocument, AnOlderBrokersErrorLinesAreRead) {
  const auto errors = parse_error_log("attempt 3: boom: twice\nunstarted delivery 1 (not an attempt): lost\nodd line\n");
  ASSERT_EQ(errors.size(), 3U);
  EXPECT_EQ(errors[0].number, 3);
  EXPECT_EQ(errors[0].reason, "boom: twice");
  EXPECT_FALSE(errors[0].at_ms);
  EXPECT_FALSE(errors[1].counted);
  EXPECT_EQ(errors[1].number, 1);
  EXPECT_EQ(errors[1].reason, "lost");
  EXPECT_FALSE(errors[2].number);
  EXPECT_EQ(errors[2].reason, "odd line");
}

TEST(JobDocument, FieldsBecomeNamedValuesAndWhatIsNotKnownIsNull) {
  const std::string payload("\xff\x00", 2);
  auto doc = job_document({{"id", "a"}, {"queue", "q"}, {"s", "leased"}, {"t", "send"}, {"p", payload},
                           {"d", "1764302400000"}, {"c", "1764302399000"}, {"l", "1764302430000"}, {"a", "2"},
                           {"m", "5"}, {"cx", "1"}, {"also_in", "b,c"}});
  const auto j = job_to_json(doc);
  EXPECT_EQ(j["state"], "running");
  EXPECT_EQ(j["type"], "send");
  EXPECT_EQ(bytes_from_json(j["payload"]), payload);
  EXPECT_EQ(j["payload_bytes"], 2);
  EXPECT_EQ(j["due"], "2025-11-28T04:00:00.000Z");
  EXPECT_EQ(j["due_ms"], 1764302400000);
  EXPECT_EQ(j["lease_deadline"], "2025-11-28T04:00:30.000Z");
  EXPECT_EQ(j["attempt"], 2);
  EXPECT_EQ(j["max_attempts"], 5);
  EXPECT_TRUE(j["finished"].is_null());
  EXPECT_TRUE(j["last_error"].is_null());
  EXPECT_EQ(j["cancel_requested"], true);
  EXPECT_EQ(j["also_in"], nlohmann::json::array({"b", "c"}));

  // A done job keeps its id and finish time only: the rest is null, not zero.
  const auto done = job_to_json(job_document({{"id", "a"}, {"queue", "q"}, {"s", "done"}, {"f", "1764302401000"}}));
  EXPECT_EQ(done["finished_ms"], 1764302401000);
  EXPECT_TRUE(done["type"].is_null());
  EXPECT_TRUE(done["payload"].is_null());
  EXPECT_TRUE(done["attempt"].is_null());
  EXPECT_EQ(done["record_kept"], false);
}

TEST(JobDocument, NumbersThatAreNotNumbersAreNull) {
  const auto j = job_to_json(job_document({{"id", "a"}, {"s", "ready"}, {"t", "x"}, {"d", "12x"}, {"a", ""}}));
  EXPECT_TRUE(j["due_ms"].is_null());
  EXPECT_TRUE(j["attempt"].is_null());
}

// A running job's progress (PROGRESS, kept by the broker that sent it)
// comes as an object; its text any bytes; none: null.
TEST(JobDocument, ARunningJobsProgressIsAnObjectWithItsTextAsBytes) {
  const std::string text("caf\xe9", 4);
  const auto j = job_to_json(job_document({{"id", "a"}, {"queue", "q"}, {"s", "leased"}, {"t", "x"}, {"pg", "55"},
                                           {"pt", text}, {"pa", "1764302400000"}}));
  ASSERT_TRUE(j["progress"].is_object());
  EXPECT_EQ(j["progress"]["percent"], 55);
  EXPECT_EQ(bytes_from_json(j["progress"]["text"]), text);
  EXPECT_EQ(j["progress"]["at"], "2025-11-28T04:00:00.000Z");
  EXPECT_TRUE(job_to_json(job_document({{"id", "a"}, {"s", "leased"}, {"t", "x"}}))["progress"].is_null());
  EXPECT_TRUE(job_to_json(job_document({{"id", "a"}, {"s", "leased"}, {"pg", "half"}}))["progress"].is_null())
      << "a percent that is not a number";
}

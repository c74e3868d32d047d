// DeadListCursor: the `next` of a dead-letter page and the `after` that
// brings it back.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "broker/admin/admin_commands.hpp"

using dueq::broker::DeadListCursor;

TEST(DeadListCursor, ReadsBackWhatItWrites) {
  for (const DeadListCursor& c : {DeadListCursor{"mail", 0}, DeadListCursor{"a.b-c_9", 1'000'000'000'000},
                                  DeadListCursor{std::string(64, 'q'), 7}}) {
    auto back = DeadListCursor::parse(c.text());
    ASSERT_TRUE(back) << c.text();
    EXPECT_EQ(back->queue, c.queue);
    EXPECT_EQ(back->rank, c.rank);
  }
  EXPECT_EQ((DeadListCursor{"mail", 12}).text(), "mail:12");
}

TEST(DeadListCursor, EmptyIsTheStart) {
  auto start = DeadListCursor::parse("");
  ASSERT_TRUE(start);
  EXPECT_EQ(start->queue, "");
  EXPECT_EQ(start->rank, 0);
}

TEST(DeadListCursor, RefusesWhatItNeverWrites) {
  std::vector<std::string> bad_texts = {"mail", "mail:", ":3", "mail:-1", "mail:+1", "mail:1x", "mail:99999999999999999999",
                                       "bad name:1", "a:b:1"};
  bad_texts.push_back(std::string(65, 'q'));
  bad_texts.back() += ":1";  // a name one byte too long
  for (const std::string& bad : bad_texts)
    EXPECT_FALSE(DeadListCursor::parse(bad)) << bad;
}

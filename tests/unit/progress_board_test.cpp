// How a worker keeps its running jobs' progress reports (ProgressBoard) and
// reads an exec command's progress lines: the latest report of each job
// goes out once per heartbeat, however often it was made.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>

#include "worker/exec_handler.hpp"
#include "worker/progress_board.hpp"

using namespace dueq;
using dueq::worker::ProgressBoard;

TEST(ProgressBoard, ManyReportsBetweenTwoTakesAreOneItemWithTheLatest) {
  ProgressBoard board;
  board.open({"q", "a", 7});
  board.open({"q", "b", 8});
  for (int i = 0; i <= 1000; ++i) ASSERT_TRUE(board.report(7, i / 10, "step " + std::to_string(i)));
  auto items = board.take_changed();
  ASSERT_EQ(items.size(), 1u) << "b reported nothing";
  EXPECT_EQ(items[0].id, "a");
  EXPECT_EQ(items[0].token, 7u);
  EXPECT_EQ(items[0].percent, 100u);
  EXPECT_EQ(items[0].text.data, "step 1000");
  EXPECT_TRUE(board.take_changed().empty()) << "nothing reported since";
  ASSERT_TRUE(board.report(8, 5, ""));
  ASSERT_TRUE(board.report(7, 50, "again"));
  items = board.take_changed();
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].id, "b") << "in the order they first reported since the last take";
  EXPECT_EQ(items[1].text.data, "again");
}

TEST(ProgressBoard, AClosedDeliveryIsForgottenAndItsLaterReportsDropped) {
  ProgressBoard board;
  board.open({"q", "a", 7});
  ASSERT_TRUE(board.report(7, 10, "x"));
  board.close(7);
  EXPECT_TRUE(board.take_changed().empty()) << "a report of a delivery that ended is not sent";
  EXPECT_FALSE(board.report(7, 20, "late"));
  EXPECT_FALSE(board.report(99, 20, "never opened"));
  EXPECT_TRUE(board.take_changed().empty());
  EXPECT_EQ(board.open_count(), 0u);
}

TEST(ProgressBoard, ANewBrokerGetsEachDeliverysLatestReportAgain) {
  ProgressBoard board;
  board.open({"q", "a", 1});
  board.open({"q", "b", 2});
  board.open({"q", "silent", 3});
  ASSERT_TRUE(board.report(1, 30, "a30"));
  ASSERT_TRUE(board.report(2, 60, "b60"));
  ASSERT_EQ(board.take_changed().size(), 2u);
  board.mark_all_changed();
  board.mark_all_changed();  // twice: still one item each
  auto items = board.take_changed();
  ASSERT_EQ(items.size(), 2u) << "the delivery that never reported is not sent";
  EXPECT_EQ(items[0].percent + items[1].percent, 90u);
}

TEST(ProgressBoard, PercentIsClampedAndTextCutWithoutSplittingACharacter) {
  ProgressBoard board;
  board.open({"q", "a", 1});
  ASSERT_TRUE(board.report(1, -5, ""));
  EXPECT_EQ(board.take_changed().at(0).percent, 0u);
  ASSERT_TRUE(board.report(1, 1'000'000, ""));
  EXPECT_EQ(board.take_changed().at(0).percent, 100u);
  // 255 ASCII bytes and a 2-byte character: the character would end past 256.
  std::string text(261, 'x');
  text[255] = '\xc3';
  text[256] = '\xa9';
  ASSERT_TRUE(board.report(1, 1, text));
  EXPECT_EQ(board.take_changed().at(0).text.data, std::string(255, 'x'));
  const std::string bytes("\0\xff\n", 3);
  ASSERT_TRUE(board.report(1, 1, bytes));
  EXPECT_EQ(board.take_changed().at(0).text.data, bytes) << "any bytes are carried";
  EXPECT_EQ(worker::cut_utf8("h\xc3\xa9llo", 2), "h");
  EXPECT_EQ(worker::cut_utf8("h\xc3\xa9llo", 3), "h\xc3\xa9");
}

TEST(ProgressBoard, TakesAreBoundedAndTheRestGoesNextTime) {
  ProgressBoard board;
  for (uint64_t t = 1; t <= 25; ++t) {
    board.open({"q", "j" + std::to_string(t), t});
    ASSERT_TRUE(board.report(t, 1, ""));
  }
  EXPECT_EQ(board.take_changed(10).size(), 10u);
  EXPECT_EQ(board.take_changed(10).size(), 10u);
  EXPECT_EQ(board.take_changed(10).size(), 5u);
  EXPECT_TRUE(board.take_changed(10).empty());
}

// Handler threads report while the main thread takes: no report is torn
// and the last one of each delivery is what is left to send.
TEST(ProgressBoard, ReportsFromManyThreadsEndWithEachOnesLatest) {
  ProgressBoard board;
  constexpr uint64_t kThreads = 8;
  for (uint64_t t = 1; t <= kThreads; ++t) board.open({"q", "j" + std::to_string(t), t});
  std::vector<std::thread> threads;
  for (uint64_t t = 1; t <= kThreads; ++t)
    threads.emplace_back([&board, t] {
      for (int i = 0; i <= 20'000; ++i) board.report(t, i / 200, std::to_string(t) + ":" + std::to_string(i));
    });
  std::map<uint64_t, std::string> last;
  for (int k = 0; k < 200; ++k)
    for (auto& item : board.take_changed()) last[item.token] = item.text.data;
  for (auto& th : threads) th.join();
  for (auto& item : board.take_changed()) last[item.token] = item.text.data;
  ASSERT_EQ(last.size(), kThreads);
  for (const auto& [token, text] : last) EXPECT_EQ(text, std::to_string(token) + ":20000");
}

TEST(ProgressBoard, AnExecCommandsProgressLineIsAPercentAndAText) {
  auto r = parse_progress_line("40 resized 4 of 10");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->percent, 40);
  EXPECT_EQ(r->text, "resized 4 of 10");
  r = parse_progress_line("75%");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->percent, 75);
  EXPECT_EQ(r->text, "");
  r = parse_progress_line("100% done\r");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->text, "done");
  r = parse_progress_line("250 over");
  ASSERT_TRUE(r) << "clamped when reported, not refused";
  EXPECT_EQ(r->percent, 250);
  for (const char* other : {"", "half", "40x", " 40", "40\tx", "4.5 x", "% 40"}) EXPECT_FALSE(parse_progress_line(other)) << other;
}

#include "cli/sse_parser.hpp"

#include <gtest/gtest.h>

namespace kiln::cli {
namespace {

const std::string kStream =
    ": waiting\n\n"
    "event: execution_start\nid: start\ndata: {\"id\":\"ex_1\"}\n\n"
    "event: output_chunk\r\nid: 1-0\r\ndata: {\"data\":\"a\"}\r\n\r\n"
    "event: output_chunk\rid: 2-0\rdata:no-space\r\r"
    "data: line1\ndata: line2\nretry: 100\nunknown: x\n\n"
    "event: execution_end\nid: end\ndata: {}\n\n";

void ExpectEvents(const std::vector<SseEvent>& events) {
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].event, "execution_start");
  EXPECT_EQ(events[0].id, "start");
  EXPECT_EQ(events[0].data, "{\"id\":\"ex_1\"}");
  EXPECT_EQ(events[1].event, "output_chunk");
  EXPECT_EQ(events[1].id, "1-0");
  EXPECT_EQ(events[2].id, "2-0");
  EXPECT_EQ(events[2].data, "no-space");
  EXPECT_EQ(events[3].event, "message");  // no event field
  EXPECT_EQ(events[3].id, "2-0");         // the id carries over
  EXPECT_EQ(events[3].data, "line1\nline2");
  EXPECT_EQ(events[4].event, "execution_end");
  EXPECT_EQ(events[4].id, "end");
}

TEST(SseParserTest, ParsesAWholeStream) {
  SseParser p;
  auto events = p.Feed(kStream);
  ASSERT_TRUE(events.ok());
  ExpectEvents(*events);
  EXPECT_EQ(p.last_event_id(), "end");
}

TEST(SseParserTest, SameEventsWhateverTheSplit) {
  for (size_t piece : {1u, 2u, 3u, 7u, 64u}) {
    SseParser p;
    std::vector<SseEvent> all;
    for (size_t i = 0; i < kStream.size(); i += piece) {
      auto events = p.Feed(std::string_view(kStream).substr(i, piece));
      ASSERT_TRUE(events.ok());
      all.insert(all.end(), events->begin(), events->end());
    }
    SCOPED_TRACE(piece);
    ExpectEvents(all);
  }
}

TEST(SseParserTest, NothingUntilTheBlankLine) {
  SseParser p;
  auto events = p.Feed("event: output_chunk\ndata: x\n");
  ASSERT_TRUE(events.ok());
  EXPECT_TRUE(events->empty());
  EXPECT_EQ(p.last_event_id(), "");
  events = p.Feed("\n");
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].data, "x");
}

TEST(SseParserTest, ALineTooLongIsAnError) {
  SseParser p;
  std::string big(SseParser::kMaxLineBytes + 1, 'a');
  EXPECT_FALSE(p.Feed(big).ok());
  EXPECT_FALSE(p.Feed("\n\n").ok());  // and stays one
}

}  // namespace
}  // namespace kiln::cli

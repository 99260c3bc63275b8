// The pure parts of the HTTP front end: connection admission, the route
// table, tenant quotas, SSE ids, stream-id order and the work pool.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "broker/api/sse_events.hpp"
#include "broker/http/connection_limiter.hpp"
#include "broker/http/quota_counter.hpp"
#include "broker/http/route_table.hpp"
#include "broker/http/work_pool.hpp"
#include "broker/stream/output_follower.hpp"
#include "broker/stream/unread_budget.hpp"

namespace kiln::broker {
namespace {

using ::testing::HasSubstr;
using Lane = ConnectionLimiter::Lane;

TEST(ConnectionLimiter, PerAddressThenReserveThenRefused) {
  ConnectionLimiter l(
      {.max_total = 100, .max_per_address = 2, .reserve_total = 10, .reserve_per_address = 1});
  EXPECT_EQ(l.Admit("a"), Lane::kNormal);
  EXPECT_EQ(l.Admit("a"), Lane::kNormal);
  EXPECT_EQ(l.Admit("a"), Lane::kReserve);  // health still reachable from "a"
  EXPECT_EQ(l.Admit("a"), Lane::kRefused);
  EXPECT_EQ(l.Admit("b"), Lane::kNormal);  // another address is not affected
  EXPECT_EQ(l.open(), 4u);
  EXPECT_EQ(l.open_reserve(), 1u);
  l.Release("a", Lane::kNormal);
  EXPECT_EQ(l.Admit("a"), Lane::kNormal);
  l.Release("a", Lane::kReserve);
  EXPECT_EQ(l.open_reserve(), 0u);
}

TEST(ConnectionLimiter, GlobalLimitThenReserveThenRefused) {
  ConnectionLimiter l(
      {.max_total = 3, .max_per_address = 100, .reserve_total = 2, .reserve_per_address = 2});
  for (const char* a : {"a", "b", "c"}) EXPECT_EQ(l.Admit(a), Lane::kNormal);
  EXPECT_EQ(l.Admit("d"), Lane::kReserve);
  EXPECT_EQ(l.Admit("e"), Lane::kReserve);
  EXPECT_EQ(l.Admit("f"), Lane::kRefused);
  for (const char* a : {"a", "b", "c"}) l.Release(a, Lane::kNormal);
  l.Release("d", Lane::kReserve);
  l.Release("e", Lane::kReserve);
  EXPECT_EQ(l.open(), 0u);
  // A refused admission is not counted, so a release for it changes nothing.
  l.Release("f", Lane::kRefused);
  EXPECT_EQ(l.open(), 0u);
}

RouteTable Routes() {
  return RouteTable({{"POST", "/v1/executions", "submit", Access::kToken, true},
                     {"GET", "/v1/executions/{id}", "get", Access::kToken, true},
                     {"GET", "/v1/executions/{id}/events", "events", Access::kToken, true},
                     {"POST", "/v1/executions/{id}/cancel", "cancel", Access::kToken, true},
                     {"DELETE", "/v1/sessions/{id}", "session_delete", Access::kToken, true},
                     {"GET", "/v1/health", "health", Access::kPublic, false}});
}

TEST(RouteTable, FindsRoutesAndParameters) {
  RouteTable r = Routes();
  auto m = r.Find("GET", "/v1/executions/ex_1/events");
  ASSERT_EQ(m.kind, RouteTable::Match::Kind::kFound);
  EXPECT_EQ(r.routes()[m.index].name, "events");
  EXPECT_THAT(m.params, ::testing::ElementsAre("ex_1"));
  m = r.Find("POST", "/v1/executions");
  ASSERT_EQ(m.kind, RouteTable::Match::Kind::kFound);
  EXPECT_TRUE(m.params.empty());
}

TEST(RouteTable, WrongMethodIs405WithAllow) {
  RouteTable r = Routes();
  auto m = r.Find("DELETE", "/v1/executions/ex_1");
  EXPECT_EQ(m.kind, RouteTable::Match::Kind::kMethodNotAllowed);
  EXPECT_EQ(m.allow, "GET");
  m = r.Find("GET", "/v1/executions");
  EXPECT_EQ(m.kind, RouteTable::Match::Kind::kMethodNotAllowed);
  EXPECT_EQ(m.allow, "POST");
  // The label of a wrong method is still the path's route.
  EXPECT_EQ(r.NameOf("PUT", "/v1/health"), "health");
}

TEST(RouteTable, EverythingElseIsNotFound) {
  RouteTable r = Routes();
  for (const char* path :
       {"/", "", "/v1", "/v1/executions/", "/v1/executions//events", "/v1/executions/a/b",
        "/v1/executions/a/events/x", "/v1/health/", "v1/health", "/v1/healthz"}) {
    EXPECT_EQ(r.Find("GET", path).kind, RouteTable::Match::Kind::kNotFound) << path;
    EXPECT_EQ(r.NameOf("GET", path), "other") << path;
  }
}

TEST(QuotaCounter, HoldsUpToTheLimitAndReleasesOnDestruction) {
  QuotaCounter q;
  {
    auto a = q.TryAcquire("t", 2);
    auto b = q.TryAcquire("t", 2);
    EXPECT_TRUE(a);
    EXPECT_TRUE(b);
    EXPECT_FALSE(q.TryAcquire("t", 2));
    EXPECT_TRUE(q.TryAcquire("u", 2));  // released at once: a temporary
    EXPECT_EQ(q.count("t"), 2u);
    QuotaCounter::Hold moved = std::move(a);
    EXPECT_EQ(q.count("t"), 2u);
    moved.Release();
    EXPECT_EQ(q.count("t"), 1u);
  }
  EXPECT_EQ(q.total(), 0u);
}

TEST(UnreadBudget, ChargesUpToTheLimitPerTenantAndAlwaysOneWhenEmpty) {
  UnreadBudget b;
  auto a = b.TryCharge("t", 40, 100);
  auto c = b.TryCharge("t", 60, 100);
  ASSERT_TRUE(a && c);
  EXPECT_EQ(b.held("t"), 100u);
  EXPECT_FALSE(b.TryCharge("t", 1, 100));    // full
  EXPECT_TRUE(b.TryCharge("u", 1000, 100));  // another tenant; and more than the
                                             // limit goes when nothing is held
  EXPECT_EQ(b.held("u"), 0u);                // (released at once: a temporary)
  auto copy = a;                             // copies share one charge
  a.reset();
  EXPECT_EQ(b.held("t"), 100u);
  copy.reset();
  EXPECT_EQ(b.held("t"), 60u);
  EXPECT_TRUE(b.TryCharge("t", 40, 100));
  EXPECT_FALSE(b.TryCharge("t", 41, 100));
  auto forced = b.Force("t", 500);  // a wait's answer: counted, never refused
  EXPECT_EQ(b.held("t"), 560u);
  EXPECT_FALSE(b.TryCharge("t", 1, 100));
  c.reset();
  forced.reset();
  EXPECT_EQ(b.held("t"), 0u);
}

TEST(UnreadBudget, AChargeMayOutliveTheBudget) {
  UnreadBudget::Charge kept;
  {
    UnreadBudget b;
    kept = b.TryCharge("t", 10, 100);
  }
  kept.reset();  // no use after free (ASan would say)
}

TEST(SseEvents, LastEventIdAcceptsOnlyIdsTheStreamSends) {
  EXPECT_EQ(ParseLastEventId("")->kind, LastEventId::Kind::kNone);
  EXPECT_EQ(ParseLastEventId("start")->kind, LastEventId::Kind::kStart);
  EXPECT_EQ(ParseLastEventId("end")->kind, LastEventId::Kind::kEnd);
  auto e = ParseLastEventId("1700000000000-12");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->kind, LastEventId::Kind::kEntry);
  EXPECT_EQ(e->entry, "1700000000000-12");
  EXPECT_TRUE(ParseLastEventId("18446744073709551615-18446744073709551615").ok());
  for (const char* junk :
       {"junk", "-1", "1-", "1-2-3", "12", "1 -2", "END", "0x1-2", "123456789012345678901-0",
        "start\n", "1-2\r", "99999999999999999999-0", "0-18446744073709551616"}) {
    auto bad = ParseLastEventId(junk);
    ASSERT_FALSE(bad.ok()) << junk;
    EXPECT_EQ(bad.status().code(), common::Code::kInvalidRequest);
    EXPECT_THAT(bad.status().message(), HasSubstr("Last-Event-ID"));
  }
}

TEST(SseEvents, AnEventIsOneDataLineWhateverTheData) {
  std::string e = SseEvent("output_chunk", "1-0", {{"data", "a\nb\r\nc"}});
  EXPECT_EQ(e, "event: output_chunk\nid: 1-0\ndata: {\"data\":\"a\\nb\\r\\nc\"}\n\n");
  EXPECT_EQ(SseEvent("execution_error", "", {{"x", 1}}),
            "event: execution_error\ndata: {\"x\":1}\n\n");
}

TEST(StreamIds, CompareNumerically) {
  EXPECT_LT(CompareStreamIds("0", "1-0"), 0);
  EXPECT_LT(CompareStreamIds("9-5", "10-0"), 0);  // not as strings
  EXPECT_LT(CompareStreamIds("10-2", "10-10"), 0);
  EXPECT_EQ(CompareStreamIds("10-2", "10-2"), 0);
  EXPECT_GT(CompareStreamIds("11-0", "10-99"), 0);
  EXPECT_LT(CompareStreamIds("junk", "0"), 0);
}

TEST(WorkPool, RunsTasksAndRefusesPastItsQueue) {
  std::atomic<bool> release{false};
  std::atomic<int> ran{0};
  WorkPool pool(1, 2, "test-pool");
  // One task holds the only thread; two more fill the queue; the next is refused.
  ASSERT_TRUE(pool.TryPost([&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ++ran;
  }));
  while (pool.queued() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(pool.TryPost([&] { ++ran; }));
  EXPECT_TRUE(pool.TryPost([&] { ++ran; }));
  EXPECT_FALSE(pool.TryPost([&] { ++ran; }));
  release = true;
  for (int i = 0; i < 2000 && ran < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(ran, 3);
}

}  // namespace
}  // namespace kiln::broker

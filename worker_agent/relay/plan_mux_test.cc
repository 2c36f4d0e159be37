#include "worker_agent/relay/plan_mux.h"

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

constexpr absl::Duration kWindow = absl::Milliseconds(20);
const absl::Time kStart = absl::FromUnixSeconds(1000);

/// Records what the mux sends: the steps, and the end.
class FakeSink final : public PlanSink {
 public:
  void Send(const v1::PlanUpdate& update) override {
    steps.push_back(update.step().step());
  }
  void End(const absl::Status& status) override { end = status; }

  std::vector<int64_t> steps;
  std::optional<absl::Status> end;
};

v1::StreamPlansRequest Request(int rank, int64_t from_step = 0) {
  v1::StreamPlansRequest request;
  request.set_rank(rank);
  request.set_session_id("s");
  request.set_from_step(from_step);
  return request;
}

/// A node message with step `step` for each of `ranks`.
v1::NodePlanUpdate Steps(const std::vector<int>& ranks, int64_t step) {
  v1::NodePlanUpdate update;
  for (int rank : ranks) {
    v1::RankPlanUpdate* part = update.add_updates();
    part->set_rank(rank);
    part->mutable_update()->mutable_step()->set_step(step);
  }
  return update;
}

v1::NodePlanUpdate EndOf(int rank, absl::StatusCode code) {
  v1::NodePlanUpdate update;
  v1::RankPlanUpdate* part = update.add_updates();
  part->set_rank(rank);
  part->mutable_end()->set_code(static_cast<int>(code));
  part->mutable_end()->set_message("why");
  return update;
}

TEST(PlanMuxTest, SubscriptionsWithinTheWindowShareOneUpstreamCall) {
  PlanMux mux(kWindow);
  FakeSink a, b, c;
  mux.Subscribe(&a, Request(0, 3), kStart);
  mux.Subscribe(&b, Request(1, 3), kStart + kWindow / 2);
  EXPECT_EQ(mux.GatherDeadline(), kStart + kWindow);
  EXPECT_FALSE(mux.TakeGathered(kStart + kWindow / 2).has_value());

  std::optional<PlanMux::Upstream> call = mux.TakeGathered(kStart + kWindow);
  ASSERT_TRUE(call.has_value());
  ASSERT_EQ(call->request.ranks_size(), 2);
  EXPECT_EQ(call->request.ranks(0).rank(), 0);
  EXPECT_EQ(call->request.ranks(1).rank(), 1);
  EXPECT_EQ(call->request.ranks(1).from_step(), 3);
  EXPECT_FALSE(mux.GatherDeadline().has_value());

  // A later subscription waits for a window of its own.
  mux.Subscribe(&c, Request(2), kStart + 5 * kWindow);
  EXPECT_EQ(mux.GatherDeadline(), kStart + 6 * kWindow);
  std::optional<PlanMux::Upstream> later =
      mux.TakeGathered(kStart + 6 * kWindow);
  ASSERT_TRUE(later.has_value());
  EXPECT_NE(later->id, call->id);
  EXPECT_EQ(later->request.ranks_size(), 1);
}

TEST(PlanMuxTest, EachRankGetsExactlyItsPartsAndItsEndEndsOnlyIt) {
  PlanMux mux(kWindow);
  FakeSink a, b;
  mux.Subscribe(&a, Request(0), kStart);
  mux.Subscribe(&b, Request(1), kStart);
  const int64_t id = mux.TakeGathered(kStart + kWindow)->id;

  mux.Deliver(id, Steps({0, 1}, 0));
  mux.Deliver(id, Steps({1}, 1));
  mux.Deliver(id, EndOf(0, absl::StatusCode::kAborted));
  mux.Deliver(id, Steps({1}, 2));

  EXPECT_EQ(a.steps, (std::vector<int64_t>{0}));
  ASSERT_TRUE(a.end.has_value());
  EXPECT_EQ(a.end->code(), absl::StatusCode::kAborted);
  EXPECT_EQ(a.end->message(), "why");
  EXPECT_EQ(b.steps, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_FALSE(b.end.has_value());
}

TEST(PlanMuxTest, TheUpstreamStatusEndsTheRanksStillOnIt) {
  PlanMux mux(kWindow);
  FakeSink a, b;
  mux.Subscribe(&a, Request(0), kStart);
  mux.Subscribe(&b, Request(1), kStart);
  const int64_t id = mux.TakeGathered(kStart + kWindow)->id;
  mux.Deliver(id, EndOf(1, absl::StatusCode::kOk));

  mux.EndUpstream(id, absl::UnauthenticatedError("wrong token"));
  ASSERT_TRUE(a.end.has_value());
  EXPECT_EQ(*a.end, absl::UnauthenticatedError("wrong token"));
  // b had ended OK before: its end stays.
  EXPECT_TRUE(b.end->ok());
}

TEST(PlanMuxTest, ARankThatSubscribesAgainGetsANewCallAndTheOldPartEnds) {
  PlanMux mux(kWindow);
  FakeSink old_a, b, new_a;
  mux.Subscribe(&old_a, Request(0), kStart);
  mux.Subscribe(&b, Request(1), kStart);
  const int64_t first = mux.TakeGathered(kStart + kWindow)->id;

  mux.Subscribe(&new_a, Request(0, 7), kStart + 10 * kWindow);
  std::optional<PlanMux::Upstream> second =
      mux.TakeGathered(kStart + 11 * kWindow);
  ASSERT_TRUE(second.has_value());
  ASSERT_EQ(second->request.ranks_size(), 1);
  EXPECT_EQ(second->request.ranks(0).from_step(), 7);

  // The scheduler ends the old part; the new one flows on the new call.
  mux.Deliver(first, EndOf(0, absl::StatusCode::kAborted));
  mux.Deliver(second->id, Steps({0}, 7));
  mux.Deliver(first, Steps({1}, 7));
  EXPECT_EQ(old_a.end->code(), absl::StatusCode::kAborted);
  EXPECT_EQ(new_a.steps, (std::vector<int64_t>{7}));
  EXPECT_EQ(b.steps, (std::vector<int64_t>{7}));
}

TEST(PlanMuxTest, ATwicePendingRankKeepsTheNewerSubscription) {
  PlanMux mux(kWindow);
  FakeSink older, newer;
  mux.Subscribe(&older, Request(0, 1), kStart);
  mux.Subscribe(&newer, Request(0, 2), kStart);
  ASSERT_TRUE(older.end.has_value());
  EXPECT_EQ(older.end->code(), absl::StatusCode::kAborted);
  std::optional<PlanMux::Upstream> call = mux.TakeGathered(kStart + kWindow);
  ASSERT_EQ(call->request.ranks_size(), 1);
  EXPECT_EQ(call->request.ranks(0).from_step(), 2);
}

TEST(PlanMuxTest, TheLastRankLeavingACallAsksToCancelIt) {
  PlanMux mux(kWindow);
  FakeSink a, b, pending;
  mux.Subscribe(&a, Request(0), kStart);
  mux.Subscribe(&b, Request(1), kStart);
  const int64_t id = mux.TakeGathered(kStart + kWindow)->id;

  EXPECT_EQ(mux.Unsubscribe(&a), std::nullopt);
  mux.Deliver(id, Steps({0, 1}, 0));
  EXPECT_TRUE(a.steps.empty());
  EXPECT_FALSE(a.end.has_value());
  EXPECT_EQ(mux.Unsubscribe(&b), id);
  EXPECT_EQ(mux.upstream_calls(), 0);

  // A pending subscription that leaves never goes upstream.
  mux.Subscribe(&pending, Request(2), kStart);
  EXPECT_EQ(mux.Unsubscribe(&pending), std::nullopt);
  EXPECT_FALSE(mux.TakeGathered(kStart + kWindow).has_value());
}

TEST(PlanMuxTest, EndAllEndsPendingAndUpstreamSinks) {
  PlanMux mux(kWindow);
  FakeSink a, b;
  mux.Subscribe(&a, Request(0), kStart);
  ASSERT_TRUE(mux.TakeGathered(kStart + kWindow).has_value());
  mux.Subscribe(&b, Request(1), kStart);
  mux.EndAll(absl::UnavailableError("down"));
  EXPECT_EQ(a.end->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(b.end->code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(mux.GatherDeadline().has_value());
}

}  // namespace
}  // namespace dcp

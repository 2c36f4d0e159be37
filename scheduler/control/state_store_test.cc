#include "scheduler/control/state_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/control/file_state_store.h"
#include "scheduler/control/state.pb.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

constexpr int kWorld = 2;

state::JobIdentity Job() {
  state::JobIdentity job;
  job.set_session_id("s1");
  job.set_samples(300);
  job.set_lengths_digest(0x1234);
  job.set_window(4096);
  job.set_tokens_per_step(8192);
  job.set_seed(7);
  job.set_balance_steps(0);
  job.set_world_size(kWorld);
  job.set_gpus_per_node(2);
  job.set_model("tiny layers=1");
  return job;
}

state::StateRecord JobRecord() {
  state::StateRecord r;
  *r.mutable_job() = Job();
  return r;
}

state::StateRecord PlanRecord(int64_t step) {
  state::StateRecord r;
  v1::StepPlan& plan = *r.mutable_planned_step();
  plan.set_step(step);
  plan.add_samples(10 * step);
  plan.add_samples(10 * step + 1);
  plan.set_total_tokens(100 + step);
  return r;
}

state::StateRecord ReportRecord(int64_t step, int rank) {
  state::StateRecord r;
  r.mutable_report()->set_step(step);
  r.mutable_report()->set_rank(rank);
  r.mutable_report()->set_sync_seconds(0.5 + rank);
  return r;
}

state::StateRecord ModelRecord(double lin, int64_t refits) {
  state::StateRecord r;
  r.mutable_model()->set_lin(lin);
  r.mutable_model()->set_refits(refits);
  return r;
}

state::StateRecord StoreRecord(const std::string& key,
                               const std::string& value) {
  state::StateRecord r;
  r.mutable_store_set()->set_key(key);
  r.mutable_store_set()->set_value(value);
  return r;
}

/// A state as comparable text: its snapshot, one record a line.
std::string Dump(const DurableState& state) {
  std::string out;
  for (const state::StateRecord& r : SnapshotRecords(state)) {
    absl::StrAppend(&out, r.ShortDebugString(), "\n");
  }
  return out;
}

DurableState Apply(const std::vector<state::StateRecord>& records) {
  DurableState state;
  for (const state::StateRecord& r : records) {
    EXPECT_TRUE(ApplyStateRecord(r, &state).ok()) << r.ShortDebugString();
  }
  return state;
}

/// What a scheduler of the tests writes: the job, steps 0..3 planned, step
/// 0 reported by both ranks, step 1 by rank 1, a refit, two keys.
std::vector<state::StateRecord> History() {
  return {JobRecord(),
          PlanRecord(0),
          PlanRecord(1),
          ReportRecord(0, 1),
          StoreRecord("s1/e0/g0-1/0", "addr0"),
          ReportRecord(0, 0),
          ModelRecord(2.5, 1),
          PlanRecord(2),
          ReportRecord(1, 1),
          StoreRecord("s1/e0/g0-1/1", "addr1"),
          PlanRecord(3)};
}

// ------------------------------------------------------- the state itself

TEST(DurableStateTest, AStepCompletesWhenEveryRankReportedIt) {
  const DurableState state = Apply(History());
  EXPECT_EQ(state.completed_steps, 1);
  EXPECT_EQ(state.planned_steps(), 4);
  ASSERT_EQ(state.steps.size(), 3);
  EXPECT_EQ(state.steps[0].plan.step(), 1);
  ASSERT_EQ(state.steps[0].reports.size(), 1);
  EXPECT_EQ(state.steps[0].reports[0].rank(), 1);
  ASSERT_TRUE(state.model.has_value());
  EXPECT_EQ(state.model->lin(), 2.5);
  EXPECT_EQ(state.store.size(), 2);
}

TEST(DurableStateTest, RetriesChangeNothing) {
  std::vector<state::StateRecord> records = History();
  const std::string before = Dump(Apply(records));
  records.push_back(ReportRecord(1, 1));  // a second report of rank 1
  records.push_back(ReportRecord(0, 0));  // a report of a completed step
  EXPECT_EQ(Dump(Apply(records)), before);
}

TEST(DurableStateTest, ReportsCompleteStepsInOrder) {
  // Step 1 has every report before step 0 does: both complete together.
  DurableState state =
      Apply({JobRecord(), PlanRecord(0), PlanRecord(1), ReportRecord(1, 0),
             ReportRecord(1, 1), ReportRecord(0, 0)});
  EXPECT_EQ(state.completed_steps, 0);
  ASSERT_TRUE(ApplyStateRecord(ReportRecord(0, 1), &state).ok());
  EXPECT_EQ(state.completed_steps, 2);
  EXPECT_TRUE(state.steps.empty());
}

TEST(DurableStateTest, RefusesRecordsOutOfPlace) {
  DurableState empty;
  EXPECT_THAT(ApplyStateRecord(PlanRecord(0), &empty).message(),
              HasSubstr("before the job"));
  DurableState state = Apply({JobRecord(), PlanRecord(0)});
  const std::vector<std::pair<state::StateRecord, std::string>> bad = {
      {JobRecord(), "a second job"},
      {PlanRecord(0), "the plan of step 0 follows step 0"},
      {PlanRecord(2), "the plan of step 2 follows step 0"},
      {ReportRecord(1, 0), "never planned"},
      {ReportRecord(0, kWorld), "a report of rank 2 in a world of 2"},
      {state::StateRecord(), "empty or unknown"},
  };
  for (const auto& [record, why] : bad) {
    const absl::Status s = ApplyStateRecord(record, &state);
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr(why));
  }
  EXPECT_EQ(state.planned_steps(), 1) << "a refused record changed the state";
}

// The job's world size is a count the state builds its member list from:
// none, a negative one and one past kMaxWorldSize are refused (a fuzzed log
// once asked for 2^29 members).
TEST(DurableStateTest, RefusesAJobOfNoRanksOrTooMany) {
  for (const int64_t world : {int64_t{0}, int64_t{-3},
                              int64_t{kMaxWorldSize} + 1}) {
    state::StateRecord job = JobRecord();
    job.mutable_job()->set_world_size(static_cast<int32_t>(world));
    DurableState state;
    const absl::Status s = ApplyStateRecord(job, &state);
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("a job of ", world)));
    EXPECT_FALSE(state.job.has_value());
  }
  state::StateRecord largest = JobRecord();
  largest.mutable_job()->set_world_size(kMaxWorldSize);
  DurableState state;
  ASSERT_TRUE(ApplyStateRecord(largest, &state).ok());
  EXPECT_EQ(state.members.size(), static_cast<size_t>(kMaxWorldSize));
}

TEST(DurableStateTest, PurgeRemovesOlderEpochsOnly) {
  state::StateRecord purge;
  purge.set_store_purge_before(1);
  DurableState state = Apply({JobRecord(), StoreRecord("s1/e0/g0-1/0", "a"),
                              StoreRecord("s1/e1/g0-1/0", "b"),
                              StoreRecord("s1/other", "c"), purge});
  EXPECT_EQ(state.store.size(), 2);
  EXPECT_EQ(state.store.count("s1/e0/g0-1/0"), 0);
}

TEST(DurableStateTest, ASnapshotRebuildsTheState) {
  const DurableState state = Apply(History());
  const DurableState rebuilt = Apply(SnapshotRecords(state));
  EXPECT_EQ(Dump(rebuilt), Dump(state));
  EXPECT_EQ(rebuilt.completed_steps, 1);
  EXPECT_EQ(rebuilt.steps.size(), 3);
}

// ------------------------------------------------- shrinks and grows

/// A change to `epoch` with `members`, abandoning the `history`'s steps
/// [from, to) with the samples `PlanRecord` gives them.
state::StateRecord WorldRecord(int64_t epoch, std::vector<int> members,
                               int64_t from, int64_t to) {
  state::StateRecord r;
  state::WorldChange& change = *r.mutable_world_change();
  change.set_epoch(epoch);
  for (int rank : members) change.add_members(rank);
  change.set_abandoned_from(from);
  change.set_abandoned_to(to);
  for (int64_t step = from; step < to; ++step) {
    state::AbandonedStep& abandoned = *change.add_reserve();
    abandoned.set_step(step);
    abandoned.mutable_samples()->CopyFrom(
        PlanRecord(step).planned_step().samples());
  }
  return r;
}

/// A plan of step `step` that trains the samples of step `of`, in reverse
/// order (a re-serve need not keep the order).
state::StateRecord ReservePlanRecord(int64_t step, int64_t of, int64_t epoch) {
  state::StateRecord r = PlanRecord(of);
  v1::StepPlan& plan = *r.mutable_planned_step();
  plan.set_step(step);
  plan.set_epoch(epoch);
  std::reverse(plan.mutable_samples()->begin(), plan.mutable_samples()->end());
  return r;
}

/// The history, then rank 1 fails: steps 1..3 abandoned (step 1 had rank
/// 1's report), epoch 1 of rank 0 alone; step 4 re-serves step 1 and rank 0
/// reports it.
std::vector<state::StateRecord> ShrunkHistory() {
  std::vector<state::StateRecord> records = History();
  records.push_back(WorldRecord(1, {0}, 1, 4));
  records.push_back(ReservePlanRecord(4, 1, 1));
  records.push_back(ReportRecord(4, 0));
  return records;
}

TEST(DurableStateTest, AShrinkAbandonsTheOpenStepsAndReservesTheirSamples) {
  const DurableState state = Apply(ShrunkHistory());
  EXPECT_EQ(state.epoch, 1);
  EXPECT_EQ(state.members, std::vector<int>{0});
  EXPECT_EQ(state.abandoned,
            (std::vector<std::pair<int64_t, int64_t>>{{1, 4}}));
  // Step 4 completed with rank 0's report alone: its world is rank 0.
  EXPECT_EQ(state.completed_steps, 5);
  EXPECT_TRUE(state.steps.empty());
  EXPECT_EQ(state.reserved_planned, 1);
  EXPECT_EQ(state.epoch_abandoned_from, 1);
  EXPECT_EQ(Apply(SnapshotRecords(state)).epoch_abandoned_from, 1);
  ASSERT_EQ(state.reserve.size(), 2u);
  EXPECT_EQ(state.reserve[0].step(), 2);
  EXPECT_EQ(state.reserve[1].step(), 3);
  EXPECT_TRUE(state.world_changed());
}

TEST(DurableStateTest, AfterAShrinkPlansReserveInOrderAndOnlyMembersReport) {
  DurableState state = Apply(ShrunkHistory());
  // The next plan must train step 2's samples, not step 3's or new ones.
  for (const state::StateRecord& wrong :
       {ReservePlanRecord(5, 3, 1), PlanRecord(5)}) {
    const absl::Status s = ApplyStateRecord(wrong, &state);
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("samples of abandoned step 2"));
  }
  ASSERT_TRUE(ApplyStateRecord(ReservePlanRecord(5, 2, 1), &state).ok());
  EXPECT_EQ(state.steps.back().reserve_of, 2);
  const absl::Status outsider = ApplyStateRecord(ReportRecord(5, 1), &state);
  EXPECT_TRUE(absl::IsFailedPrecondition(outsider)) << outsider;
  EXPECT_THAT(outsider.message(), HasSubstr("whose world it is not in"));
  // A late report of an abandoned step changes nothing.
  const std::string before = Dump(state);
  ASSERT_TRUE(ApplyStateRecord(ReportRecord(2, 0), &state).ok());
  EXPECT_EQ(Dump(state), before);
}

TEST(DurableStateTest, AGrowKeepsTheOldEpochsStepsInTheirWorld) {
  std::vector<state::StateRecord> records = ShrunkHistory();
  records.push_back(ReservePlanRecord(5, 2, 1));
  records.push_back(WorldRecord(2, {0, 1}, 6, 6));  // rank 1 is back
  records.push_back(ReservePlanRecord(6, 3, 2));
  DurableState state = Apply(records);
  EXPECT_EQ(state.epoch, 2);
  EXPECT_EQ(state.members, (std::vector<int>{0, 1}));
  ASSERT_EQ(state.steps.size(), 2u);
  EXPECT_EQ(state.steps[0].members, std::vector<int>{0});
  EXPECT_EQ(state.steps[1].members, (std::vector<int>{0, 1}));
  // Step 5 (epoch 1) completes with rank 0 alone; step 6 needs both.
  ASSERT_TRUE(ApplyStateRecord(ReportRecord(5, 0), &state).ok());
  ASSERT_TRUE(ApplyStateRecord(ReportRecord(6, 0), &state).ok());
  EXPECT_EQ(state.completed_steps, 6);
  EXPECT_TRUE(state.world_changed());
}

TEST(DurableStateTest, RefusesWorldChangesThatDoNotFit) {
  DurableState state = Apply(History());  // steps [1, 4) open
  state::StateRecord short_reserve = WorldRecord(1, {0}, 1, 4);
  short_reserve.mutable_world_change()->mutable_reserve()->RemoveLast();
  const std::vector<std::pair<state::StateRecord, std::string>> bad = {
      {WorldRecord(0, {0}, 1, 4), "world change to epoch 0 in epoch 0"},
      {WorldRecord(1, {}, 1, 4), "not an ascending subset"},
      {WorldRecord(1, {1, 0}, 1, 4), "not an ascending subset"},
      {WorldRecord(1, {0, kWorld}, 1, 4), "not an ascending subset"},
      {WorldRecord(1, {0}, 1, 3), "abandoning steps [1, 3)"},
      {WorldRecord(1, {0}, 2, 4), "abandoning steps [2, 4)"},
      {short_reserve, "abandoning 3 steps with 2 to re-serve"},
  };
  const std::string before = Dump(state);
  for (const auto& [record, why] : bad) {
    const absl::Status s = ApplyStateRecord(record, &state);
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr(why));
  }
  EXPECT_EQ(Dump(state), before) << "a refused record changed the state";
  // A report made durable just before the shrink completed step 1: the
  // shrink still abandons it (the agents were told so).
  ASSERT_TRUE(ApplyStateRecord(ReportRecord(1, 0), &state).ok());
  ASSERT_EQ(state.completed_steps, 2);
  ASSERT_TRUE(ApplyStateRecord(WorldRecord(1, {0}, 1, 4), &state).ok());
  EXPECT_EQ(state.reserve.size(), 3u);
}

TEST(DurableStateTest, ASnapshotRebuildsAShrunkAndGrownState) {
  std::vector<state::StateRecord> records = ShrunkHistory();
  records.push_back(ReservePlanRecord(5, 2, 1));
  records.push_back(WorldRecord(2, {0, 1}, 6, 6));
  records.push_back(ReservePlanRecord(6, 3, 2));
  records.push_back(ReportRecord(6, 1));
  const DurableState state = Apply(records);
  const DurableState rebuilt = Apply(SnapshotRecords(state));
  EXPECT_EQ(Dump(rebuilt), Dump(state));
  EXPECT_EQ(rebuilt.members, state.members);
  EXPECT_EQ(rebuilt.abandoned, state.abandoned);
  EXPECT_EQ(rebuilt.reserved_planned, 3);
  EXPECT_EQ(rebuilt.epoch_abandoned_from, -1);  // a grow began epoch 2
  ASSERT_EQ(rebuilt.steps.size(), 2u);
  EXPECT_EQ(rebuilt.steps[0].members, std::vector<int>{0});
  EXPECT_EQ(rebuilt.steps[1].reserve_of, 3);
  ASSERT_EQ(rebuilt.steps[1].reports.size(), 1u);
}

TEST(CheckSameJobTest, NamesTheFieldThatDiffers) {
  EXPECT_TRUE(CheckSameJob(Job(), Job()).ok());
  state::JobIdentity unnamed = Job();
  unnamed.clear_session_id();  // a restart draws none: the stored one holds
  EXPECT_TRUE(CheckSameJob(Job(), unnamed).ok());
  const std::vector<std::pair<void (*)(state::JobIdentity&), std::string>>
      changes = {
          {[](state::JobIdentity& j) { j.set_session_id("s2"); },
           "session_id is s1, this scheduler's is s2"},
          {[](state::JobIdentity& j) { j.set_samples(301); },
           "lengths is 300 samples"},
          {[](state::JobIdentity& j) { j.set_lengths_digest(1); }, "lengths"},
          {[](state::JobIdentity& j) { j.set_window(1); }, "window is 4096"},
          {[](state::JobIdentity& j) { j.set_tokens_per_step(1); },
           "tokens_per_step"},
          {[](state::JobIdentity& j) { j.set_seed(8); },
           "seed is 7, this scheduler's is 8"},
          {[](state::JobIdentity& j) { j.set_balance_steps(2); },
           "balance_steps"},
          {[](state::JobIdentity& j) { j.set_world_size(4); },
           "world_size is 2, this scheduler's is 4"},
          {[](state::JobIdentity& j) { j.set_gpus_per_node(8); },
           "gpus_per_node"},
          {[](state::JobIdentity& j) { j.set_model("other"); },
           "model is 'tiny layers=1', this scheduler's is 'other'"},
      };
  for (const auto& [change, message] : changes) {
    state::JobIdentity current = Job();
    change(current);
    const absl::Status s = CheckSameJob(Job(), current);
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr(message));
  }
}

// ------------------------------------------------------- the file store

std::unique_ptr<FileStateStore> OpenStore(const std::string& dir,
                                          int64_t compact_bytes = 64 << 20) {
  FileStateStoreOptions options;
  options.dir = dir;
  options.compact_bytes = compact_bytes;
  absl::StatusOr<std::unique_ptr<FileStateStore>> store =
      FileStateStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

void WriteAll(StateStoreInterface& store,
              const std::vector<state::StateRecord>& records) {
  for (const state::StateRecord& r : records) {
    ASSERT_TRUE(store.Write(r).ok()) << r.ShortDebugString();
  }
}

TEST(FileStateStoreTest, WhatWasWrittenIsRecovered) {
  const std::string dir = TestTmpPath("round-trip");
  {
    std::unique_ptr<FileStateStore> store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    EXPECT_FALSE(store->recovery().existed);
    EXPECT_FALSE(store->recovered().job.has_value());
    WriteAll(*store, History());
  }
  std::unique_ptr<FileStateStore> store = OpenStore(dir);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->recovery().existed);
  EXPECT_EQ(store->recovery().records, History().size());
  EXPECT_EQ(store->recovery().dropped_bytes, 0);
  EXPECT_EQ(Dump(store->recovered()), Dump(Apply(History())));
}

TEST(FileStateStoreTest, ATornTailIsReportedAndSkipped) {
  const std::string dir = TestTmpPath("torn");
  std::vector<state::StateRecord> records = History();
  {
    std::unique_ptr<FileStateStore> store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    WriteAll(*store, records);
  }
  // The last write (plan 3) torn by a crash: half of it reached the disk.
  const std::string path = FileStateStore::LogPath(dir);
  const std::string whole = ReadWholeFile(path);
  const size_t last = PlanRecord(3).SerializeAsString().size() + 8;
  OverwriteFile(path, whole.substr(0, whole.size() - last / 2));
  records.pop_back();
  {
    std::unique_ptr<FileStateStore> store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->recovery().dropped_bytes, last - last / 2);
    EXPECT_THAT(store->recovery().tail_problem, HasSubstr("is torn"));
    EXPECT_EQ(Dump(store->recovered()), Dump(Apply(records)));
    // Writing on after the cut: the torn bytes are gone, not in between.
    ASSERT_TRUE(store->Write(PlanRecord(3)).ok());
  }
  std::unique_ptr<FileStateStore> store = OpenStore(dir);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->recovery().dropped_bytes, 0);
  EXPECT_EQ(Dump(store->recovered()), Dump(Apply(History())));
}

TEST(FileStateStoreTest, ACorruptRecordIsReportedAndNothingAfterItTrusted) {
  const std::string dir = TestTmpPath("corrupt");
  {
    std::unique_ptr<FileStateStore> store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    WriteAll(*store, History());
  }
  // Garble a byte of the last record's payload.
  const std::string path = FileStateStore::LogPath(dir);
  std::string bytes = ReadWholeFile(path);
  bytes[bytes.size() - 2] ^= 0x40;
  OverwriteFile(path, bytes);
  std::vector<state::StateRecord> trusted = History();
  trusted.pop_back();
  std::unique_ptr<FileStateStore> store = OpenStore(dir);
  ASSERT_NE(store, nullptr);
  EXPECT_THAT(store->recovery().tail_problem, HasSubstr("is corrupt"));
  EXPECT_GT(store->recovery().dropped_bytes, 0);
  EXPECT_EQ(Dump(store->recovered()), Dump(Apply(trusted)));
}

TEST(FileStateStoreTest, AnotherLogIsRefused) {
  const std::string dir = TestTmpPath("not-a-state");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  OverwriteFile(FileStateStore::LogPath(dir), "not a log at all");
  FileStateStoreOptions options;
  options.dir = dir;
  const absl::Status s = FileStateStore::Open(options).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("not a dcp record log"));
}

TEST(FileStateStoreTest, OneProcessAtATime) {
  const std::string dir = TestTmpPath("locked");
  std::unique_ptr<FileStateStore> first = OpenStore(dir);
  ASSERT_NE(first, nullptr);
  FileStateStoreOptions options;
  options.dir = dir;
  const absl::Status second = FileStateStore::Open(options).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(second)) << second;
  EXPECT_THAT(second.message(), HasSubstr("in use by another process"));
  first.reset();
  EXPECT_NE(OpenStore(dir), nullptr);
}

TEST(FileStateStoreTest, ARefusedRecordIsNotWritten) {
  const std::string dir = TestTmpPath("refused");
  {
    std::unique_ptr<FileStateStore> store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    WriteAll(*store, {JobRecord(), PlanRecord(0)});
    EXPECT_TRUE(absl::IsFailedPrecondition(store->Write(PlanRecord(5))));
  }
  std::unique_ptr<FileStateStore> store = OpenStore(dir);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->recovery().records, 2);
}

TEST(FileStateStoreTest, SnapshotsKeepTheLogSmall) {
  const std::string dir = TestTmpPath("compact");
  constexpr int64_t kCompactBytes = 4096;
  constexpr int kSteps = 500;
  std::vector<state::StateRecord> records = {JobRecord()};
  {
    std::unique_ptr<FileStateStore> store = OpenStore(dir, kCompactBytes);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Write(JobRecord()).ok());
    for (int s = 0; s < kSteps; ++s) {
      // Each step completes before the next is planned, but the last.
      std::vector<state::StateRecord> step = {PlanRecord(s)};
      if (s + 1 < kSteps) {
        step.push_back(ReportRecord(s, 0));
        step.push_back(ReportRecord(s, 1));
      }
      WriteAll(*store, step);
      records.insert(records.end(), step.begin(), step.end());
      EXPECT_LT(store->log_bytes(), 3 * kCompactBytes) << "step " << s;
    }
    EXPECT_GT(store->compactions(), 0);
  }
  std::unique_ptr<FileStateStore> store = OpenStore(dir, kCompactBytes);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->recovered().completed_steps, kSteps - 1);
  EXPECT_EQ(Dump(store->recovered()), Dump(Apply(records)));
}

TEST(FileStateStoreTest, ConcurrentWritesAllSurvive) {
  const std::string dir = TestTmpPath("concurrent");
  constexpr int kThreads = 4;
  constexpr int kKeys = 50;
  {
    std::unique_ptr<FileStateStore> store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Write(JobRecord()).ok());
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&store, t] {
        for (int k = 0; k < kKeys; ++k) {
          EXPECT_TRUE(store
                          ->Write(StoreRecord(absl::StrCat("s1/k", t, "-", k),
                                              absl::StrCat(t * k)))
                          .ok());
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }
  std::unique_ptr<FileStateStore> store = OpenStore(dir);
  ASSERT_NE(store, nullptr);
  const DurableState& state = store->recovered();
  ASSERT_EQ(state.store.size(), kThreads * kKeys);
  EXPECT_EQ(state.store.at("s1/k3-7"), "21");
}

// ------------------------------------------------------------- the fake

TEST(FakeStateStoreTest, RestartsFromWhatItHoldsAndFailsOnRequest) {
  FakeStateStore first;
  WriteAll(first, History());
  EXPECT_EQ(first.written().size(), History().size());
  FakeStateStore second(first.state());
  EXPECT_EQ(Dump(second.recovered()), Dump(Apply(History())));
  second.FailWrites(absl::DataLossError("disk gone"));
  EXPECT_TRUE(absl::IsDataLoss(second.Write(PlanRecord(4))));
  EXPECT_EQ(second.state().planned_steps(), 4);
}

}  // namespace
}  // namespace dcp

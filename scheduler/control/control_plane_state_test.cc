// The control plane's durable state: a control plane that "crashes" (is
// destroyed with no drain and no clean stop) and one started again on the
// same state directory serves the same steps, knows the same reports, the
// same model and keys, and plans on from where the first one stopped.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "scheduler/control/control_plane.h"
#include "scheduler/control/file_state_store.h"
#include "scheduler/control/job_journal.h"
#include "scheduler/control/state_store.h"
#include "scheduler/eval/simulator.h"
#include "scheduler/planner/cost_model.h"
#include "scheduler/planner/plan_proto.h"
#include "scheduler/planner/step_builder.h"
#include "scheduler/planner/test_data.h"

namespace dcp {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

constexpr int kWorld = 4;

std::string TmpDir(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

class ControlPlaneStateTest : public ::testing::Test {
 protected:
  /// A deterministic control plane (no planner thread) keeping its state in
  /// `store`; the session id is drawn, so a resume must keep it.
  ControlPlaneOptions Options(StateStoreInterface* store) {
    ControlPlaneOptions o;
    o.lengths = testing_data::SkewedTrace(4000, /*seed=*/12345);
    o.window = 32768;
    o.model = *BuiltinModel("llama3-8b");
    o.world_size = kWorld;
    o.tokens_per_step = 65536;
    o.seed = 7;
    o.lookahead_steps = 3;
    o.refit_every = 8;
    o.start_planner_thread = false;
    o.clock = &clock_;
    o.state_store = store;
    return o;
  }

  std::unique_ptr<ControlPlane> Start(ControlPlaneOptions options) {
    absl::StatusOr<std::unique_ptr<ControlPlane>> cp =
        ControlPlane::Start(std::move(options));
    EXPECT_TRUE(cp.ok()) << cp.status();
    return cp.ok() ? *std::move(cp) : nullptr;
  }

  static std::unique_ptr<FileStateStore> OpenStore(const std::string& dir) {
    FileStateStoreOptions options;
    options.dir = dir;
    absl::StatusOr<std::unique_ptr<FileStateStore>> store =
        FileStateStore::Open(options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  static v1::RegisterRequest Hello(int rank) {
    v1::RegisterRequest r;
    r.set_rank(rank);
    r.set_host("h");
    r.set_world_size(kWorld);
    return r;
  }

  static void RegisterAll(ControlPlane& cp) {
    for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(cp.Register(Hello(r)).ok());
  }

  /// Rank `view.rank()`'s timings of its view: the reference cluster's task
  /// and sync times, scaled by `slowdown`.
  static v1::TimingReport Report(const v1::RankStep& view,
                                 double slowdown = 1.0) {
    static const ReferenceCluster* cluster = new ReferenceCluster(
        ClusterSpec::H200(), *BuiltinModel("llama3-8b"), kWorld);
    v1::TimingReport report;
    report.set_epoch(view.epoch());
    report.set_step(view.step());
    report.set_rank(view.rank());
    for (int i = 0; i < view.tasks_size(); ++i) {
      const v1::Task& task = view.tasks(i);
      const std::vector<int> ranks(task.ranks().begin(), task.ranks().end());
      const std::vector<int64_t> lengths(task.lengths().begin(),
                                         task.lengths().end());
      v1::TaskTiming* t = report.add_tasks();
      t->set_task_index(task.task_index());
      t->set_micro_step(i);
      t->set_group_size(task.ranks_size());
      int64_t tokens = 0;
      for (int64_t l : lengths) tokens += l;
      t->set_tokens(tokens);
      t->set_recompute(task.recompute());
      t->set_seconds(
          cluster->Cost(ranks, lengths, task.recompute(), task.ulysses())
              .total_s *
          slowdown);
    }
    report.set_sync_seconds(cluster->SyncSeconds() * slowdown);
    return report;
  }

  /// Ranks `ranks` report `step` (from the kept plan).
  static void ReportStep(ControlPlane& cp, int64_t step,
                         const std::vector<int>& ranks, double slowdown = 1) {
    absl::StatusOr<v1::StepPlan> plan = cp.PlannedStep(step);
    ASSERT_TRUE(plan.ok()) << plan.status();
    for (int r : ranks) {
      absl::StatusOr<v1::ReportAck> ack =
          cp.ReportTimings(Report(RankView(*plan, r), slowdown));
      ASSERT_TRUE(ack.ok()) << ack.status();
    }
  }

  /// The steps stream `id` sends right now, by step; the drain marker's
  /// last step in `*drain` (when given).
  static std::map<int64_t, v1::RankStep> Pull(ControlPlane& cp, int64_t id,
                                              int64_t* drain = nullptr) {
    std::map<int64_t, v1::RankStep> out;
    while (true) {
      const StreamNext next = cp.NextForStream(id);
      if (next.kind != StreamNext::Kind::kSend) return out;
      if (next.update->has_drain() && drain != nullptr) {
        *drain = next.update->drain().last_step();
      }
      if (next.update->has_step()) {
        out.emplace(next.update->step().step(), next.update->step());
      }
    }
  }

  /// The samples of step `step` as the step builder draws them, sorted.
  std::vector<int64_t> BuilderStep(const ControlPlaneOptions& o, int64_t step) {
    StepBuilderOptions options;
    options.tokens_per_step = o.tokens_per_step;
    options.seed = o.seed;
    absl::StatusOr<std::vector<std::vector<int64_t>>> steps =
        BuildSteps(LengthView(o.lengths, o.window), options, step + 1);
    EXPECT_TRUE(steps.ok()) << steps.status();
    if (!steps.ok()) return {};
    std::vector<int64_t> out = steps->back();
    std::sort(out.begin(), out.end());
    return out;
  }

  static std::vector<int64_t> Sorted(const v1::StepPlan& plan) {
    std::vector<int64_t> out(plan.samples().begin(), plan.samples().end());
    std::sort(out.begin(), out.end());
    return out;
  }

  static std::map<std::string, double> Coefficients(
      const v1::StatusResponse& status) {
    return {status.coefficients().begin(), status.coefficients().end()};
  }

  /// `Options(store)` that shrink the world when a rank fails.
  ControlPlaneOptions ShrinkOptions(StateStoreInterface* store) {
    ControlPlaneOptions o = Options(store);
    o.rank_timeout = absl::Seconds(10);
    o.on_rank_failure = RankFailurePolicy::kShrink;
    return o;
  }

  /// Every rank registers and opens its stream; steps 0..2 are planned,
  /// step 0 is reported by all and step 3 planned, then rank 3's stream
  /// ends and it is silent for the timeout: steps 1..3 are open. Returns
  /// the plans of steps 1..3.
  std::vector<v1::StepPlan> OpenThreeStepsThenLoseRank3(ControlPlane& cp) {
    RegisterAll(cp);
    std::vector<int64_t> streams;
    for (int r = 0; r < kWorld; ++r) {
      streams.push_back(*cp.OpenStream(r, cp.session_id(), 0, [] {}));
    }
    EXPECT_EQ(*cp.PlanAvailableSteps(), 3);
    ReportStep(cp, 0, {0, 1, 2, 3});
    EXPECT_EQ(*cp.PlanAvailableSteps(), 1);
    std::vector<v1::StepPlan> open;
    for (int64_t s = 1; s <= 3; ++s) open.push_back(*cp.PlannedStep(s));
    cp.CloseStream(streams[3]);
    clock_.Advance(absl::Seconds(10));
    return open;
  }

  /// `ShrinkOptions` with `--on_rank_failure=hold` instead.
  ControlPlaneOptions HoldOptions(StateStoreInterface* store) {
    ControlPlaneOptions o = ShrinkOptions(store);
    o.on_rank_failure = RankFailurePolicy::kHold;
    return o;
  }

  /// A control plane started with `options` (shrink) that lost rank 3
  /// with steps 1..3 open (`OpenThreeStepsThenLoseRank3`, their plans in
  /// `*open` when given) and planned steps 4..6 to re-serve them; null and
  /// a test failure when it could not.
  std::unique_ptr<ControlPlane> StartShrunk(
      ControlPlaneOptions options, std::vector<v1::StepPlan>* open = nullptr) {
    std::unique_ptr<ControlPlane> cp = Start(std::move(options));
    if (cp == nullptr) return nullptr;
    std::vector<v1::StepPlan> lost = OpenThreeStepsThenLoseRank3(*cp);
    absl::StatusOr<int64_t> planned = cp->PlanAvailableSteps();
    EXPECT_TRUE(planned.ok() && *planned == 3)
        << "the shrink did not re-plan steps 1..3 as 4..6";
    if (!planned.ok() || *planned != 3) return nullptr;
    if (open != nullptr) *open = std::move(lost);
    return cp;
  }

  /// Whether a task or group of `plan` has rank `rank`.
  static bool HasRank(const v1::StepPlan& plan, int rank) {
    for (const v1::Task& task : plan.tasks()) {
      for (int r : task.ranks()) {
        if (r == rank) return true;
      }
    }
    return false;
  }

  FakeClock clock_{absl::FromUnixSeconds(1000)};
};

/// What the first control plane of a test did before it "crashed".
struct BeforeCrash {
  std::string session;
  /// Per rank, the steps its stream was sent.
  std::vector<std::map<int64_t, v1::RankStep>> sent;
  /// The plans kept at the crash, by step.
  std::map<int64_t, v1::StepPlan> kept;
};

TEST_F(ControlPlaneStateTest,
       ACrashedControlPlaneServesItsStepsAgainAsTheyWere) {
  const std::string dir = TmpDir("crash");
  BeforeCrash before;
  {
    std::unique_ptr<FileStateStore> store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    ASSERT_FALSE(store->recovery().existed);
    absl::StatusOr<std::unique_ptr<ControlPlane>> cp =
        ControlPlane::Start(Options(store.get()));
    ASSERT_TRUE(cp.ok()) << cp.status();
    before.session = (*cp)->session_id();
    before.sent.resize(kWorld);
    RegisterAll(**cp);
    ASSERT_EQ(*(*cp)->PlanAvailableSteps(), 3);
    // Rank r was sent steps [0, 3 - r): rank 3 none.
    for (int r = 0; r < kWorld; ++r) {
      const int64_t id = *(*cp)->OpenStream(r, before.session, 0, [] {});
      for (int k = 0; k < 3 - r; ++k) {
        const StreamNext next = (*cp)->NextForStream(id);
        ASSERT_EQ(next.kind, StreamNext::Kind::kSend);
        before.sent[r][next.update->step().step()] = next.update->step();
      }
    }
    ReportStep(**cp, 0, {0, 1, 2, 3});
    ReportStep(**cp, 1, {0});
    ASSERT_EQ(*(*cp)->PlanAvailableSteps(), 1);
    for (int64_t s = 1; s <= 3; ++s) before.kept[s] = *(*cp)->PlannedStep(s);
    // The crash: destroyed with no drain or stop; nothing is written on
    // the way out, and the store is simply closed.
  }

  std::unique_ptr<FileStateStore> store = OpenStore(dir);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->recovery().existed);
  EXPECT_EQ(store->recovery().dropped_bytes, 0);
  std::vector<ResumeEvent> resumed;
  ControlPlaneOptions options = Options(store.get());
  options.on_resumed = [&resumed](const ResumeEvent& e) {
    resumed.push_back(e);
  };
  std::unique_ptr<ControlPlane> cp = Start(options);
  ASSERT_NE(cp, nullptr);
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0].session_id, before.session);
  EXPECT_EQ(resumed[0].completed_steps, 1);
  EXPECT_EQ(resumed[0].planned_steps, 4);
  EXPECT_EQ(resumed[0].reports, 1);
  EXPECT_EQ(cp->session_id(), before.session);
  EXPECT_EQ(cp->Status().planned_steps(), 4);
  EXPECT_EQ(cp->Status().completed_steps(), 1);
  for (const auto& [step, plan] : before.kept) {
    absl::StatusOr<v1::StepPlan> now = cp->PlannedStep(step);
    ASSERT_TRUE(now.ok()) << now.status();
    EXPECT_TRUE(MessageDifferencer::Equals(*now, plan)) << "step " << step;
  }

  // Each rank is told the first step it has not reported and is served
  // from there, every step it had been sent exactly as it was sent.
  for (int r = 0; r < kWorld; ++r) {
    absl::StatusOr<v1::RegisterResponse> hello = cp->Register(Hello(r));
    ASSERT_TRUE(hello.ok()) << hello.status();
    EXPECT_EQ(hello->session_id(), before.session);
    const int64_t next_step = r == 0 ? 2 : 1;
    EXPECT_EQ(hello->next_step(), next_step) << "rank " << r;
    const std::map<int64_t, v1::RankStep> served =
        Pull(*cp, *cp->OpenStream(r, before.session, next_step, [] {}));
    ASSERT_EQ(served.size(), 4 - next_step) << "rank " << r;
    for (const auto& [step, view] : served) {
      EXPECT_TRUE(
          MessageDifferencer::Equals(view, RankView(before.kept[step], r)));
      auto was = before.sent[r].find(step);
      if (was == before.sent[r].end()) continue;
      EXPECT_TRUE(MessageDifferencer::Equals(view, was->second))
          << "rank " << r << " step " << step;
    }
  }

  // Rank 0's report of step 1 is known: sent again, it is a retry.
  EXPECT_TRUE(absl::IsAlreadyExists(
      cp->ReportTimings(Report(RankView(before.kept[1], 0))).status()));
  // Planning goes on from where it stopped: step 4 is the builder's 5th.
  ReportStep(*cp, 1, {1, 2, 3});
  ASSERT_EQ(*cp->PlanAvailableSteps(), 1);
  absl::StatusOr<v1::StepPlan> step4 = cp->PlannedStep(4);
  ASSERT_TRUE(step4.ok()) << step4.status();
  EXPECT_EQ(Sorted(*step4), BuilderStep(options, 4));
}

TEST_F(ControlPlaneStateTest, ATornPlanIsPlannedAgainWithTheSameSamples) {
  const std::string dir = TmpDir("torn-plan");
  v1::StepPlan step2;
  {
    std::unique_ptr<FileStateStore> store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    std::unique_ptr<ControlPlane> cp = Start(Options(store.get()));
    ASSERT_NE(cp, nullptr);
    RegisterAll(*cp);
    ASSERT_EQ(*cp->PlanAvailableSteps(), 3);
    step2 = *cp->PlannedStep(2);
  }
  // The crash tore the last record, the plan of step 2: the scheduler had
  // not let it out yet.
  const std::string path = FileStateStore::LogPath(dir);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  ASSERT_EQ(truncate(path.c_str(), st.st_size - 10), 0);

  std::unique_ptr<FileStateStore> store = OpenStore(dir);
  ASSERT_NE(store, nullptr);
  EXPECT_GT(store->recovery().dropped_bytes, 0);
  EXPECT_THAT(store->recovery().tail_problem, HasSubstr("torn"));
  std::unique_ptr<ControlPlane> cp = Start(Options(store.get()));
  ASSERT_NE(cp, nullptr);
  EXPECT_EQ(cp->Status().planned_steps(), 2);
  ASSERT_EQ(*cp->PlanAvailableSteps(), 1);
  absl::StatusOr<v1::StepPlan> again = cp->PlannedStep(2);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Sorted(*again), Sorted(step2));
}

TEST_F(ControlPlaneStateTest, TheRefittedModelSurvivesARestart) {
  const std::string dir = TmpDir("refit");
  v1::StatusResponse before;
  {
    std::unique_ptr<FileStateStore> store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    std::unique_ptr<ControlPlane> cp = Start(Options(store.get()));
    ASSERT_NE(cp, nullptr);
    RegisterAll(*cp);
    // Tasks twice as slow as the data sheets say: the refits move.
    for (int64_t step = 0; step < 10; ++step) {
      ASSERT_TRUE(cp->PlanAvailableSteps().ok());
      ReportStep(*cp, step, {0, 1, 2, 3}, /*slowdown=*/2.0);
    }
    ASSERT_TRUE(cp->PlanAvailableSteps().ok());
    before = cp->Status();
    ASSERT_GT(before.refits(), 0);
  }
  std::unique_ptr<ControlPlane> fresh = Start(Options(nullptr));
  ASSERT_NE(fresh, nullptr);
  ASSERT_NE(Coefficients(fresh->Status()), Coefficients(before))
      << "the refits should have moved the model";

  std::unique_ptr<FileStateStore> store = OpenStore(dir);
  ASSERT_NE(store, nullptr);
  std::unique_ptr<ControlPlane> cp = Start(Options(store.get()));
  ASSERT_NE(cp, nullptr);
  EXPECT_EQ(Coefficients(cp->Status()), Coefficients(before));
  EXPECT_EQ(cp->Status().refits(), before.refits());
}

// The ring's form a refit chose is kept with the coefficients; a state
// written before the form was learnt has none, and the prior's stands.
TEST(JobJournalModelTest, TheRingFormARefitChoseIsKept) {
  const ModelSpec m = *BuiltinModel("llama3-8b");
  const CostModel prior = CostModel::FromSpecs(ClusterSpec::H200(), m, 32);
  ASSERT_TRUE(prior.coefficients().ring_overlaps_attention);
  CostModel::Coefficients c = prior.coefficients();
  c.ring_overlaps_attention = false;
  c.ring_byte_intra *= 3;
  const CostModel refitted(c, m, prior.memory_cap(), prior.gpus_per_node());
  state::CostModelState stored = ModelState(refitted, /*refits=*/2);
  EXPECT_FALSE(
      ModelFromState(stored, prior).coefficients().ring_overlaps_attention);
  EXPECT_EQ(ModelFromState(stored, prior).coefficients().ring_byte_intra,
            c.ring_byte_intra);
  stored.clear_ring_overlaps_attention();
  EXPECT_TRUE(
      ModelFromState(stored, prior).coefficients().ring_overlaps_attention);
}

TEST_F(ControlPlaneStateTest, AnotherJobsStateIsRefusedNamingTheField) {
  const std::string dir = TmpDir("mismatch");
  {
    std::unique_ptr<FileStateStore> store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    ASSERT_NE(Start(Options(store.get())), nullptr);
  }
  std::unique_ptr<FileStateStore> store = OpenStore(dir);
  ASSERT_NE(store, nullptr);
  const std::vector<std::pair<void (*)(ControlPlaneOptions&), std::string>>
      changes = {
          {[](ControlPlaneOptions& o) { o.world_size = 8; }, "world_size is 4"},
          {[](ControlPlaneOptions& o) { o.seed = 8; }, "seed is 7"},
          {[](ControlPlaneOptions& o) { o.lengths.push_back(100); },
           "lengths is 4000 samples"},
          {[](ControlPlaneOptions& o) { o.lengths[17] += 1; }, "lengths is"},
          {[](ControlPlaneOptions& o) {
             o.model = *BuiltinModel("llama3-70b");
           },
           "model is 'llama3-8b"},
          {[](ControlPlaneOptions& o) { o.tokens_per_step = 1 << 20; },
           "tokens_per_step"},
      };
  for (const auto& [change, message] : changes) {
    ControlPlaneOptions options = Options(store.get());
    change(options);
    const absl::Status s = ControlPlane::Start(std::move(options)).status();
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr(message));
  }
  // The job's own options still resume it.
  EXPECT_NE(Start(Options(store.get())), nullptr);
}

TEST_F(ControlPlaneStateTest, APlanThatCannotBeMadeDurableIsNeverServed) {
  FakeStateStore store;
  ControlPlaneOptions options = Options(&store);
  options.lookahead_steps = 1;
  std::unique_ptr<ControlPlane> cp = Start(options);
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  ASSERT_EQ(*cp->PlanAvailableSteps(), 1);
  ReportStep(*cp, 0, {0, 1, 2, 3});
  store.FailWrites(absl::DataLossError("disk gone"));
  const absl::StatusOr<int> planned = cp->PlanAvailableSteps();
  EXPECT_TRUE(absl::IsDataLoss(planned.status())) << planned.status();
  EXPECT_THAT(planned.status().message(),
              HasSubstr("cannot make the plan of step 1 durable"));
  // A stream gets the drain after step 0 (completed): never step 1.
  int64_t drain = -2;
  const std::map<int64_t, v1::RankStep> served =
      Pull(*cp, *cp->OpenStream(0, cp->session_id(), 0, [] {}), &drain);
  EXPECT_TRUE(served.empty());
  EXPECT_EQ(drain, 0);
  EXPECT_EQ(cp->Status().planned_steps(), 1);
  EXPECT_THAT(cp->Status().planner_error(), HasSubstr("disk gone"));
}

TEST_F(ControlPlaneStateTest, AReportIsRecordedOnlyOnceDurable) {
  FakeStateStore store;
  std::unique_ptr<ControlPlane> cp = Start(Options(&store));
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  ASSERT_EQ(*cp->PlanAvailableSteps(), 3);
  const v1::TimingReport report = Report(RankView(*cp->PlannedStep(0), 2));
  store.FailWrites(absl::UnavailableError("disk busy"));
  EXPECT_TRUE(absl::IsUnavailable(cp->ReportTimings(report).status()));
  EXPECT_EQ(cp->Status().ranks(2).last_reported_step(), -1);
  store.FailWrites(absl::OkStatus());
  // Not recorded before: the retry is taken, not ALREADY_EXISTS.
  EXPECT_TRUE(cp->ReportTimings(report).ok());
  EXPECT_EQ(store.state().steps.front().reports.size(), 1u);
  // A report the window refuses is not written at all.
  const size_t written = store.written().size();
  EXPECT_TRUE(absl::IsAlreadyExists(cp->ReportTimings(report).status()));
  EXPECT_EQ(store.written().size(), written);
}

TEST_F(ControlPlaneStateTest, RendezvousKeysAreDurableBeforeTheyAreSeen) {
  FakeStateStore store;
  std::unique_ptr<ControlPlane> cp = Start(Options(&store));
  ASSERT_NE(cp, nullptr);
  const std::string session = cp->session_id();
  const std::string key = session + "/e0/g0-1/0";
  ASSERT_TRUE(cp->StoreSet(session, key, "address").ok());
  store.FailWrites(absl::DataLossError("disk gone"));
  const std::string lost = session + "/e0/g0-1/1";
  EXPECT_TRUE(absl::IsDataLoss(cp->StoreSet(session, lost, "x")));
  EXPECT_TRUE(absl::IsNotFound(cp->StoreGet(session, {lost}).status()));
  // A key the store refuses is refused before anything is written.
  EXPECT_TRUE(absl::IsInvalidArgument(cp->StoreSet(session, "other/k", "x")));

  FakeStateStore restarted(store.state());
  cp.reset();
  cp = Start(Options(&restarted));
  ASSERT_NE(cp, nullptr);
  absl::StatusOr<std::vector<std::string>> values =
      cp->StoreGet(session, {key});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[0], "address");
}

TEST_F(ControlPlaneStateTest, MaxStepsCountsTheJobsStepsAcrossRestarts) {
  FakeStateStore store;
  ControlPlaneOptions options = Options(&store);
  options.max_steps = 3;
  {
    std::unique_ptr<ControlPlane> cp = Start(options);
    ASSERT_NE(cp, nullptr);
    RegisterAll(*cp);
    ASSERT_EQ(*cp->PlanAvailableSteps(), 3);
  }
  FakeStateStore restarted(store.state());
  options.state_store = &restarted;
  std::unique_ptr<ControlPlane> cp = Start(options);
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  EXPECT_EQ(*cp->PlanAvailableSteps(), 0);
  // The job had all its steps: each stream gets them, then the drain.
  int64_t drain = 0;
  EXPECT_EQ(
      Pull(*cp, *cp->OpenStream(1, cp->session_id(), 0, [] {}), &drain).size(),
      3u);
  EXPECT_EQ(drain, 2);
}

// ------------------------------------------------- shrink across restarts

/// What a shrunk job looked like when its scheduler crashed.
struct ShrunkJob {
  std::map<int64_t, v1::StepPlan> kept;
  v1::StepPlan abandoned_step2;
  v1::StatusResponse status;
};

TEST_F(ControlPlaneStateTest, AShrinkAndAGrowSurviveRestarts) {
  const std::string dir = TmpDir("shrink");
  ControlPlaneOptions options = ShrinkOptions(nullptr);
  ShrunkJob before;
  {
    std::unique_ptr<FileStateStore> store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    options.state_store = store.get();
    // The shrink abandons steps 1..3; steps 4..6 re-serve them.
    std::vector<v1::StepPlan> open;
    std::unique_ptr<ControlPlane> cp = StartShrunk(options, &open);
    ASSERT_NE(cp, nullptr);
    before.abandoned_step2 = open[1];
    ReportStep(*cp, 4, {0, 1, 2});
    ReportStep(*cp, 5, {0});
    ASSERT_EQ(*cp->PlanAvailableSteps(), 1);  // step 7, new samples
    for (int64_t s = 5; s <= 7; ++s) before.kept[s] = *cp->PlannedStep(s);
    before.status = cp->Status();
    ASSERT_EQ(before.status.epoch(), 1);
  }

  std::unique_ptr<FileStateStore> store = OpenStore(dir);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->recovery().dropped_bytes, 0);
  std::vector<ResumeEvent> resumed;
  options.state_store = store.get();
  options.on_resumed = [&resumed](const ResumeEvent& e) {
    resumed.push_back(e);
  };
  std::unique_ptr<ControlPlane> cp = Start(options);
  ASSERT_NE(cp, nullptr);
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0].epoch, 1);
  EXPECT_EQ(resumed[0].members, (std::vector<int>{0, 1, 2}));
  v1::StatusResponse status = cp->Status();
  EXPECT_EQ(status.epoch(), 1);
  EXPECT_EQ(status.epoch_world_size(), 3);
  EXPECT_EQ(status.abandoned_steps(), 3);
  EXPECT_EQ(status.planned_steps(), before.status.planned_steps());
  EXPECT_EQ(status.completed_steps(), before.status.completed_steps());
  EXPECT_FALSE(status.ranks(3).member());
  EXPECT_TRUE(status.ranks(3).failed());
  for (const auto& [step, plan] : before.kept) {
    absl::StatusOr<v1::StepPlan> now = cp->PlannedStep(step);
    ASSERT_TRUE(now.ok()) << now.status();
    EXPECT_TRUE(MessageDifferencer::Equals(*now, plan)) << "step " << step;
  }
  for (int r = 0; r < 3; ++r) {
    absl::StatusOr<v1::RegisterResponse> hello = cp->Register(Hello(r));
    ASSERT_TRUE(hello.ok()) << hello.status();
    EXPECT_EQ(hello->epoch(), 1);
    EXPECT_EQ(hello->next_step(), r == 0 ? 6 : 5) << "rank " << r;
  }
  // The new epoch's steps still tell where the shrink's abandoned steps
  // began.
  const std::map<int64_t, v1::RankStep> served =
      Pull(*cp, *cp->OpenStream(0, cp->session_id(), 6, [] {}));
  ASSERT_EQ(served.count(7), 1u);
  EXPECT_TRUE(served.at(7).has_abandoned_from());
  EXPECT_EQ(served.at(7).abandoned_from(), 1);
  // A late report of an abandoned step is still discarded.
  absl::StatusOr<v1::ReportAck> late =
      cp->ReportTimings(Report(RankView(before.abandoned_step2, 1)));
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_TRUE(late->discarded());
  // The step builder goes on where it was: step 7 drew its 5th step.
  EXPECT_EQ(Sorted(before.kept[7]), BuilderStep(options, 4));

  // Rank 3 returns: the next step is planned for all four, epoch 2.
  ASSERT_TRUE(cp->Register(Hello(3)).ok());
  ReportStep(*cp, 5, {1, 2});
  ReportStep(*cp, 6, {0, 1, 2});
  ASSERT_GE(*cp->PlanAvailableSteps(), 1);
  const v1::StepPlan step8 = *cp->PlannedStep(8);
  EXPECT_EQ(step8.epoch(), 2);
  EXPECT_TRUE(HasRank(step8, 3));
  EXPECT_EQ(Sorted(step8), BuilderStep(options, 5));
  cp.reset();
  store.reset();

  store = OpenStore(dir);
  ASSERT_NE(store, nullptr);
  options.state_store = store.get();
  cp = Start(options);
  ASSERT_NE(cp, nullptr);
  status = cp->Status();
  EXPECT_EQ(status.epoch(), 2);
  EXPECT_EQ(status.epoch_world_size(), 4);
  EXPECT_TRUE(status.ranks(3).member());
  EXPECT_TRUE(MessageDifferencer::Equals(*cp->PlannedStep(8), step8));
  // Step 7 is still epoch 1's, without rank 3.
  ASSERT_TRUE(cp->Register(Hello(3)).ok());
  const absl::Status outsider =
      cp->ReportTimings(Report(RankView(before.kept[7], 3))).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(outsider)) << outsider;
  EXPECT_THAT(outsider.message(), HasSubstr("not in the world of step 7"));
}

TEST_F(ControlPlaneStateTest,
       ARestartBeforeTheNewEpochsFirstPlanReservesAlike) {
  FakeStateStore store;
  ControlPlaneOptions options = ShrinkOptions(&store);
  std::unique_ptr<ControlPlane> cp = StartShrunk(options);
  ASSERT_NE(cp, nullptr);
  std::vector<v1::StepPlan> replanned;
  for (int64_t s = 4; s <= 6; ++s) replanned.push_back(*cp->PlannedStep(s));
  cp.reset();

  // The crash came right after the epoch record: no plan of epoch 1 yet.
  DurableState at_change;
  bool changed = false;
  for (const state::StateRecord& record : store.written()) {
    ASSERT_TRUE(ApplyStateRecord(record, &at_change).ok());
    if ((changed = record.has_world_change())) break;
  }
  ASSERT_TRUE(changed) << "the shrink wrote no world change";
  ASSERT_EQ(at_change.planned_steps(), 4);
  FakeStateStore restarted(at_change);
  options.state_store = &restarted;
  cp = Start(options);
  ASSERT_NE(cp, nullptr);
  EXPECT_EQ(cp->Status().epoch(), 1);
  EXPECT_EQ(cp->Status().abandoned_steps(), 3);
  ASSERT_EQ(*cp->PlanAvailableSteps(), 3);
  for (int64_t s = 4; s <= 6; ++s) {
    const v1::StepPlan plan = *cp->PlannedStep(s);
    EXPECT_EQ(plan.epoch(), 1) << "step " << s;
    EXPECT_EQ(Sorted(plan), Sorted(replanned[s - 4])) << "step " << s;
    EXPECT_FALSE(HasRank(plan, 3)) << "step " << s;
  }
}

TEST_F(ControlPlaneStateTest, AShrunkJobIsRefusedUnderHoldNamingBoth) {
  FakeStateStore store;
  std::unique_ptr<ControlPlane> cp = StartShrunk(ShrinkOptions(&store));
  ASSERT_NE(cp, nullptr);
  ASSERT_EQ(cp->Status().epoch_world_size(), 3);
  cp.reset();

  FakeStateStore restarted(store.state());
  const absl::Status refused =
      ControlPlane::Start(HoldOptions(&restarted)).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_THAT(refused.message(),
              HasSubstr("--on_rank_failure=shrink left on 3 of its 4 ranks "
                        "(epoch 1: ranks [0,1,2])"));
  EXPECT_THAT(refused.message(),
              HasSubstr("this scheduler's --on_rank_failure is hold"));
  // Under shrink it resumes, rank 3 still out until it returns.
  cp = Start(ShrinkOptions(&restarted));
  ASSERT_NE(cp, nullptr);
  EXPECT_EQ(cp->Status().epoch_world_size(), 3);
}

TEST_F(ControlPlaneStateTest, AWholeWorldResumesUnderEitherPolicy) {
  FakeStateStore store;
  std::unique_ptr<ControlPlane> cp = Start(ShrinkOptions(&store));
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  ASSERT_GT(*cp->PlanAvailableSteps(), 0);
  cp.reset();
  FakeStateStore restarted(store.state());
  EXPECT_NE(Start(HoldOptions(&restarted)), nullptr);
}

TEST_F(ControlPlaneStateTest, ATornEpochRecordIsCutAndTheOldWorldResumes) {
  const std::string dir = TmpDir("torn-epoch");
  {
    std::unique_ptr<FileStateStore> store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    std::unique_ptr<ControlPlane> cp = Start(ShrinkOptions(store.get()));
    ASSERT_NE(cp, nullptr);
    OpenThreeStepsThenLoseRank3(*cp);
    cp->Drain(/*stop=*/false);  // nothing is planned after the shrink
    ASSERT_EQ(*cp->PlanAvailableSteps(), 0);
    ASSERT_EQ(cp->Status().epoch(), 1);
  }
  const std::string path = FileStateStore::LogPath(dir);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  ASSERT_EQ(truncate(path.c_str(), st.st_size - 10), 0);

  std::unique_ptr<FileStateStore> store = OpenStore(dir);
  ASSERT_NE(store, nullptr);
  EXPECT_GT(store->recovery().dropped_bytes, 0);
  EXPECT_THAT(store->recovery().tail_problem, HasSubstr("torn"));
  std::unique_ptr<ControlPlane> cp = Start(ShrinkOptions(store.get()));
  ASSERT_NE(cp, nullptr);
  const v1::StatusResponse status = cp->Status();
  EXPECT_EQ(status.epoch(), 0);
  EXPECT_EQ(status.epoch_world_size(), kWorld);
  EXPECT_EQ(status.abandoned_steps(), 0);
  EXPECT_EQ(status.planned_steps(), 4);
  EXPECT_TRUE(cp->PlannedStep(3).ok());
}

}  // namespace
}  // namespace dcp

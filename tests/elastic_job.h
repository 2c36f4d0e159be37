#ifndef DCP_TESTS_ELASTIC_JOB_H_
#define DCP_TESTS_ELASTIC_JOB_H_

// The fixture the rank-failure, elastic-training, client-shrink and
// node-relay tests share (testonly): a real dcp-scheduler and one real
// process a rank (dcp-agent, or a client_lib trainer), their logs under
// TEST_TMPDIR, and the waits and checks those tests make on them. Each
// test says only what differs: its job's shape, the ranks' binary, mode and
// flags, the scheduler's failure flags.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/execution_log.h"
#include "tests/job_inputs.h"

namespace dcp::testing_process {

/// SIGKILLs and reaps `child` (a test failure when it did not die of it).
void KillAndReap(Child& child);

/// What differs between the jobs of the tests that derive from
/// `ElasticJobTest`.
struct ElasticJob {
  /// The files' prefix ("<prefix>-agent-<rank>.jsonl", ...); the test's
  /// name when empty (the tests of one binary share TEST_TMPDIR).
  std::string prefix;
  JobShape shape;
  /// The --lengths file's text (`LcgTrace`).
  std::string trace;
  /// The ranks' binary, a path from the runfiles (`Binary`): dcp-agent, or
  /// a trainer that takes the same `RankArgs`.
  std::string binary = "worker_agent/dcp-agent";
  /// The agents' flags after `RankArgs` (the mode and its settings).
  std::vector<std::string> agent_flags;
  /// Flags of single ranks, after `agent_flags`, by rank.
  std::map<int, std::vector<std::string>> rank_flags;
  /// Whether the agents get the job's --model_config too (execute mode).
  bool agents_read_model = false;
  /// How long any one thing the test waits for may take.
  absl::Duration patience = absl::Seconds(60);
};

/// The job the rank-failure, elastic-training and client-shrink tests run,
/// `max_steps` long: four ranks on two-GPU nodes, a 32K window and 64K
/// tokens a step over 300 samples of `SkewedLength`, four steps planned
/// ahead. The test says how its ranks run (`agent_flags`).
ElasticJob FourRankJob(int64_t max_steps);

/// dcp-agent's flags for simulate mode: each task takes 5 ms and is logged
/// and reported as execute mode does, without training.
std::vector<std::string> SimulateModeFlags();

/// A gtest fixture over one `ElasticJob`: writes its trace and model
/// config in `SetUp`, starts the scheduler and agents on demand, and stops
/// the scheduler and reaps every child at the end. Not thread-safe.
///
///   class MyTest : public ElasticJobTest {
///    protected:
///     MyTest() : ElasticJobTest(MyJob()) {}
///   };
///   TEST_F(MyTest, Shrinks) {
///     StartJob({"--rank_timeout=2s", "--on_rank_failure=shrink"});
///     const auto [from, to] =
///         StopAndAwaitShrink(1, 3, Stop::kKill, 1, "[0,2,3]");
///     ExpectAgentsFinish();
///   }
class ElasticJobTest : public ::testing::Test {
 public:
  /// How `StopAndAwaitShrink` stops its victim: SIGKILL (reaped), or
  /// SIGSTOP (hung, its connections open).
  enum class Stop { kKill, kHang };

 protected:
  explicit ElasticJobTest(ElasticJob job);

  void SetUp() override;
  void TearDown() override;

  /// The scheduler's flags for the job, then `extra`.
  std::vector<std::string> SchedulerFlags(
      const std::vector<std::string>& extra) const;
  /// Starts the scheduler with `extra` flags, then an agent a rank.
  void StartJob(const std::vector<std::string>& extra);
  /// Starts rank `rank`'s agent, named "<prefix>-agent-<rank><suffix>"; it
  /// appends to the rank's log.
  Child StartAgent(int rank, const std::string& suffix);

  /// The files' prefix (`ElasticJob::prefix`, or the test's name).
  const std::string& prefix() const { return prefix_; }
  std::string LogPath(int rank) const;
  std::vector<ExecutionLine> Logged(int rank) const;
  /// The steps rank `rank` logged, in order (repeats kept).
  std::vector<int64_t> LoggedSteps(int rank) const;
  /// Whether rank `rank` has logged step `step` or a later one.
  bool Ran(int rank, int64_t step) const;
  /// `LoggedTasks` over every rank's log.
  std::map<std::pair<int64_t, int>, LoggedTask> Tasks(
      const std::set<int64_t>& skip) const;
  /// `BuilderSteps` of the job.
  std::vector<std::multiset<int64_t>> JobSteps() const;

  /// Waits on the children's output until `done()`; false at the deadline
  /// (`patience` from now).
  template <typename Done>
  bool AwaitOutput(Done done) {
    const absl::Time deadline = absl::Now() + job_.patience;
    FileActivity activity({TmpPath("")});
    while (!done()) {
      if (!activity.Await(deadline)) return done();
    }
    return true;
  }
  /// The first line of the first scheduler's log that contains `text`; ""
  /// if none came in time.
  std::string AwaitSchedulerLine(const std::string& text);

  /// Once `victim` logged step `after`, `stop`s it and waits for the
  /// scheduler's shrink to epoch `epoch` on `world` ("[0,2,3]"); the steps
  /// [from, to) it abandoned, or {-1, -1} and a test failure when it did not
  /// come or abandoned none.
  std::pair<int64_t, int64_t> StopAndAwaitShrink(int victim, int64_t after,
                                                 Stop stop, int64_t epoch,
                                                 const std::string& world);
  /// Waits for the agents still running to exit 0.
  void ExpectAgentsFinish();
  /// For a job no rank failed in: each rank's distinct steps are [0,
  /// max_steps) in order (a restarted rank may repeat the step it had not
  /// reported, never skip one), and every sample of every job step trained
  /// once.
  void ExpectEveryStepAndSampleOnce() const;

  const ElasticJob job_;
  std::string address_;
  std::vector<Child> scheduler_;
  std::vector<Child> agents_;
  ChildReaper reaper_{{&scheduler_, &agents_}};

 private:
  std::string prefix_;
};

}  // namespace dcp::testing_process

#endif  // DCP_TESTS_ELASTIC_JOB_H_

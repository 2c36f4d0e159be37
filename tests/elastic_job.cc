#include "tests/elastic_job.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace dcp::testing_process {

ElasticJob FourRankJob(int64_t max_steps) {
  ElasticJob job;
  job.shape = {/*world_size=*/4,
               /*gpus_per_node=*/2,
               /*window=*/32768,
               /*tokens_per_step=*/65536,
               /*max_steps=*/max_steps,
               /*seed=*/5,
               /*lookahead_steps=*/4};
  job.trace = LcgTrace(300, 17, 100, SkewedLength);
  return job;
}

std::vector<std::string> SimulateModeFlags() {
  return {"--mode=simulate", "--simulate_task_time=5ms"};
}

ElasticJobTest::ElasticJobTest(ElasticJob job) : job_(std::move(job)) {}

void ElasticJobTest::SetUp() {
  prefix_ =
      !job_.prefix.empty()
          ? job_.prefix
          : ::testing::UnitTest::GetInstance()->current_test_info()->name();
  ASSERT_TRUE(WriteFile(TmpPath(prefix_ + "-trace.txt"), job_.trace));
  ASSERT_TRUE(WriteFile(TmpPath(prefix_ + "-model.json"),
                        TinyModelJson("tiny-" + prefix_)));
}

void ElasticJobTest::TearDown() {
  if (!address_.empty() && !scheduler_.empty() && !scheduler_.back().done) {
    std::vector<Child> last = {scheduler_.back()};
    StopScheduler(address_, last);
    scheduler_.back() = last.front();
  }
  if (HasFailure()) KeepOutputs(prefix_);
}

std::vector<std::string> ElasticJobTest::SchedulerFlags(
    const std::vector<std::string>& extra) const {
  std::vector<std::string> flags =
      JobFlags(TmpPath(prefix_ + "-trace.txt"),
               TmpPath(prefix_ + "-model.json"), job_.shape);
  flags.push_back("--metrics_listen=");
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

void ElasticJobTest::StartJob(const std::vector<std::string>& extra) {
  const int port = StartSchedulerIncarnation(
      prefix_ + "-scheduler", SchedulerFlags(extra), 0, scheduler_);
  ASSERT_GT(port, 0);
  address_ = absl::StrCat("127.0.0.1:", port);
  for (int r = 0; r < job_.shape.world_size; ++r) {
    agents_.push_back(StartAgent(r, ""));
  }
}

Child ElasticJobTest::StartAgent(int rank, const std::string& suffix) {
  std::vector<std::string> argv = RankArgs(
      Binary(job_.binary), address_, rank, job_.shape.world_size, LogPath(rank));
  if (job_.agents_read_model) {
    argv.push_back("--model_config=" + TmpPath(prefix_ + "-model.json"));
  }
  argv.insert(argv.end(), job_.agent_flags.begin(), job_.agent_flags.end());
  if (const auto own = job_.rank_flags.find(rank);
      own != job_.rank_flags.end()) {
    argv.insert(argv.end(), own->second.begin(), own->second.end());
  }
  return Spawn(absl::StrCat(prefix_, "-agent-", rank, suffix), argv);
}

std::string ElasticJobTest::LogPath(int rank) const {
  return TmpPath(absl::StrCat(prefix_, "-agent-", rank, ".jsonl"));
}

std::vector<ExecutionLine> ElasticJobTest::Logged(int rank) const {
  return ReadExecutionLog(LogPath(rank));
}

std::vector<int64_t> ElasticJobTest::LoggedSteps(int rank) const {
  return testing_process::LoggedSteps(LogPath(rank));
}

void ElasticJobTest::ExpectEveryStepAndSampleOnce() const {
  std::vector<int64_t> all(job_.shape.max_steps);
  std::iota(all.begin(), all.end(), 0);
  for (int r = 0; r < job_.shape.world_size; ++r) {
    std::vector<int64_t> steps = LoggedSteps(r);
    steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
    EXPECT_EQ(steps, all) << "rank " << r;
  }
  testing_process::ExpectEachJobStepOnce(
      testing_process::SamplesByStep(Tasks({})), JobSteps(), {});
}

bool ElasticJobTest::Ran(int rank, int64_t step) const {
  for (int64_t s : LoggedSteps(rank)) {
    if (s >= step) return true;
  }
  return false;
}

std::map<std::pair<int64_t, int>, LoggedTask> ElasticJobTest::Tasks(
    const std::set<int64_t>& skip) const {
  std::vector<std::string> logs;
  for (int r = 0; r < job_.shape.world_size; ++r) logs.push_back(LogPath(r));
  return LoggedTasks(logs, skip);
}

std::vector<std::multiset<int64_t>> ElasticJobTest::JobSteps() const {
  return BuilderSteps(job_.trace, job_.shape);
}

std::string ElasticJobTest::AwaitSchedulerLine(const std::string& text) {
  return AwaitLineContaining(scheduler_[0].err_path, text, TmpPath(""),
                             absl::Now() + job_.patience);
}

void KillAndReap(Child& child) {
  ASSERT_EQ(kill(child.pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child.pid, &status, 0), child.pid);
  child.done = true;
  EXPECT_TRUE(WIFSIGNALED(status));
}

std::pair<int64_t, int64_t> ElasticJobTest::StopAndAwaitShrink(
    int victim, int64_t after, Stop stop, int64_t epoch,
    const std::string& world) {
  const std::pair<int64_t, int64_t> none{-1, -1};
  if (!AwaitOutput([&] { return Ran(victim, after); })) {
    ADD_FAILURE() << "the victim ran no steps\n" << reaper_.Describe(4000);
    return none;
  }
  if (stop == Stop::kKill) {
    KillAndReap(agents_[victim]);
  } else {
    // Stopped, not dead: its connection and plan stream stay open.
    EXPECT_EQ(kill(agents_[victim].pid, SIGSTOP), 0);
  }
  const std::string line = AwaitSchedulerLine(
      absl::StrCat("rank failure: ranks [", victim, "] failed"));
  if (line.empty()) {
    ADD_FAILURE() << "no shrink\n" << reaper_.Describe(4000);
    return none;
  }
  EXPECT_TRUE(absl::StrContains(
      line, absl::StrCat("shrink: epoch ", epoch, " on ranks ", world)))
      << line;
  std::fprintf(stderr, "%s\n", line.c_str());
  const std::pair<int64_t, int64_t> range = AbandonedRange(line);
  // The victim had steps planned that it never reported.
  if (range.first < 0 || range.second <= range.first) {
    ADD_FAILURE() << "no step abandoned: " << line;
    return none;
  }
  return range;
}

void ElasticJobTest::ExpectAgentsFinish() {
  std::vector<Child> running;
  for (const Child& a : agents_) {
    if (!a.done) running.push_back(a);
  }
  ASSERT_TRUE(ExpectAllExit(running, absl::Now() + job_.patience,
                            "the agents did not finish"));
  for (const Child& a : running) {
    EXPECT_EQ(a.exit_code, 0) << a.name << "\n" << ReadFile(a.err_path);
  }
  for (Child& a : agents_) {
    for (const Child& r : running) {
      if (r.pid == a.pid) a = r;
    }
  }
}

}  // namespace dcp::testing_process

// shrink_trainer: a client_lib trainer for the cross-process shrink test
// (testonly). One rank of a dcp job in in-process mode on the agent's Gloo
// groups, training nothing but doing what a trainer's collectives do: each
// task all-reduces over its group, and the step closes with a sync over the
// epoch's data-parallel group (`Client::DataParallelGroup`) that sums the
// step's tokens, each task counted once (by its group's first rank). A
// step whose collectives or groups fail because a peer is gone is given up
// (not logged, not reported) and the trainer goes on at the next epoch
// (`Client::NextEpoch`), over that epoch's world.
//
// Logs each step it completes as execute mode does (worker_agent's
// `FormatExecutionLog`: "task" lines, then a "step" line whose "tokens" are
// the data-parallel sum) to --log_file, and to stderr
//   rank R: epoch E: world [ranks], abandoned from A
// at the first step of each epoch (A: `Step::abandoned_from`) and
//   rank R: gave up step S of epoch E: <error>
// for each step given up.
//
//   shrink_trainer --scheduler=127.0.0.1:5000 --rank=2 --world_size=4
//       --log_file=/tmp/rank2.jsonl [--hang_after_step=3]

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client_lib/client.h"
#include "comm/collectives.h"
#include "common/status_macros.h"
#include "worker_agent/step_execution.h"

ABSL_FLAG(std::string, scheduler, "", "host:port of the dcp-scheduler.");
ABSL_FLAG(int, rank, -1, "This trainer's global rank.");
ABSL_FLAG(int, world_size, 0, "Ranks of the job.");
ABSL_FLAG(std::string, log_file, "", "Where the step lines go. Required.");
ABSL_FLAG(absl::Duration, rendezvous_timeout, absl::Seconds(20),
          "Bound on forming a group and on each collective.");
ABSL_FLAG(absl::Duration, world_timeout, absl::ZeroDuration(),
          "Bound on forming a group after the world changed (0: 3 x "
          "--rendezvous_timeout).");
ABSL_FLAG(absl::Duration, step_timeout, absl::Seconds(120),
          "How long to wait for a step (and for a later epoch).");
ABSL_FLAG(int64_t, hang_after_step, -1,
          "After reporting this step, block until killed (the test's "
          "victim); -1: never.");

namespace dcp {
namespace {

std::string Ranks(const std::vector<int>& ranks) {
  return absl::StrCat("[", absl::StrJoin(ranks, ","), "]");
}

/// The members of `step`'s world.
std::vector<int> WorldOf(const Step& step, int world_size) {
  if (!step.world_ranks.empty()) return step.world_ranks;
  std::vector<int> all(world_size);
  std::iota(all.begin(), all.end(), 0);
  return all;
}

double SecondsSince(absl::Time start) {
  // Reports need positive task times.
  return std::max(absl::ToDoubleSeconds(absl::Now() - start), 1e-6);
}

/// Each task's all-reduce over its group; the tokens of the tasks this
/// rank leads go to `led`.
absl::Status RunTasks(const Step& step, int rank, StepExecution& done,
                      int64_t& led) {
  for (const StepTask& task : step.tasks) {
    const absl::Time start = absl::Now();
    const int64_t tokens =
        std::accumulate(task.lengths.begin(), task.lengths.end(), int64_t{0});
    if (task.group != nullptr) {
      double members = 1;
      RETURN_IF_ERROR(AllReduceSum(*task.group, absl::MakeSpan(&members, 1)));
      if (members != static_cast<double>(task.group_ranks.size())) {
        return absl::FailedPreconditionError(absl::StrCat(
            "step ", step.step, " task ", task.task_index, ": its group ",
            Ranks(task.group_ranks), " summed ", members, " members"));
      }
    }
    if (task.group_ranks.front() == rank) led += tokens;
    ExecutedTask& executed = done.tasks.emplace_back();
    executed.task_index = task.task_index;
    executed.micro_step = task.micro_step;
    executed.group = task.group_ranks;
    executed.samples = task.samples;
    executed.scaled_tokens = tokens;
    executed.seconds = SecondsSince(start);
  }
  return absl::OkStatus();
}

/// The step's sync over the epoch's data-parallel group: the world's
/// tokens, checked to come from every member of `world` and no other.
absl::StatusOr<int64_t> SyncTokens(Client& client, const Step& step,
                                   const std::vector<int>& world,
                                   int64_t led) {
  if (world.size() < 2) return led;
  ASSIGN_OR_RETURN(c10d::ProcessGroup * group, client.DataParallelGroup());
  double sums[2] = {static_cast<double>(led), 1.0};
  RETURN_IF_ERROR(AllReduceSum(*group, absl::MakeSpan(sums, 2)));
  if (group->getSize() != static_cast<int>(world.size()) ||
      sums[1] != static_cast<double>(world.size())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step.step, " of epoch ", step.epoch, ": the data-parallel "
        "group has ", group->getSize(), " members and ", sums[1],
        " contributed, but the world is ", Ranks(world)));
  }
  return static_cast<int64_t>(sums[0]);
}

/// Runs `step` and logs it; a peer's loss comes back as the error.
absl::Status RunStep(Client& client, const Step& step, int world_size,
                     std::ofstream& log) {
  StepExecution done;
  int64_t led = 0;
  RETURN_IF_ERROR(RunTasks(step, client.rank(), done, led));
  const absl::Time sync_start = absl::Now();
  ASSIGN_OR_RETURN(done.tokens,
                   SyncTokens(client, step, WorldOf(step, world_size), led));
  const double sync = SecondsSince(sync_start);
  done.report.set_sync_seconds(sync);
  log << FormatExecutionLog(step.plan, done);
  log.flush();
  std::vector<double> seconds;
  for (const ExecutedTask& task : done.tasks) seconds.push_back(task.seconds);
  return client.ReportStep(step, seconds, sync);
}

absl::Status Train() {
  const int world_size = absl::GetFlag(FLAGS_world_size);
  ClientOptions options;
  options.mode = ClientOptions::Mode::kInProcess;
  options.agent.scheduler_address = absl::GetFlag(FLAGS_scheduler);
  options.agent.rank = absl::GetFlag(FLAGS_rank);
  options.agent.world_size = world_size;
  options.agent.rendezvous_timeout = absl::GetFlag(FLAGS_rendezvous_timeout);
  options.agent.world_timeout = absl::GetFlag(FLAGS_world_timeout);
  options.step_timeout = absl::GetFlag(FLAGS_step_timeout);
  std::ofstream log(absl::GetFlag(FLAGS_log_file), std::ios::app);
  if (!log.good()) return absl::InvalidArgumentError("cannot open --log_file");
  ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(options));
  const int rank = client->rank();
  int64_t epoch = -1;
  bool lost = false;
  while (true) {
    absl::StatusOr<Step> step = lost ? client->NextEpoch() : client->NextStep();
    if (!step.ok() && !lost && IsPeerLoss(step.status())) {
      std::fprintf(stderr, "rank %d: gave up a step of epoch %lld: %s\n", rank,
                   static_cast<long long>(epoch),
                   step.status().ToString().c_str());
      lost = true;
      continue;
    }
    RETURN_IF_ERROR(step.status());
    if (step->drained) return absl::OkStatus();
    lost = false;
    if (step->epoch != epoch) {
      epoch = step->epoch;
      std::fprintf(stderr, "rank %d: epoch %lld: world %s, abandoned from %lld\n",
                   rank, static_cast<long long>(epoch),
                   Ranks(WorldOf(*step, world_size)).c_str(),
                   static_cast<long long>(step->abandoned_from));
    }
    absl::Status ran = RunStep(*client, *step, world_size, log);
    if (IsPeerLoss(ran)) {
      std::fprintf(stderr, "rank %d: gave up step %lld of epoch %lld: %s\n",
                   rank, static_cast<long long>(step->step),
                   static_cast<long long>(step->epoch), ran.ToString().c_str());
      lost = true;
      continue;
    }
    RETURN_IF_ERROR(ran);
    if (step->step == absl::GetFlag(FLAGS_hang_after_step)) {
      absl::Notification never;
      never.WaitForNotification();
    }
  }
}

}  // namespace
}  // namespace dcp

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = dcp::Train();
  if (!status.ok()) {
    std::fprintf(stderr, "shrink_trainer: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

#include "worker_agent/task_executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "kernels/ulysses_attention.h"
#include "nlohmann/json.hpp"

namespace dcp {
namespace {

/// A monotonic `Clock`: the steady clock, offset from the Unix epoch.
class SteadyClock final : public Clock {
 public:
  absl::Time Now() override {
    return absl::UnixEpoch() +
           absl::FromChrono(
               std::chrono::steady_clock::now().time_since_epoch());
  }
};

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Mix(uint64_t seed, uint64_t value) {
  return SplitMix64(seed ^ SplitMix64(value));
}

/// A value in [-1, 1) from a hash.
float UnitFloat(uint64_t hash) {
  return static_cast<float>(static_cast<double>(hash >> 40) /
                                static_cast<double>(uint64_t{1} << 23) -
                            1.0);
}

/// Slots of the agreement checksum: three 21-bit pieces of a 63-bit hash,
/// each exact in a float even when summed over a group.
constexpr int kChecksumSlots = 3;
constexpr int kChecksumBits = 21;

}  // namespace

TaskExecutor::TaskExecutor(TaskExecutorOptions options)
    : options_(std::move(options)),
      steady_clock_(options_.clock == nullptr ? std::make_unique<SteadyClock>()
                                              : nullptr),
      clock_(options_.clock != nullptr ? options_.clock : steady_clock_.get()) {
}

absl::StatusOr<std::unique_ptr<TaskExecutor>> TaskExecutor::Create(
    TaskExecutorOptions options) {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("task executor options: ", what));
  };
  if (options.rank < 0) return bad("rank must be >= 0");
  if (options.num_heads <= 0 || options.head_dim <= 0) {
    return bad("num_heads and head_dim must be positive");
  }
  if (options.layers < 1) return bad("layers must be at least 1");
  if (options.token_scale < 1) return bad("token_scale must be at least 1");
  return std::unique_ptr<TaskExecutor>(new TaskExecutor(std::move(options)));
}

absl::StatusOr<StepExecution> TaskExecutor::RunStep(
    const v1::RankStep& step, const GroupResolver& groups) {
  if (step.rank() != options_.rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step.step(), " is for rank ", step.rank(),
                     ", not for this executor's rank ", options_.rank));
  }
  StepExecution execution;
  v1::TimingReport& report = execution.report;
  report.set_epoch(step.epoch());
  report.set_step(step.step());
  report.set_rank(options_.rank);
  for (int m = 0; m < step.tasks_size(); ++m) {
    const v1::Task& task = step.tasks(m);
    Communicator* comm = nullptr;
    if (task.ranks_size() > 1) {
      const v1::CommGroup* group = nullptr;
      for (const v1::CommGroup& g : step.groups()) {
        if (g.id() == task.group_id()) group = &g;
      }
      if (group == nullptr || task.group_id() == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step ", step.step(), " task ", task.task_index(), ": its group ",
            task.group_id(), " is not among the step's groups"));
      }
      absl::StatusOr<Communicator*> resolved = groups(*group);
      if (!resolved.ok()) {
        return absl::Status(
            resolved.status().code(),
            absl::StrCat("step ", step.step(), " task ", task.task_index(),
                         ": group [", absl::StrJoin(group->ranks(), ","),
                         "]: ", resolved.status().message()));
      }
      comm = *resolved;
    }
    absl::StatusOr<ExecutedTask> done = RunTask(step, m, comm);
    if (!done.ok()) return done.status();

    v1::TaskTiming& timing = *report.add_tasks();
    timing.set_task_index(task.task_index());
    timing.set_micro_step(m);
    timing.set_group_size(task.ranks_size());
    int64_t tokens = 0;
    for (int64_t length : task.lengths()) tokens += length;
    timing.set_tokens(tokens);
    *timing.mutable_sample_lengths() = task.lengths();
    timing.set_recompute(task.recompute());
    timing.set_seconds(done->seconds);
    execution.samples.insert(execution.samples.end(), done->samples.begin(),
                             done->samples.end());
    execution.tasks.push_back(*std::move(done));
  }
  return execution;
}

absl::StatusOr<v1::Profile> TaskExecutor::RunProfile(
    const v1::ProfileRequest& request, const GroupResolver& groups) {
  const int repetitions = std::max(1, request.repetitions());
  v1::Profile profile;
  // A one-task step per grid point: RunTask times it like a planned task.
  v1::RankStep probe;
  probe.set_epoch(request.epoch());
  probe.set_step(-1);
  probe.set_rank(options_.rank);
  int task_index = 0;
  for (int p : request.group_sizes()) {
    const std::string where = absl::StrCat("profile, group size ", p);
    if (p < 1 || options_.num_heads % p != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": it does not divide the ", options_.num_heads, " heads"));
    }
    std::vector<int> ranks = {options_.rank};
    Communicator* comm = nullptr;
    if (p > 1) {
      const v1::CommGroup* mine = nullptr;
      for (const v1::CommGroup& g : request.groups()) {
        if (g.ranks_size() == p &&
            std::find(g.ranks().begin(), g.ranks().end(), options_.rank) !=
                g.ranks().end()) {
          mine = &g;
          break;
        }
      }
      if (mine == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": no group of the request holds rank ", options_.rank));
      }
      ranks.assign(mine->ranks().begin(), mine->ranks().end());
      absl::StatusOr<Communicator*> resolved = groups(*mine);
      if (!resolved.ok()) {
        return absl::Status(
            resolved.status().code(),
            absl::StrCat(where, ": group [", absl::StrJoin(ranks, ","),
                         "]: ", resolved.status().message()));
      }
      comm = *resolved;
    }
    const bool reports = ranks.front() == options_.rank;
    for (int64_t length : request.lengths()) {
      for (double recompute : request.recompute()) {
        probe.clear_tasks();
        v1::Task& t = *probe.add_tasks();
        t.set_task_index(task_index);
        t.set_group_id(1);
        for (int r : ranks) t.add_ranks(r);
        t.add_samples(task_index);
        t.add_lengths(length);
        t.set_recompute(recompute);
        ++task_index;
        std::vector<double> seconds;
        for (int rep = 0; rep < repetitions; ++rep) {
          ASSIGN_OR_RETURN(ExecutedTask done, RunTask(probe, 0, comm));
          seconds.push_back(done.seconds);
        }
        std::sort(seconds.begin(), seconds.end());
        const size_t mid = seconds.size() / 2;
        const double median = seconds.size() % 2 == 1
                                  ? seconds[mid]
                                  : (seconds[mid - 1] + seconds[mid]) / 2;
        if (!reports) continue;
        v1::ProfileEntry& entry = *profile.add_entries();
        entry.set_length(length);
        entry.set_group_size(p);
        entry.set_recompute(recompute);
        entry.set_seconds(median);
        entry.set_memory_bytes(0);
      }
    }
  }
  return profile;
}

absl::StatusOr<ExecutedTask> TaskExecutor::RunTask(const v1::RankStep& step,
                                                   int micro_step,
                                                   Communicator* comm) {
  const v1::Task& task = step.tasks(micro_step);
  const std::string where =
      absl::StrCat("step ", step.step(), " task ", task.task_index());
  const int p = task.ranks_size();
  const auto me =
      std::find(task.ranks().begin(), task.ranks().end(), options_.rank);
  if (me == task.ranks().end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " runs on ranks [", absl::StrJoin(task.ranks(), ","),
        "], not on rank ", options_.rank));
  }
  const int group_rank = static_cast<int>(me - task.ranks().begin());
  if (task.samples_size() == 0 || task.lengths_size() != task.samples_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " has ", task.samples_size(), " samples and ",
        task.lengths_size(), " lengths; it needs one length per sample"));
  }
  if (options_.num_heads % p != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": group size ", p, " does not divide the ",
                     options_.num_heads, " heads"));
  }
  if (p > 1 &&
      (comm == nullptr || comm->size() != p || comm->rank() != group_rank)) {
    return absl::InternalError(absl::StrCat(
        where, ": the communicator of group [",
        absl::StrJoin(task.ranks(), ","), "] is ",
        comm == nullptr
            ? std::string("missing")
            : absl::StrCat("rank ", comm->rank(), " of ", comm->size()),
        ", expected rank ", group_rank, " of ", p));
  }

  // The pack: scaled samples back to back, then padding to a multiple of p.
  std::vector<int64_t> cu_seqlens = {0};
  for (int64_t length : task.lengths()) {
    if (length < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": negative length ", length));
    }
    const int64_t scaled = std::max<int64_t>(
        1, (length + options_.token_scale - 1) / options_.token_scale);
    cu_seqlens.push_back(cu_seqlens.back() + scaled);
  }
  const int64_t padding = (p - cu_seqlens.back() % p) % p;
  if (padding > 0) cu_seqlens.push_back(cu_seqlens.back() + padding);
  const int64_t total = cu_seqlens.back();
  const int64_t local = total / p;
  const int64_t first = group_rank * local;

  // Deterministic inputs of this rank's tokens: a hash of (sample, position
  // in the sample, tensor, head, dim); padding hashes as sample -1.
  const int heads = options_.num_heads;
  const int dim = options_.head_dim;
  const size_t stride = static_cast<size_t>(heads) * dim;
  std::vector<float> q(local * stride), k(local * stride), v(local * stride);
  std::vector<float>* tensors[3] = {&q, &k, &v};
  size_t sequence = 0;
  for (int64_t i = 0; i < local; ++i) {
    const int64_t global = first + i;
    while (cu_seqlens[sequence + 1] <= global) ++sequence;
    const int64_t sample = static_cast<int>(sequence) < task.samples_size()
                               ? task.samples(static_cast<int>(sequence))
                               : -1;
    const uint64_t token =
        Mix(Mix(0x5eed, static_cast<uint64_t>(sample)),
            static_cast<uint64_t>(global - cu_seqlens[sequence]));
    for (int x = 0; x < 3; ++x) {
      const uint64_t tensor = Mix(token, x);
      float* row = tensors[x]->data() + i * stride;
      for (size_t e = 0; e < stride; ++e) row[e] = UnitFloat(Mix(tensor, e));
    }
  }

  AttentionOptions attention;
  attention.num_heads = heads;
  attention.head_dim = dim;
  attention.causal = options_.causal;
  std::vector<float> out(local * stride);
  const absl::Time start = clock_->Now();
  for (int layer = 0; layer < options_.layers; ++layer) {
    const absl::Status status =
        p > 1 ? UlyssesAttention(*comm, q, k, v, cu_seqlens, attention,
                                 absl::MakeSpan(out))
              : ReferenceAttention(q, k, v, cu_seqlens, attention,
                                   absl::MakeSpan(out));
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat(where, ": attention layer ", layer, ": ",
                                       status.message()));
    }
    // The next layer attends over this one's output.
    q.swap(out);
  }
  const absl::Duration elapsed = clock_->Now() - start;
  for (float value : q) {
    if (!std::isfinite(value)) {
      return absl::InternalError(
          absl::StrCat(where, ": the attention output is not finite"));
    }
  }

  // Group agreement: every member fills its own slot, the sum shows all.
  uint64_t hash = Mix(Mix(0xa9ee, static_cast<uint64_t>(step.step())),
                      static_cast<uint64_t>(task.task_index()));
  for (int64_t sample : task.samples()) {
    hash = Mix(hash, static_cast<uint64_t>(sample));
  }
  float mine[kChecksumSlots];
  for (int s = 0; s < kChecksumSlots; ++s) {
    mine[s] = static_cast<float>((hash >> (s * kChecksumBits)) &
                                 ((uint64_t{1} << kChecksumBits) - 1));
  }
  if (p > 1) {
    std::vector<float> slots(static_cast<size_t>(p) * kChecksumSlots, 0.0f);
    std::copy(mine, mine + kChecksumSlots,
              slots.begin() + group_rank * kChecksumSlots);
    const absl::Status status = comm->AllReduceSum(slots.data(), slots.size());
    if (!status.ok()) {
      return absl::Status(
          status.code(),
          absl::StrCat(where, ": agreement all-reduce: ", status.message()));
    }
    std::vector<int> disagree;
    for (int member = 0; member < p; ++member) {
      if (!std::equal(mine, mine + kChecksumSlots,
                      slots.begin() + member * kChecksumSlots)) {
        disagree.push_back(task.ranks(member));
      }
    }
    if (!disagree.empty()) {
      return absl::InternalError(absl::StrCat(
          where, ": the group [", absl::StrJoin(task.ranks(), ","),
          "] disagrees on the task: ranks [", absl::StrJoin(disagree, ","),
          "] run other samples or another task than rank ", options_.rank));
    }
  }

  ExecutedTask done;
  done.task_index = task.task_index();
  done.micro_step = micro_step;
  done.group.assign(task.ranks().begin(), task.ranks().end());
  done.samples.assign(task.samples().begin(), task.samples().end());
  done.scaled_tokens = total;
  // The scheduler rejects non-positive times; a clock that did not move
  // (a fake one, or a very coarse one) still reports a positive time.
  done.seconds = std::max(absl::ToDoubleSeconds(elapsed), 1e-9);
  return done;
}

std::string FormatExecutionLog(const v1::RankStep& step,
                               const StepExecution& execution) {
  std::string out;
  double total = 0;
  for (const ExecutedTask& task : execution.tasks) {
    nlohmann::json line = {{"kind", "task"},
                           {"step", step.step()},
                           {"epoch", step.epoch()},
                           {"rank", step.rank()},
                           {"task_index", task.task_index},
                           {"micro_step", task.micro_step},
                           {"group", task.group},
                           {"samples", task.samples},
                           {"seconds", task.seconds}};
    absl::StrAppend(&out, line.dump(), "\n");
    total += task.seconds;
  }
  nlohmann::json line = {{"kind", "step"},
                         {"step", step.step()},
                         {"epoch", step.epoch()},
                         {"rank", step.rank()},
                         {"tasks", execution.tasks.size()},
                         {"seconds", total},
                         {"sync_seconds", execution.report.sync_seconds()}};
  absl::StrAppend(&out, line.dump(), "\n");
  return out;
}

}  // namespace dcp

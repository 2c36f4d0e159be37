#ifndef DCP_EXAMPLES_TRAIN_BENCHMARK_RANK_H_
#define DCP_EXAMPLES_TRAIN_BENCHMARK_RANK_H_

// What dcp-train-bench's child processes do: train one rank over both plan
// kinds (--rank_job), or measure peak memory at several recompute ratios
// (--memory_job). Each reads the job and the plans from the run's folder and
// writes its measurements there (train_benchmark_job.h).

#include <string>

#include "absl/status/status.h"

namespace dcp::train_benchmark {

/// Has this process's allocator keep the memory torch frees for its next
/// allocations (glibc's mmap threshold at its largest, trimming off), as
/// torch's caching allocators do on accelerators: each step otherwise maps
/// its large activations afresh and spends a good part of its time in page
/// faults, the more so the busier the machine. The throughput runs and the
/// calibration both run this way.
absl::Status KeepFreedMemory();

/// Rank `rank` of the job in `dir`, its groups formed through the
/// rendezvous store at `address`: two RankTrainers from the same weights,
/// one per plan kind, run every step of both kinds interleaved (step s of
/// one kind, then of the other, the order alternating with s so that
/// neither kind always runs first), each Step timed on the system clock
/// and on this process's CPU clock. Every group the plans give this rank is
/// formed before the first step, so that no timed step includes a
/// formation. torch runs at one thread; `KeepFreedMemory`.
absl::Status RunRank(const std::string& dir, int rank,
                     const std::string& address);

/// Rank `rank` of the probe that runs before the plans are made, over
/// groups formed through the store at `address` apart from the training's.
/// The world's group times all-to-alls of two sizes and an all-reduce of
/// the model's gradient, each the median of several runs after warm-ups,
/// every run started from a barrier (`AppendGlooRecord`: what
/// `FitGlooCosts` turns into the spec's Gloo costs); then training tasks of
/// a few shapes on one rank and on groups of each size dividing the world
/// (all groups of a size at once), at each Ulysses degree a size allows
/// (the plain ring among them) and recompute 0 and 1, each the fastest of three
/// runs on a wall clock (`AppendTaskRecord`: what the cost model is fitted
/// to). Rank 0 writes the records. torch runs at one thread, as the ranks
/// train.
absl::Status RunGlooProbe(const std::string& dir, int rank,
                          const std::string& address);

/// One rank alone (a world of one): the same task, one sequence of the
/// job's `memory_length` tokens, run at recompute 1, 0.5 and 0, each with
/// the peak resident memory reset before the step and read after it. In
/// that order because memory the allocator kept from an earlier run can only
/// make a later run look smaller: with the least memory first, that could
/// hide what recompute saves, never fake it. Large
/// allocations are made to go straight back to the system (mallopt) so that
/// the resident memory follows what torch holds.
absl::Status RunMemoryCheck(const std::string& dir);

}  // namespace dcp::train_benchmark

#endif  // DCP_EXAMPLES_TRAIN_BENCHMARK_RANK_H_

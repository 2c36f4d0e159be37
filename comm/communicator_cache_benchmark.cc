// What the communicator cache saves: forming a Gloo group over loopback TCP
// (a miss: rendezvous through the store + full-mesh connect) against handing
// out a group already formed (a hit). The ranks of a group are threads.
//
//   bazel run -c opt //worker_agent:communicator_cache_benchmark

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"
#include "comm/communicator_cache.h"
#include "comm/gloo_communicator.h"
#include "comm/rendezvous_store.h"

namespace dcp {
namespace {

// Runs a function on every rank of a group at once: rank 0 on the calling
// thread, the others on threads kept across calls so that thread start-up
// is not measured.
class RankThreads {
 public:
  explicit RankThreads(int size) : size_(size) {
    for (int rank = 1; rank < size; ++rank) {
      threads_.emplace_back([this, rank] { Loop(rank); });
    }
  }
  ~RankThreads() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    for (std::thread& t : threads_) t.join();
  }

  void Run(const std::function<void(int)>& body) {
    {
      absl::MutexLock lock(&mu_);
      body_ = &body;
      pending_ = size_ - 1;
      ++generation_;
    }
    body(0);
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* pending) { return *pending == 0; }, &pending_));
  }

 private:
  void Loop(int rank) {
    int64_t seen = 0;
    while (true) {
      const std::function<void(int)>* body;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || generation_ != seen;
        };
        mu_.Await(absl::Condition(&ready));
        if (stop_) return;
        seen = generation_;
        body = body_;
      }
      (*body)(rank);
      absl::MutexLock lock(&mu_);
      --pending_;
    }
  }

  const int size_;
  absl::Mutex mu_;
  const std::function<void(int)>* body_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

CommKey GroupKey(int size, int64_t epoch) {
  std::vector<int> ranks;
  for (int r = 0; r < size; ++r) ranks.push_back(r);
  return *CommKey::Make(ranks, epoch);
}

GlooCommunicator::Options GlooOptions() {
  GlooCommunicator::Options options;
  options.timeout = absl::Seconds(30);
  return options;
}

// A miss without the cache: every rank forms the group.
void BM_GlooFormGroup(benchmark::State& state) {
  const int size = static_cast<int>(state.range(0));
  RankThreads ranks(size);
  InMemoryRendezvousStore store;
  std::vector<std::unique_ptr<Communicator>> comms(size);
  int64_t formed = 0;
  for (auto _ : state) {
    const CommKey key = GroupKey(size, formed);
    const std::string prefix = absl::StrCat("form/", formed, "/");
    ranks.Run([&](int rank) {
      auto comm =
          GlooCommunicator::Create(key, rank, prefix, &store, GlooOptions());
      if (comm.ok()) comms[rank] = *std::move(comm);
    });
    state.PauseTiming();
    for (auto& comm : comms) {
      if (comm == nullptr) state.SkipWithError("forming the group failed");
      comm.reset();
    }
    ++formed;
    state.ResumeTiming();
  }
}
BENCHMARK(BM_GlooFormGroup)
    ->Arg(2)
    ->Arg(4)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// One cache per rank, as on a real job: every Get misses (new epoch each
// time) and forms the group through the factory.
struct RankCaches {
  explicit RankCaches(int size) {
    for (int rank = 0; rank < size; ++rank) {
      caches.push_back(std::make_unique<CommunicatorCache>(
          [this, rank](const CommKey& key, const std::string& prefix) {
            return GlooCommunicator::Create(key, rank, prefix, &store,
                                            GlooOptions());
          }));
    }
  }
  InMemoryRendezvousStore store;
  std::vector<std::unique_ptr<CommunicatorCache>> caches;
};

void BM_CacheMissGloo(benchmark::State& state) {
  const int size = static_cast<int>(state.range(0));
  RankThreads ranks(size);
  RankCaches rank_caches(size);
  int64_t epoch = 0;
  for (auto _ : state) {
    const CommKey key = GroupKey(size, epoch);
    const std::string prefix = absl::StrCat("miss/", epoch, "/");
    ranks.Run([&](int rank) {
      if (!rank_caches.caches[rank]->Get(key, prefix).ok()) {
        state.SkipWithError("forming the group failed");
      }
    });
    state.PauseTiming();
    ++epoch;
    for (auto& cache : rank_caches.caches) cache->EvictBefore(epoch);
    state.ResumeTiming();
  }
}
BENCHMARK(BM_CacheMissGloo)
    ->Arg(4)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_CacheHitGloo(benchmark::State& state) {
  const int size = static_cast<int>(state.range(0));
  RankThreads ranks(size);
  RankCaches rank_caches(size);
  const CommKey key = GroupKey(size, 0);
  ranks.Run([&](int rank) {
    if (!rank_caches.caches[rank]->Get(key, "hit/").ok()) {
      state.SkipWithError("forming the group failed");
    }
  });
  CommunicatorCache& cache = *rank_caches.caches[0];
  for (auto _ : state) {
    absl::StatusOr<Communicator*> comm = cache.Get(key, "hit/");
    benchmark::DoNotOptimize(comm);
  }
  state.counters["hits"] = static_cast<double>(cache.stats().hits);
}
BENCHMARK(BM_CacheHitGloo)->Arg(4)->Unit(benchmark::kNanosecond);

// For scale: one all-to-all on a formed 4-rank group, 16K floats per peer.
void BM_GlooAllToAll(benchmark::State& state) {
  const int size = static_cast<int>(state.range(0));
  const size_t count = static_cast<size_t>(state.range(1));
  RankThreads ranks(size);
  InMemoryRendezvousStore store;
  const CommKey key = GroupKey(size, 0);
  std::vector<std::unique_ptr<Communicator>> comms(size);
  ranks.Run([&](int rank) {
    auto comm =
        GlooCommunicator::Create(key, rank, "a2a/", &store, GlooOptions());
    if (comm.ok()) comms[rank] = *std::move(comm);
  });
  for (auto& comm : comms) {
    if (comm == nullptr) {
      state.SkipWithError("forming the group failed");
      return;
    }
  }
  std::vector<std::vector<float>> send(size, std::vector<float>(count * size));
  std::vector<std::vector<float>> recv(size, std::vector<float>(count * size));
  for (auto _ : state) {
    ranks.Run([&](int rank) {
      if (!comms[rank]
               ->AllToAll(send[rank].data(), recv[rank].data(), count)
               .ok()) {
        state.SkipWithError("all-to-all failed");
      }
    });
  }
  state.SetBytesProcessed(state.iterations() * size * size * count *
                          sizeof(float));
}
BENCHMARK(BM_GlooAllToAll)
    ->Args({4, 16384})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace dcp

BENCHMARK_MAIN();

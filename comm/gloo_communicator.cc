#include "comm/gloo_communicator.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gloo/allreduce.h"
#include "gloo/alltoall.h"
#include "gloo/barrier.h"
#include "gloo/common/error.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/attr.h"
#include "gloo/transport/tcp/device.h"

namespace dcp {
namespace {

std::chrono::milliseconds ToMillis(absl::Duration d) {
  return std::chrono::milliseconds(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

// Gloo reports failures by throwing; this is where they become statuses.
absl::Status FromGlooException(const std::exception& e,
                               absl::string_view what) {
  const std::string message = absl::StrCat(what, ": ", e.what());
  if (dynamic_cast<const gloo::IoException*>(&e) != nullptr) {
    const std::string lower = absl::AsciiStrToLower(e.what());
    if (absl::StrContains(lower, "timeout") ||
        absl::StrContains(lower, "timed out")) {
      return absl::DeadlineExceededError(message);
    }
    return absl::UnavailableError(message);
  }
  if (dynamic_cast<const gloo::InvalidOperationException*>(&e) != nullptr) {
    return absl::FailedPreconditionError(message);
  }
  return absl::InternalError(message);
}

// Gloo's CreateDevice reads getaddrinfo's result even when the lookup failed
// (it only checks for -1), so a name that does not resolve must never reach
// it.
absl::Status CheckResolvable(const std::string& hostname) {
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* result = nullptr;
  const int rv = getaddrinfo(hostname.c_str(), nullptr, &hints, &result);
  if (result != nullptr) freeaddrinfo(result);
  if (rv == 0) return absl::OkStatus();
  const std::string message = absl::StrCat("cannot resolve Gloo hostname '",
                                           hostname, "': ", gai_strerror(rv));
  if (rv == EAI_AGAIN || rv == EAI_SYSTEM || rv == EAI_MEMORY) {
    return absl::UnavailableError(message);
  }
  return absl::InvalidArgumentError(message);
}

// Gloo's view of the rendezvous store: keys live under `<prefix>gloo/`, and
// every wait ends at the deadline of the group's formation. Gloo expects a
// failed store call to throw; the status that caused it is kept so the caller
// can return it rather than Gloo's rewording.
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(RendezvousStoreInterface* store, std::string prefix,
                   absl::Time deadline)
      : store_(store), prefix_(std::move(prefix)), deadline_(deadline) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Check(store_->Set(Key(key), absl::string_view(data.data(), data.size())));
  }

  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::vector<std::string>> values =
        store_->Wait({Key(key)}, deadline_ - absl::Now());
    Check(values.status());
    const std::string& value = values->front();
    return std::vector<char>(value.begin(), value.end());
  }

  void wait(const std::vector<std::string>& keys) override {
    wait(keys, ToMillis(deadline_ - absl::Now()));
  }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full_keys;
    full_keys.reserve(keys.size());
    for (const std::string& key : keys) full_keys.push_back(Key(key));
    const absl::Duration left =
        std::min(absl::FromChrono(timeout), deadline_ - absl::Now());
    Check(store_->Wait(full_keys, left).status());
  }

  const absl::Status& error() const { return error_; }

 private:
  std::string Key(const std::string& key) const {
    return absl::StrCat(prefix_, "gloo/", key);
  }

  void Check(const absl::Status& status) {
    if (status.ok()) return;
    error_ = status;
    throw gloo::IoException(status.ToString());
  }

  RendezvousStoreInterface* const store_;
  const std::string prefix_;
  const absl::Time deadline_;
  absl::Status error_;
};

class GlooCommunicatorImpl final : public Communicator {
 public:
  // `context` is null for a group of one, which needs no transport.
  GlooCommunicatorImpl(int rank, int size,
                       std::shared_ptr<gloo::rendezvous::Context> context,
                       absl::Duration timeout)
      : rank_(rank),
        size_(size),
        context_(std::move(context)),
        timeout_(ToMillis(timeout)) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status AllToAll(const float* send, float* recv,
                        size_t count_per_peer) override {
    if (absl::Status s = CheckUsable("AllToAll"); !s.ok()) return s;
    if (count_per_peer == 0) return absl::OkStatus();
    if (context_ == nullptr) {
      std::memcpy(recv, send, count_per_peer * sizeof(float));
      return absl::OkStatus();
    }
    const size_t total = count_per_peer * static_cast<size_t>(size_);
    return Run("AllToAll", [&] {
      gloo::AlltoallOptions opts(context_);
      // Gloo's buffers are untyped and read-only for the input side.
      opts.setInput(const_cast<float*>(send), total);
      opts.setOutput(recv, total);
      opts.setTimeout(timeout_);
      gloo::alltoall(opts);
    });
  }

  absl::Status AllReduceSum(float* data, size_t count) override {
    if (absl::Status s = CheckUsable("AllReduceSum"); !s.ok()) return s;
    if (count == 0 || context_ == nullptr) return absl::OkStatus();
    return Run("AllReduceSum", [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, count);
      void (*sum)(void*, const void*, const void*, size_t) = &gloo::sum<float>;
      opts.setReduceFunction(sum);
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
    });
  }

  absl::Status Barrier() override {
    if (absl::Status s = CheckUsable("Barrier"); !s.ok()) return s;
    if (context_ == nullptr) return absl::OkStatus();
    return Run("Barrier", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

  void Abort() override {
    if (aborted_.exchange(true) || context_ == nullptr) return;
    // Closing the pairs (rather than destroying the context, which an
    // in-flight collective may still use) makes the peers' reads fail now.
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      try {
        context_->getPair(peer)->close();
      } catch (const std::exception&) {
        // The pair was already broken; nothing is left to close.
      }
    }
  }

 private:
  absl::Status CheckUsable(absl::string_view what) const {
    if (aborted_.load()) {
      return absl::AbortedError(
          absl::StrCat(what, " on an aborted Gloo communicator"));
    }
    if (!broken_.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          what,
          " on a Gloo communicator that already failed: ", broken_.message()));
    }
    return absl::OkStatus();
  }

  template <typename F>
  absl::Status Run(absl::string_view what, F&& collective) {
    try {
      collective();
      return absl::OkStatus();
    } catch (const std::exception& e) {
      // A failed Gloo collective leaves its pairs closed: so is this group.
      broken_ = aborted_.load()
                    ? absl::AbortedError(absl::StrCat(what, " aborted"))
                    : FromGlooException(e, what);
      return broken_;
    }
  }

  const int rank_;
  const int size_;
  const std::shared_ptr<gloo::rendezvous::Context> context_;
  const std::chrono::milliseconds timeout_;
  std::atomic<bool> aborted_{false};
  absl::Status broken_;  // Touched only by the thread running collectives.
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> GlooCommunicator::Create(
    const CommKey& key, int my_global_rank, const std::string& prefix,
    RendezvousStoreInterface* store, const Options& options) {
  absl::StatusOr<int> member =
      key.MemberRank(my_global_rank, store, "GlooCommunicator");
  if (!member.ok()) return member.status();
  const int rank = *member;
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("GlooCommunicator: timeout must be > 0");
  }
  if (options.form_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "GlooCommunicator: form_timeout must be >= 0");
  }
  const absl::Duration form_timeout =
      options.form_timeout > absl::ZeroDuration() ? options.form_timeout
                                                  : options.timeout;
  if (options.hostname.empty()) {
    return absl::InvalidArgumentError(
        "GlooCommunicator: hostname (the address peers reach this member at) "
        "must be set");
  }
  const int size = static_cast<int>(key.ranks.size());
  if (size == 1) {
    return std::unique_ptr<Communicator>(
        new GlooCommunicatorImpl(0, 1, nullptr, options.timeout));
  }

  if (absl::Status s = CheckResolvable(options.hostname); !s.ok()) return s;
  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot open a Gloo TCP device on '", options.hostname,
                     "': ", e.what()));
  }

  GlooStoreAdapter adapter(store, prefix, absl::Now() + form_timeout);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  // Bounds the connection; each collective sets its own (options.timeout).
  context->setTimeout(ToMillis(form_timeout));
  try {
    context->connectFullMesh(adapter, device);
  } catch (const std::exception& e) {
    if (!adapter.error().ok()) {
      const absl::Status& cause = adapter.error();
      return absl::Status(
          cause.code(),
          absl::StrCat("forming Gloo group ", key.ToString(), " as rank ",
                       my_global_rank, ": ", cause.message()));
    }
    return FromGlooException(
        e, absl::StrCat("forming Gloo group ", key.ToString(), " as rank ",
                        my_global_rank));
  }
  return std::unique_ptr<Communicator>(new GlooCommunicatorImpl(
      rank, size, std::move(context), options.timeout));
}

}  // namespace dcp

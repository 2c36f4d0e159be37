#ifndef DCP_COMMON_METRICS_METRICS_H_
#define DCP_COMMON_METRICS_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace dcp {

/// The Prometheus metric types dcp exposes.
enum class MetricType { kCounter, kGauge, kHistogram };

/// "counter", "gauge" or "histogram", as the `# TYPE` line spells it.
absl::string_view MetricTypeName(MetricType type);

/// A value that only goes up (events, seconds spent). Lock-free.
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  /// Adds `delta`. A counter never goes down: negative and NaN deltas are
  /// ignored.
  void Increment(double delta = 1.0);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

/// A value that goes up and down (queue depth, last error). Lock-free.
class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double delta);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

/// Counts observations into buckets with fixed upper bounds (Prometheus
/// `le`, inclusive) plus the implicit +Inf bucket, and keeps their sum.
/// Lock-free: one relaxed increment per observation and a compare-and-swap
/// on the sum.
class Histogram {
 public:
  /// `bounds`: finite, strictly increasing (checked by the registry).
  explicit Histogram(std::vector<double> bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  /// Adds one observation. NaN lands in the +Inf bucket and makes the sum
  /// NaN, as in the reference clients.
  void Observe(double value);

  /// A consistent-enough copy: `cumulative[i]` counts observations <=
  /// `bounds[i]`, the last entry (+Inf) counts all of them and equals
  /// `count`. `sum` is read separately and may miss an observation that is
  /// being added concurrently.
  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;
    uint64_t count = 0;
    double sum = 0;
  };
  Snapshot Read() const;

  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  /// Per bucket (not cumulative); one more than `bounds_` (+Inf).
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0.0};
};

/// `count` bucket bounds start, start*factor, start*factor^2, ...
/// (start > 0, factor > 1, count >= 1; INVALID_ARGUMENT otherwise).
absl::StatusOr<std::vector<double>> ExponentialBuckets(double start,
                                                       double factor,
                                                       int count);

/// One sample line of the exposition: `name{labels} value`.
struct MetricSample {
  /// The sample's own name: the family's, or `<family>_bucket`, `_sum`,
  /// `_count` for histograms.
  std::string name;
  /// Label name and value pairs in exposition order (a histogram bucket's
  /// `le` last).
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
};

/// Everything one family holds at the time of a `Collect`.
struct MetricFamilySnapshot {
  std::string name;
  std::string help;
  MetricType type = MetricType::kGauge;
  std::vector<MetricSample> samples;
};

namespace metrics_internal {

/// What the registry keeps of every family, whatever produces its samples.
class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, MetricType type,
             std::vector<std::string> label_names);
  virtual ~FamilyBase() = default;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  MetricType type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  /// Appends this family's samples (called by `MetricsRegistry::Collect`).
  virtual void CollectSamples(std::vector<MetricSample>* out) = 0;

 protected:
  /// INVALID_ARGUMENT: `got` label values for this family's label names.
  absl::Status WrongLabelCount(size_t got) const;
  /// Appends one counter or gauge sample for the label values `values` (one
  /// per label name).
  void AppendSample(const std::vector<std::string>& values, double value,
                    std::vector<MetricSample>* out) const;
  /// Appends the samples of one child: a counter's or gauge's value, or a
  /// histogram's buckets, sum and count.
  void AppendChild(const std::vector<std::string>& values, const Counter& c,
                   std::vector<MetricSample>* out) const;
  void AppendChild(const std::vector<std::string>& values, const Gauge& g,
                   std::vector<MetricSample>* out) const;
  void AppendChild(const std::vector<std::string>& values, const Histogram& h,
                   std::vector<MetricSample>* out) const;

 private:
  const std::string name_;
  const std::string help_;
  const MetricType type_;
  const std::vector<std::string> label_names_;
};

}  // namespace metrics_internal

/// The children of one labelled metric family (`Counter`, `Gauge` or
/// `Histogram`), one per distinct tuple of label values, created on first
/// use and kept for the registry's lifetime (labels are meant to be
/// low-cardinality: codes, methods, coefficient names; never ids).
///
/// Thread-safe. `WithLabels` takes a short mutex; hot paths look their
/// child up once and keep the pointer, which stays valid as long as the
/// registry.
///
///   ASSIGN_OR_RETURN(CounterFamily* rpcs,
///                    registry.AddCounterFamily("dcp_rpcs_total",
///                                              "RPCs handled.", {"code"}));
///   ASSIGN_OR_RETURN(Counter* ok, rpcs->WithLabels({"OK"}));
///   ok->Increment();
template <typename T>
class MetricFamily final : public metrics_internal::FamilyBase {
 public:
  using Factory = std::function<std::unique_ptr<T>()>;

  MetricFamily(std::string name, std::string help, MetricType type,
               std::vector<std::string> label_names, Factory factory)
      : FamilyBase(std::move(name), std::move(help), type,
                   std::move(label_names)),
        factory_(std::move(factory)) {}

  /// The child for `values`, one per label name in order. INVALID_ARGUMENT
  /// for the wrong number of values. Any string is a valid value (it is
  /// escaped, and invalid UTF-8 replaced, when rendered).
  absl::StatusOr<T*> WithLabels(const std::vector<std::string>& values) {
    if (values.size() != label_names().size()) {
      return WrongLabelCount(values.size());
    }
    absl::MutexLock lock(&mu_);
    std::unique_ptr<T>& child = children_[values];
    if (child == nullptr) child = factory_();
    return child.get();
  }

  void CollectSamples(std::vector<MetricSample>* out) override {
    absl::MutexLock lock(&mu_);
    for (const auto& [values, child] : children_) {
      AppendChild(values, *child, out);
    }
  }

 private:
  const Factory factory_;
  absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_
      ABSL_GUARDED_BY(mu_);
};

using CounterFamily = MetricFamily<Counter>;
using GaugeFamily = MetricFamily<Gauge>;
using HistogramFamily = MetricFamily<Histogram>;

/// One value a callback family reports at scrape time.
struct CollectedValue {
  /// One per label name of the family, in order.
  std::vector<std::string> label_values;
  double value = 0;
};

/// Holds a process's metric families and renders them in the Prometheus
/// text exposition format 0.0.4, for `MetricsHttpServer` (GET /metrics).
///
/// Families are registered once, at start-up, and live as long as the
/// registry. Names follow the Prometheus data model and its conventions,
/// checked at registration (INVALID_ARGUMENT naming the rule):
/// `[a-zA-Z_][a-zA-Z0-9_]*` (colons are reserved for recording rules),
/// counters end in `_total`, label names `[a-zA-Z_][a-zA-Z0-9_]*` without
/// the reserved `__` prefix, histograms take no `le` label, help is not
/// empty, and no family (or a histogram's `_bucket`/`_sum`/`_count`) may
/// shadow another (ALREADY_EXISTS).
///
/// Values come from two places: instruments (`Counter`, `Gauge`,
/// `Histogram`) that code updates as things happen, and callback families
/// whose function is evaluated at every scrape, for values read from a
/// snapshot of a component's state. Collect hooks run first at each scrape
/// (once, before any callback family), so a set of callback families can
/// share one snapshot taken by a hook.
///
/// Thread-safe. Instruments are lock-free; `Collect` / `RenderText` hold the
/// registry's lock while they run the hooks and callbacks, so scrapes are
/// serialized and hooks and callbacks must not call back into the registry.
/// Components take a `MetricsRegistry*`; a test gives them one of its own
/// and reads it back with `Collect` (no fake needed: it is all in memory).
///
///   MetricsRegistry registry;
///   ASSIGN_OR_RETURN(Counter* steps,
///                    registry.AddCounter("dcp_steps_total", "Steps run."));
///   steps->Increment();
///   std::string text = registry.RenderText();  // "# HELP dcp_steps_total..."
class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  /// An unlabelled counter, gauge or histogram (exposed from the start,
  /// at 0).
  absl::StatusOr<Counter*> AddCounter(std::string name, std::string help);
  absl::StatusOr<Gauge*> AddGauge(std::string name, std::string help);
  /// `bounds`: the finite upper bounds of the buckets, strictly increasing;
  /// the +Inf bucket is implicit.
  absl::StatusOr<Histogram*> AddHistogram(std::string name, std::string help,
                                          std::vector<double> bounds);

  /// Labelled families: children appear when first asked for.
  absl::StatusOr<CounterFamily*> AddCounterFamily(
      std::string name, std::string help, std::vector<std::string> labels);
  absl::StatusOr<GaugeFamily*> AddGaugeFamily(std::string name,
                                              std::string help,
                                              std::vector<std::string> labels);
  absl::StatusOr<HistogramFamily*> AddHistogramFamily(
      std::string name, std::string help, std::vector<std::string> labels,
      std::vector<double> bounds);

  /// A counter or gauge family whose samples `collect` returns at every
  /// scrape (values with the wrong number of label values are dropped and
  /// counted in `dropped_samples`). INVALID_ARGUMENT for a histogram type.
  /// `collect` runs under the registry's lock: it must be thread-safe
  /// with respect to the rest of the program and quick.
  absl::Status AddCallbackFamily(
      MetricType type, std::string name, std::string help,
      std::vector<std::string> labels,
      std::function<std::vector<CollectedValue>()> collect);
  /// An unlabelled callback counter or gauge.
  absl::Status AddCallback(MetricType type, std::string name, std::string help,
                           std::function<double()> value);

  /// Runs `hook` at the start of every `Collect`, before any callback
  /// family, in the order hooks were added.
  void AddCollectHook(std::function<void()> hook);

  /// Every family in registration order, with its samples (children in
  /// label-value order).
  std::vector<MetricFamilySnapshot> Collect();

  /// `Collect` in the text exposition format 0.0.4.
  std::string RenderText();

  /// Callback values dropped for a wrong number of label values.
  int64_t dropped_samples() const;

 private:
  absl::Status Register(std::unique_ptr<metrics_internal::FamilyBase> family)
      ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<metrics_internal::FamilyBase>> families_
      ABSL_GUARDED_BY(mu_);
  /// Family names and the sample names they produce, to refuse shadowing.
  absl::flat_hash_set<std::string> taken_names_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> hooks_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> dropped_samples_{0};
};

/// Renders `families` in the text exposition format 0.0.4: per family a
/// `# HELP` line (help with `\` and newline escaped), a `# TYPE` line and
/// one line per sample (label values with `\`, `"` and newline escaped,
/// invalid UTF-8 replaced by U+FFFD).
std::string RenderMetricsText(
    const std::vector<MetricFamilySnapshot>& families);

/// A sample value as Prometheus' own clients print it: `+Inf`, `-Inf`,
/// `NaN`, or the shortest decimal that reads back as the same double, in
/// Go's %g style ("1", "0.005", "1e+06").
std::string FormatMetricValue(double value);

/// The MIME type of `RenderMetricsText`'s output.
inline constexpr absl::string_view kMetricsTextContentType =
    "text/plain; version=0.0.4; charset=utf-8";

}  // namespace dcp

#endif  // DCP_COMMON_METRICS_METRICS_H_

#include "common/metrics/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dcp {
namespace {

/// Adds `delta` to an atomic double (C++17 has no fetch_add for it).
void AtomicAdd(std::atomic<double>& target, double delta) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + delta,
                                       std::memory_order_relaxed)) {
  }
}

bool IsNameStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

absl::Status CheckMetricName(absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("metric name is empty");
  if (name.find(':') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metric name '", name,
        "' contains ':', which Prometheus reserves for recording rules"));
  }
  if (!IsNameStart(name[0]) ||
      !std::all_of(name.begin(), name.end(), IsNameChar)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metric name '", name, "' does not match [a-zA-Z_][a-zA-Z0-9_]*"));
  }
  return absl::OkStatus();
}

absl::Status CheckLabelNames(absl::string_view metric, MetricType type,
                             const std::vector<std::string>& labels) {
  for (size_t i = 0; i < labels.size(); ++i) {
    const std::string& label = labels[i];
    if (label.empty() || !IsNameStart(label[0]) ||
        !std::all_of(label.begin(), label.end(), IsNameChar)) {
      return absl::InvalidArgumentError(
          absl::StrCat("label name '", label, "' of '", metric,
                       "' does not match [a-zA-Z_][a-zA-Z0-9_]*"));
    }
    if (absl::StartsWith(label, "__")) {
      return absl::InvalidArgumentError(
          absl::StrCat("label name '", label, "' of '", metric,
                       "' starts with '__', which Prometheus reserves"));
    }
    if (type == MetricType::kHistogram && label == "le") {
      return absl::InvalidArgumentError(absl::StrCat(
          "histogram '", metric, "' cannot have a label 'le' (its buckets')"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (labels[j] == label) {
        return absl::InvalidArgumentError(absl::StrCat(
            "label name '", label, "' appears twice in '", metric, "'"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFamily(absl::string_view name, absl::string_view help,
                         MetricType type,
                         const std::vector<std::string>& labels) {
  if (auto s = CheckMetricName(name); !s.ok()) return s;
  if (type == MetricType::kCounter && !absl::EndsWith(name, "_total")) {
    return absl::InvalidArgumentError(
        absl::StrCat("counter '", name, "' must end in '_total'"));
  }
  if (type != MetricType::kCounter && absl::EndsWith(name, "_total")) {
    return absl::InvalidArgumentError(
        absl::StrCat(MetricTypeName(type), " '", name,
                     "' must not end in '_total' (only counters do)"));
  }
  if (help.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric '", name, "' has no help text"));
  }
  return CheckLabelNames(name, type, labels);
}

absl::Status CheckBounds(absl::string_view name,
                         const std::vector<double>& bounds) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "histogram '", name, "': bucket bound ", FormatMetricValue(bounds[i]),
          " is not finite (the +Inf bucket is implicit)"));
    }
    if (i > 0 && !(bounds[i] > bounds[i - 1])) {
      return absl::InvalidArgumentError(
          absl::StrCat("histogram '", name,
                       "': bucket bounds must be strictly increasing, but ",
                       FormatMetricValue(bounds[i]), " follows ",
                       FormatMetricValue(bounds[i - 1])));
    }
  }
  return absl::OkStatus();
}

/// Names a family takes: its own and those of the samples it produces.
std::vector<std::string> TakenNames(const std::string& name, MetricType type) {
  if (type != MetricType::kHistogram) return {name};
  return {name, name + "_bucket", name + "_sum", name + "_count"};
}

/// A family whose samples a function returns at every scrape.
class CallbackFamily final : public metrics_internal::FamilyBase {
 public:
  CallbackFamily(std::string name, std::string help, MetricType type,
                 std::vector<std::string> labels,
                 std::function<std::vector<CollectedValue>()> collect,
                 std::atomic<int64_t>* dropped)
      : FamilyBase(std::move(name), std::move(help), type, std::move(labels)),
        collect_(std::move(collect)),
        dropped_(dropped) {}

  void CollectSamples(std::vector<MetricSample>* out) override {
    std::vector<CollectedValue> values = collect_();
    std::stable_sort(values.begin(), values.end(),
                     [](const CollectedValue& a, const CollectedValue& b) {
                       return a.label_values < b.label_values;
                     });
    for (size_t i = 0; i < values.size(); ++i) {
      const bool wrong_arity =
          values[i].label_values.size() != label_names().size();
      // Two samples with the same labels would make the exposition invalid.
      const bool duplicate =
          i > 0 && values[i].label_values == values[i - 1].label_values;
      if (wrong_arity || duplicate) {
        dropped_->fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      AppendSample(values[i].label_values, values[i].value, out);
    }
  }

 private:
  const std::function<std::vector<CollectedValue>()> collect_;
  std::atomic<int64_t>* const dropped_;
};

/// Appends `text` to `out` with invalid UTF-8 replaced by U+FFFD, `\` and
/// newline escaped, and `"` too when `quote`.
void AppendEscaped(absl::string_view text, bool quote, std::string* out) {
  static constexpr absl::string_view kReplacement = "\xEF\xBF\xBD";
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      if (c == '\\') {
        out->append("\\\\");
      } else if (c == '\n') {
        out->append("\\n");
      } else if (c == '"' && quote) {
        out->append("\\\"");
      } else {
        out->push_back(static_cast<char>(c));
      }
      ++i;
      continue;
    }
    // The well-formed sequences of Unicode's table 3-7.
    size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;  // range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) low = 0xA0;
      if (c == 0xED) high = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) low = 0x90;
      if (c == 0xF4) high = 0x8F;  // nothing above U+10FFFF
    }
    bool valid =
        length > 0 && i + length <= n && s[i + 1] >= low && s[i + 1] <= high;
    for (size_t k = 2; valid && k < length; ++k) {
      valid = s[i + k] >= 0x80 && s[i + k] <= 0xBF;
    }
    if (valid) {
      out->append(text.data() + i, length);
      i += length;
    } else {
      out->append(kReplacement.data(), kReplacement.size());
      ++i;
    }
  }
}

}  // namespace

absl::string_view MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// ------------------------------------------------------------ instruments

void Counter::Increment(double delta) {
  if (!(delta >= 0)) return;  // negative or NaN
  AtomicAdd(value_, delta);
}

void Gauge::Add(double delta) { AtomicAdd(value_, delta); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    counts_[i].store(0, std::memory_order_relaxed);
  }
}

void Histogram::Observe(double value) {
  const size_t bucket =
      std::isnan(value)
          ? bounds_.size()
          : static_cast<size_t>(
                std::lower_bound(bounds_.begin(), bounds_.end(), value) -
                bounds_.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, value);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot out;
  out.bounds = bounds_;
  out.cumulative.resize(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    out.cumulative[i] = running;
  }
  out.count = running;
  out.sum = sum_.load(std::memory_order_relaxed);
  return out;
}

absl::StatusOr<std::vector<double>> ExponentialBuckets(double start,
                                                       double factor,
                                                       int count) {
  if (!(start > 0) || !(factor > 1) || count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("exponential buckets need start > 0, factor > 1 and "
                     "count >= 1; got start ",
                     start, ", factor ", factor, ", count ", count));
  }
  std::vector<double> bounds;
  double bound = start;
  for (int i = 0; i < count; ++i, bound *= factor) bounds.push_back(bound);
  return bounds;
}

// ------------------------------------------------------------ families

namespace metrics_internal {

FamilyBase::FamilyBase(std::string name, std::string help, MetricType type,
                       std::vector<std::string> label_names)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)) {}

absl::Status FamilyBase::WrongLabelCount(size_t got) const {
  return absl::InvalidArgumentError(absl::StrCat(
      "metric '", name_, "' has ", label_names_.size(), " label(s) [",
      absl::StrJoin(label_names_, ","), "] but was given ", got, " value(s)"));
}

void FamilyBase::AppendSample(const std::vector<std::string>& values,
                              double value,
                              std::vector<MetricSample>* out) const {
  MetricSample sample;
  sample.name = name_;
  for (size_t i = 0; i < values.size(); ++i) {
    sample.labels.emplace_back(label_names_[i], values[i]);
  }
  sample.value = value;
  out->push_back(std::move(sample));
}

void FamilyBase::AppendChild(const std::vector<std::string>& values,
                             const Counter& c,
                             std::vector<MetricSample>* out) const {
  AppendSample(values, c.Value(), out);
}

void FamilyBase::AppendChild(const std::vector<std::string>& values,
                             const Gauge& g,
                             std::vector<MetricSample>* out) const {
  AppendSample(values, g.Value(), out);
}

void FamilyBase::AppendChild(const std::vector<std::string>& values,
                             const Histogram& h,
                             std::vector<MetricSample>* out) const {
  const Histogram::Snapshot snapshot = h.Read();
  std::vector<std::pair<std::string, std::string>> labels;
  for (size_t i = 0; i < values.size(); ++i) {
    labels.emplace_back(label_names_[i], values[i]);
  }
  for (size_t b = 0; b < snapshot.cumulative.size(); ++b) {
    MetricSample bucket;
    bucket.name = name_ + "_bucket";
    bucket.labels = labels;
    bucket.labels.emplace_back("le", b < snapshot.bounds.size()
                                         ? FormatMetricValue(snapshot.bounds[b])
                                         : std::string("+Inf"));
    bucket.value = static_cast<double>(snapshot.cumulative[b]);
    out->push_back(std::move(bucket));
  }
  out->push_back(MetricSample{name_ + "_sum", labels, snapshot.sum});
  out->push_back(MetricSample{name_ + "_count", labels,
                              static_cast<double>(snapshot.count)});
}

}  // namespace metrics_internal

// ------------------------------------------------------------ registry

absl::Status MetricsRegistry::Register(
    std::unique_ptr<metrics_internal::FamilyBase> family) {
  const std::vector<std::string> names =
      TakenNames(family->name(), family->type());
  absl::MutexLock lock(&mu_);
  for (const std::string& name : names) {
    if (taken_names_.contains(name)) {
      return absl::AlreadyExistsError(
          absl::StrCat("metric '", family->name(),
                       "' clashes with the registered name '", name, "'"));
    }
  }
  taken_names_.insert(names.begin(), names.end());
  families_.push_back(std::move(family));
  return absl::OkStatus();
}

absl::StatusOr<CounterFamily*> MetricsRegistry::AddCounterFamily(
    std::string name, std::string help, std::vector<std::string> labels) {
  if (auto s = CheckFamily(name, help, MetricType::kCounter, labels); !s.ok()) {
    return s;
  }
  auto family = std::make_unique<CounterFamily>(
      std::move(name), std::move(help), MetricType::kCounter, std::move(labels),
      [] { return std::make_unique<Counter>(); });
  CounterFamily* out = family.get();
  if (auto s = Register(std::move(family)); !s.ok()) return s;
  return out;
}

absl::StatusOr<GaugeFamily*> MetricsRegistry::AddGaugeFamily(
    std::string name, std::string help, std::vector<std::string> labels) {
  if (auto s = CheckFamily(name, help, MetricType::kGauge, labels); !s.ok()) {
    return s;
  }
  auto family = std::make_unique<GaugeFamily>(
      std::move(name), std::move(help), MetricType::kGauge, std::move(labels),
      [] { return std::make_unique<Gauge>(); });
  GaugeFamily* out = family.get();
  if (auto s = Register(std::move(family)); !s.ok()) return s;
  return out;
}

absl::StatusOr<HistogramFamily*> MetricsRegistry::AddHistogramFamily(
    std::string name, std::string help, std::vector<std::string> labels,
    std::vector<double> bounds) {
  if (auto s = CheckFamily(name, help, MetricType::kHistogram, labels);
      !s.ok()) {
    return s;
  }
  if (auto s = CheckBounds(name, bounds); !s.ok()) return s;
  auto family = std::make_unique<HistogramFamily>(
      std::move(name), std::move(help), MetricType::kHistogram,
      std::move(labels),
      [bounds] { return std::make_unique<Histogram>(bounds); });
  HistogramFamily* out = family.get();
  if (auto s = Register(std::move(family)); !s.ok()) return s;
  return out;
}

absl::StatusOr<Counter*> MetricsRegistry::AddCounter(std::string name,
                                                     std::string help) {
  absl::StatusOr<CounterFamily*> family =
      AddCounterFamily(std::move(name), std::move(help), {});
  if (!family.ok()) return family.status();
  return (*family)->WithLabels({});
}

absl::StatusOr<Gauge*> MetricsRegistry::AddGauge(std::string name,
                                                 std::string help) {
  absl::StatusOr<GaugeFamily*> family =
      AddGaugeFamily(std::move(name), std::move(help), {});
  if (!family.ok()) return family.status();
  return (*family)->WithLabels({});
}

absl::StatusOr<Histogram*> MetricsRegistry::AddHistogram(
    std::string name, std::string help, std::vector<double> bounds) {
  absl::StatusOr<HistogramFamily*> family = AddHistogramFamily(
      std::move(name), std::move(help), {}, std::move(bounds));
  if (!family.ok()) return family.status();
  return (*family)->WithLabels({});
}

absl::Status MetricsRegistry::AddCallbackFamily(
    MetricType type, std::string name, std::string help,
    std::vector<std::string> labels,
    std::function<std::vector<CollectedValue>()> collect) {
  if (type == MetricType::kHistogram) {
    return absl::InvalidArgumentError(absl::StrCat(
        "callback metric '", name, "' must be a counter or a gauge"));
  }
  if (collect == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("callback metric '", name, "' has no callback"));
  }
  if (auto s = CheckFamily(name, help, type, labels); !s.ok()) return s;
  return Register(std::make_unique<CallbackFamily>(
      std::move(name), std::move(help), type, std::move(labels),
      std::move(collect), &dropped_samples_));
}

absl::Status MetricsRegistry::AddCallback(MetricType type, std::string name,
                                          std::string help,
                                          std::function<double()> value) {
  if (value == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("callback metric '", name, "' has no callback"));
  }
  return AddCallbackFamily(type, std::move(name), std::move(help), {},
                           [value = std::move(value)] {
                             return std::vector<CollectedValue>{{{}, value()}};
                           });
}

void MetricsRegistry::AddCollectHook(std::function<void()> hook) {
  absl::MutexLock lock(&mu_);
  hooks_.push_back(std::move(hook));
}

std::vector<MetricFamilySnapshot> MetricsRegistry::Collect() {
  absl::MutexLock lock(&mu_);
  for (const std::function<void()>& hook : hooks_) hook();
  std::vector<MetricFamilySnapshot> out;
  out.reserve(families_.size());
  for (const auto& family : families_) {
    MetricFamilySnapshot snapshot;
    snapshot.name = family->name();
    snapshot.help = family->help();
    snapshot.type = family->type();
    family->CollectSamples(&snapshot.samples);
    out.push_back(std::move(snapshot));
  }
  return out;
}

std::string MetricsRegistry::RenderText() {
  return RenderMetricsText(Collect());
}

int64_t MetricsRegistry::dropped_samples() const {
  return dropped_samples_.load(std::memory_order_relaxed);
}

// ------------------------------------------------------------ text format

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == 0) return std::signbit(value) ? "-0" : "0";
  // Go's strconv.FormatFloat(v, 'g', -1, 64), which Prometheus' own
  // clients print with: the shortest digits that read back exactly, in
  // exponent form when the decimal exponent is < -4 or >= 6.
  char buf[64];
  const std::to_chars_result sci = std::to_chars(buf, buf + sizeof(buf), value,
                                                 std::chars_format::scientific);
  const absl::string_view text(buf, sci.ptr - buf);
  const size_t e = text.find('e');
  const int exponent = std::atoi(std::string(text.substr(e + 1)).c_str());
  if (exponent < -4 || exponent >= 6) return std::string(text);
  const std::to_chars_result fixed =
      std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::fixed);
  return std::string(buf, fixed.ptr - buf);
}

std::string RenderMetricsText(
    const std::vector<MetricFamilySnapshot>& families) {
  std::string out;
  for (const MetricFamilySnapshot& family : families) {
    absl::StrAppend(&out, "# HELP ", family.name, " ");
    AppendEscaped(family.help, /*quote=*/false, &out);
    absl::StrAppend(&out, "\n# TYPE ", family.name, " ",
                    MetricTypeName(family.type), "\n");
    for (const MetricSample& sample : family.samples) {
      out.append(sample.name);
      if (!sample.labels.empty()) {
        out.push_back('{');
        for (size_t i = 0; i < sample.labels.size(); ++i) {
          if (i > 0) out.push_back(',');
          absl::StrAppend(&out, sample.labels[i].first, "=\"");
          AppendEscaped(sample.labels[i].second, /*quote=*/true, &out);
          out.push_back('"');
        }
        out.push_back('}');
      }
      absl::StrAppend(&out, " ", FormatMetricValue(sample.value), "\n");
    }
  }
  return out;
}

}  // namespace dcp

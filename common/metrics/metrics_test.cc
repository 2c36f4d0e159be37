#include "common/metrics/metrics.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "common/metrics/metrics_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string TmpDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir == nullptr ? "/tmp" : dir;
}

TEST(CounterTest, OnlyGoesUp) {
  Counter c;
  c.Increment();
  c.Increment(2.5);
  c.Increment(-4);
  c.Increment(kNaN);
  EXPECT_EQ(c.Value(), 3.5);
}

TEST(GaugeTest, SetsAndAdds) {
  Gauge g;
  g.Set(4);
  g.Add(-1.5);
  EXPECT_EQ(g.Value(), 2.5);
  g.Set(kNaN);
  EXPECT_TRUE(std::isnan(g.Value()));
}

TEST(HistogramTest, BucketsAreInclusiveUpperBoundsAndCumulative) {
  Histogram h({1, 2, 5});
  for (double v : {0.5, 1.0, 1.5, 2.0, 4.0, 7.0, 100.0}) h.Observe(v);
  const Histogram::Snapshot s = h.Read();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 4, 5, 7}));
  EXPECT_EQ(s.count, 7u);
  EXPECT_DOUBLE_EQ(s.sum, 116.0);
}

TEST(HistogramTest, NaNGoesToTheInfBucket) {
  Histogram h({1});
  h.Observe(kNaN);
  const Histogram::Snapshot s = h.Read();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{0, 1}));
  EXPECT_TRUE(std::isnan(s.sum));
}

TEST(ExponentialBucketsTest, MultipliesAndValidates) {
  EXPECT_EQ(*ExponentialBuckets(0.001, 10, 4),
            (std::vector<double>{0.001, 0.01, 0.1, 1.0}));
  EXPECT_EQ(ExponentialBuckets(0, 2, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExponentialBuckets(1, 1, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExponentialBuckets(1, 2, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FormatMetricValueTest, MatchesGoShortestG) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(-0.0), "-0");
  EXPECT_EQ(FormatMetricValue(1), "1");
  EXPECT_EQ(FormatMetricValue(-1), "-1");
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(0.005), "0.005");
  EXPECT_EQ(FormatMetricValue(0.0001), "0.0001");
  EXPECT_EQ(FormatMetricValue(0.00001), "1e-05");
  EXPECT_EQ(FormatMetricValue(2.5), "2.5");
  EXPECT_EQ(FormatMetricValue(123456), "123456");
  EXPECT_EQ(FormatMetricValue(999999), "999999");
  EXPECT_EQ(FormatMetricValue(1e6), "1e+06");
  EXPECT_EQ(FormatMetricValue(1234567), "1.234567e+06");
  EXPECT_EQ(FormatMetricValue(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(FormatMetricValue(9007199254740993.0), "9.007199254740992e+15");
  EXPECT_EQ(FormatMetricValue(-2.5e-300), "-2.5e-300");
  EXPECT_EQ(FormatMetricValue(kInf), "+Inf");
  EXPECT_EQ(FormatMetricValue(-kInf), "-Inf");
  EXPECT_EQ(FormatMetricValue(kNaN), "NaN");
}

TEST(RegistryTest, RendersTheTextFormat) {
  MetricsRegistry registry;
  Counter* c =
      *registry.AddCounter("dcp_things_total", "Things.\nWith a back\\slash.");
  c->Increment(3);
  GaugeFamily* g = *registry.AddGaugeFamily("dcp_temperature_celsius",
                                            "Temperature.", {"room", "floor"});
  (*g->WithLabels({"a\"b", "1"}))->Set(-kInf);
  (*g->WithLabels({"back\\slash\nnewline", "2"}))->Set(kNaN);
  Histogram* h = *registry.AddHistogram("dcp_wait_seconds", "Waits.", {0.5, 1});
  h->Observe(0.25);
  h->Observe(0.75);
  h->Observe(3);

  EXPECT_EQ(registry.RenderText(),
            "# HELP dcp_things_total Things.\\nWith a back\\\\slash.\n"
            "# TYPE dcp_things_total counter\n"
            "dcp_things_total 3\n"
            "# HELP dcp_temperature_celsius Temperature.\n"
            "# TYPE dcp_temperature_celsius gauge\n"
            "dcp_temperature_celsius{room=\"a\\\"b\",floor=\"1\"} -Inf\n"
            "dcp_temperature_celsius{room=\"back\\\\slash\\nnewline\","
            "floor=\"2\"} NaN\n"
            "# HELP dcp_wait_seconds Waits.\n"
            "# TYPE dcp_wait_seconds histogram\n"
            "dcp_wait_seconds_bucket{le=\"0.5\"} 1\n"
            "dcp_wait_seconds_bucket{le=\"1\"} 2\n"
            "dcp_wait_seconds_bucket{le=\"+Inf\"} 3\n"
            "dcp_wait_seconds_sum 4\n"
            "dcp_wait_seconds_count 3\n");
}

TEST(RegistryTest, LabelledHistogramPutsLeLast) {
  MetricsRegistry registry;
  HistogramFamily* h =
      *registry.AddHistogramFamily("dcp_rpc_seconds", "RPCs.", {"method"}, {1});
  (*h->WithLabels({"Get"}))->Observe(2);
  EXPECT_THAT(registry.RenderText(),
              HasSubstr("dcp_rpc_seconds_bucket{method=\"Get\",le=\"1\"} 0\n"
                        "dcp_rpc_seconds_bucket{method=\"Get\",le=\"+Inf\"} 1\n"
                        "dcp_rpc_seconds_sum{method=\"Get\"} 2\n"
                        "dcp_rpc_seconds_count{method=\"Get\"} 1\n"));
}

TEST(RegistryTest, ReplacesInvalidUtf8InLabelValuesAndHelp) {
  MetricsRegistry registry;
  GaugeFamily* g = *registry.AddGaugeFamily("dcp_g", "Bad \xff help.", {"l"});
  // A lone continuation byte, a truncated 3-byte sequence, an encoded
  // surrogate, and valid multi-byte text that must survive.
  (*g->WithLabels({"a\x80z\xE2\x82|\xED\xA0\x80|\xC3\xA9\xE2\x82\xAC"}))
      ->Set(1);
  const std::string text = registry.RenderText();
  EXPECT_THAT(text, HasSubstr("# HELP dcp_g Bad \xEF\xBF\xBD help.\n"));
  EXPECT_THAT(text, HasSubstr("dcp_g{l=\"a\xEF\xBF\xBDz\xEF\xBF\xBD\xEF\xBF\xBD"
                              "|\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD|"
                              "\xC3\xA9\xE2\x82\xAC\"} 1\n"));
}

TEST(RegistryTest, RefusesBadNames) {
  MetricsRegistry r;
  auto code = [](const absl::Status& s) { return s.code(); };
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code(r.AddGauge("", "h").status()), kInvalid);
  EXPECT_EQ(code(r.AddGauge("1abc", "h").status()), kInvalid);
  EXPECT_EQ(code(r.AddGauge("a-b", "h").status()), kInvalid);
  EXPECT_EQ(code(r.AddGauge("a b", "h").status()), kInvalid);
  EXPECT_EQ(code(r.AddGauge("job:rate5m", "h").status()), kInvalid);
  EXPECT_EQ(code(r.AddGauge("dcp_g", "").status()), kInvalid);
  EXPECT_EQ(code(r.AddCounter("dcp_events", "h").status()), kInvalid);
  EXPECT_EQ(code(r.AddGauge("dcp_events_total", "h").status()), kInvalid);
  EXPECT_EQ(code(r.AddGaugeFamily("dcp_g", "h", {"__name"}).status()),
            kInvalid);
  EXPECT_EQ(code(r.AddGaugeFamily("dcp_g", "h", {"a-b"}).status()), kInvalid);
  EXPECT_EQ(code(r.AddGaugeFamily("dcp_g", "h", {"9a"}).status()), kInvalid);
  EXPECT_EQ(code(r.AddGaugeFamily("dcp_g", "h", {"a", "a"}).status()),
            kInvalid);
  EXPECT_EQ(code(r.AddHistogramFamily("dcp_h", "h", {"le"}, {1}).status()),
            kInvalid);
  EXPECT_EQ(code(r.AddHistogram("dcp_h", "h", {2, 1}).status()), kInvalid);
  EXPECT_EQ(code(r.AddHistogram("dcp_h", "h", {1, 1}).status()), kInvalid);
  EXPECT_EQ(code(r.AddHistogram("dcp_h", "h", {1, kInf}).status()), kInvalid);
  EXPECT_EQ(code(r.AddHistogram("dcp_h", "h", {kNaN}).status()), kInvalid);
  EXPECT_EQ(
      code(r.AddCallbackFamily(MetricType::kHistogram, "dcp_h", "h", {},
                               [] { return std::vector<CollectedValue>{}; })),
      kInvalid);
  EXPECT_EQ(code(r.AddCallback(MetricType::kGauge, "dcp_c", "h", nullptr)),
            kInvalid);
  // Nothing half-registered: every name is still free.
  EXPECT_TRUE(r.AddGauge("dcp_g", "h").ok());
  EXPECT_TRUE(r.AddHistogram("dcp_h", "h", {1}).ok());
  EXPECT_THAT(r.AddCounter("dcp_events", "h").status().message(),
              HasSubstr("_total"));
}

TEST(RegistryTest, RefusesShadowedNames) {
  MetricsRegistry r;
  ASSERT_TRUE(r.AddHistogram("dcp_wait_seconds", "h", {1}).ok());
  constexpr auto kExists = absl::StatusCode::kAlreadyExists;
  EXPECT_EQ(r.AddGauge("dcp_wait_seconds", "h").status().code(), kExists);
  EXPECT_EQ(r.AddGauge("dcp_wait_seconds_sum", "h").status().code(), kExists);
  EXPECT_EQ(r.AddGauge("dcp_wait_seconds_count", "h").status().code(), kExists);
  EXPECT_EQ(r.AddGauge("dcp_wait_seconds_bucket", "h").status().code(),
            kExists);
  ASSERT_TRUE(r.AddGauge("dcp_queue_count", "h").ok());
  EXPECT_EQ(r.AddHistogram("dcp_queue", "h", {1}).status().code(), kExists);
  EXPECT_EQ(r.AddCallback(MetricType::kGauge, "dcp_queue_count", "h",
                          [] { return 1.0; })
                .code(),
            kExists);
}

TEST(RegistryTest, WithLabelsChecksArityAndReusesChildren) {
  MetricsRegistry r;
  CounterFamily* f = *r.AddCounterFamily("dcp_rpcs_total", "h", {"method"});
  EXPECT_EQ(f->WithLabels({}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f->WithLabels({"a", "b"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  Counter* a = *f->WithLabels({"a"});
  EXPECT_EQ(*f->WithLabels({"a"}), a);
  EXPECT_NE(*f->WithLabels({"b"}), a);
  a->Increment();
  EXPECT_EQ(FindSample(r.Collect(), "dcp_rpcs_total", {{"method", "a"}}), 1.0);
  EXPECT_EQ(FindSample(r.Collect(), "dcp_rpcs_total", {{"method", "b"}}), 0.0);
}

TEST(RegistryTest, CallbacksRunAtEveryScrapeAfterTheHooks) {
  MetricsRegistry r;
  int hook_runs = 0;
  double snapshot = 0;
  double source = 7;
  r.AddCollectHook([&] {
    ++hook_runs;
    snapshot = source;
  });
  ASSERT_TRUE(r.AddCallback(MetricType::kGauge, "dcp_depth", "h", [&] {
                 return snapshot;
               }).ok());
  ASSERT_TRUE(r.AddCallbackFamily(MetricType::kCounter, "dcp_done_total", "h",
                                  {"kind"},
                                  [&] {
                                    return std::vector<CollectedValue>{
                                        {{"z"}, 2 * snapshot},
                                        {{"a"}, snapshot},
                                        {{"a"}, 99},      // duplicate
                                        {{"x", "y"}, 1},  // wrong arity
                                    };
                                  })
                  .ok());
  std::vector<MetricFamilySnapshot> first = r.Collect();
  EXPECT_EQ(hook_runs, 1);
  EXPECT_EQ(FindSample(first, "dcp_depth"), 7.0);
  source = 9;
  const std::string text = r.RenderText();
  EXPECT_EQ(hook_runs, 2);
  EXPECT_THAT(text, HasSubstr("dcp_depth 9\n"));
  // Sorted by label values; the duplicate and the wrong arity dropped.
  EXPECT_THAT(text, HasSubstr("# TYPE dcp_done_total counter\n"
                              "dcp_done_total{kind=\"a\"} 9\n"
                              "dcp_done_total{kind=\"z\"} 18\n"));
  EXPECT_EQ(r.dropped_samples(), 4);
}

TEST(RegistryTest, InstrumentsAreExactUnderConcurrentUpdates) {
  MetricsRegistry r;
  Counter* c = *r.AddCounter("dcp_hits_total", "h");
  Histogram* h = *r.AddHistogram("dcp_lat_seconds", "h", {0.5});
  CounterFamily* f = *r.AddCounterFamily("dcp_codes_total", "h", {"code"});
  constexpr int kThreads = 8;
  constexpr int kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Counter* mine = *f->WithLabels({t % 2 == 0 ? "even" : "odd"});
      for (int i = 0; i < kPerThread; ++i) {
        c->Increment();
        mine->Increment();
        h->Observe(i % 2 == 0 ? 0.25 : 1.0);
      }
    });
  }
  // Scrapes while the updates run must not disturb them.
  for (int i = 0; i < 20; ++i) r.RenderText();
  for (std::thread& t : threads) t.join();
  const auto families = r.Collect();
  EXPECT_EQ(FindSample(families, "dcp_hits_total"), kThreads * kPerThread);
  EXPECT_EQ(FindSample(families, "dcp_codes_total", {{"code", "even"}}),
            kThreads / 2 * kPerThread);
  EXPECT_EQ(FindSample(families, "dcp_lat_seconds_count"),
            kThreads * kPerThread);
  EXPECT_EQ(FindSample(families, "dcp_lat_seconds_bucket", {{"le", "0.5"}}),
            kThreads * kPerThread / 2);
  EXPECT_EQ(FindSample(families, "dcp_lat_seconds_sum"),
            kThreads * kPerThread / 2 * 1.25);
}

// The escaping and number formats above, checked by Prometheus' own parser
// and linter.
TEST(RegistryTest, PromtoolAcceptsTheExposition) {
  MetricsRegistry registry;
  (*registry.AddCounter("dcp_things_total", "Things.\nWith a back\\slash."))
      ->Increment(1234567);
  GaugeFamily* g = *registry.AddGaugeFamily("dcp_temperature_celsius",
                                            "Temperature.", {"room", "floor"});
  (*g->WithLabels({"a\"b", "1"}))->Set(-kInf);
  (*g->WithLabels({"back\\slash\nnewline \xff", "2"}))->Set(kNaN);
  (*g->WithLabels({"", "3"}))->Set(1e-9);
  HistogramFamily* h =
      *registry.AddHistogramFamily("dcp_wait_seconds", "Waits.", {"kind"},
                                   *ExponentialBuckets(0.001, 10, 5));
  (*h->WithLabels({"x"}))->Observe(0.02);
  (*h->WithLabels({"y"}))->Observe(kNaN);
  ASSERT_TRUE(registry
                  .AddCallback(MetricType::kGauge, "dcp_depth", "Depth.",
                               [] { return 3.0; })
                  .ok());
  absl::StatusOr<PromtoolResult> result =
      RunPromtoolCheckMetrics(registry.RenderText(), TmpDir());
  if (absl::IsNotFound(result.status())) {
    GTEST_SKIP() << result.status().message();
  }
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0) << result->output;
  EXPECT_EQ(result->output, "") << result->output;
}

// The check above can fail: promtool does reject what breaks the rules.
TEST(RegistryTest, PromtoolRejectsABrokenExposition) {
  absl::StatusOr<PromtoolResult> result = RunPromtoolCheckMetrics(
      "# TYPE dcp_x counter\ndcp_x{l=\"unterminated} 1\n", TmpDir());
  if (absl::IsNotFound(result.status())) {
    GTEST_SKIP() << result.status().message();
  }
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_NE(result->exit_code, 0) << result->output;
}

}  // namespace
}  // namespace dcp

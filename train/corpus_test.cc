#include "train/corpus.h"

#include <algorithm>

#include <set>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

SyntheticCorpus::Options SmallVocab(double noise) {
  SyntheticCorpus::Options options;
  options.vocab = 64;
  options.patterns = 4;
  options.noise = noise;
  options.seed = 11;
  return options;
}

TEST(SyntheticCorpusTest, SamplesArePureFunctionsOfIdAndLength) {
  const SyntheticCorpus a(SmallVocab(0.05));
  const SyntheticCorpus b(SmallVocab(0.05));
  absl::StatusOr<TokenSample> x = a.Tokens(7, 100);
  absl::StatusOr<TokenSample> y = b.Tokens(7, 100);
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(x->inputs, y->inputs);
  EXPECT_EQ(x->targets, y->targets);
  // Another sample, and another seed, give other tokens.
  EXPECT_NE(a.Tokens(8, 100)->inputs, x->inputs);
  SyntheticCorpus::Options reseeded = SmallVocab(0.05);
  reseeded.seed = 12;
  EXPECT_NE(SyntheticCorpus(reseeded).Tokens(7, 100)->inputs, x->inputs);
}

TEST(SyntheticCorpusTest, TargetsAreTheNextTokensAndShortSamplesArePrefixes) {
  const SyntheticCorpus corpus(SmallVocab(0.05));
  absl::StatusOr<TokenSample> long_sample = corpus.Tokens(3, 50);
  absl::StatusOr<TokenSample> short_sample = corpus.Tokens(3, 10);
  ASSERT_TRUE(long_sample.ok() && short_sample.ok());
  ASSERT_EQ(long_sample->inputs.size(), 50u);
  ASSERT_EQ(long_sample->targets.size(), 50u);
  for (int t = 0; t + 1 < 50; ++t) {
    EXPECT_EQ(long_sample->targets[t], long_sample->inputs[t + 1]);
  }
  ASSERT_EQ(short_sample->inputs.size(), 10u);
  for (int t = 0; t < 10; ++t) {
    EXPECT_EQ(short_sample->inputs[t], long_sample->inputs[t]);
    EXPECT_EQ(short_sample->targets[t], long_sample->targets[t]);
  }
  for (int32_t token : long_sample->inputs) {
    EXPECT_GE(token, 0);
    EXPECT_LT(token, 64);
  }
}

// The fraction of next tokens the sample's rule predicts, over `samples`
// samples of `length`.
double RuleFollowed(const SyntheticCorpus& corpus, int samples,
                    int64_t length) {
  int64_t followed = 0;
  int64_t positions = 0;
  for (int i = 0; i < samples; ++i) {
    TokenSample s = *corpus.Tokens(i, length);
    const int pattern = corpus.PatternOf(i);
    for (int64_t t = 1; t < length; ++t) {
      followed +=
          s.targets[t] == corpus.Rule(pattern, s.inputs[t - 1], s.inputs[t]);
      ++positions;
    }
  }
  return static_cast<double>(followed) / positions;
}

TEST(SyntheticCorpusTest, TokensFollowTheirRuleUpToTheNoise) {
  EXPECT_EQ(RuleFollowed(SyntheticCorpus(SmallVocab(0.0)), 50, 64), 1.0);
  // A noisy token matches the rule by chance with probability 1 / vocab;
  // 400 * 63 positions give a standard deviation of about 0.0014.
  const double noise = 0.05;
  const double expected = (1 - noise) + noise / 64;
  EXPECT_NEAR(RuleFollowed(SyntheticCorpus(SmallVocab(noise)), 400, 64),
              expected, 0.01);
}

TEST(SyntheticCorpusTest, TheRuleOfASampleCanBeInferredFromItsContext) {
  // What an in-context learner has to do: pick the rule that explains the
  // first 16 tokens best. Distinct rules must rarely agree.
  const SyntheticCorpus corpus(SmallVocab(0.05));
  const int patterns = corpus.options().patterns;
  std::vector<int> seen(patterns, 0);
  int identified = 0;
  constexpr int kSamples = 400;
  for (int i = 0; i < kSamples; ++i) {
    TokenSample s = *corpus.Tokens(i, 16);
    int best = -1;
    int best_matches = -1;
    for (int k = 0; k < patterns; ++k) {
      int matches = 0;
      for (int t = 1; t < 16; ++t) {
        matches += s.targets[t] == corpus.Rule(k, s.inputs[t - 1], s.inputs[t]);
      }
      if (matches > best_matches) {
        best = k;
        best_matches = matches;
      }
    }
    identified += best == corpus.PatternOf(i);
    ++seen[corpus.PatternOf(i)];
  }
  EXPECT_GE(identified, kSamples * 99 / 100);
  for (int k = 0; k < patterns; ++k) {
    // Each rule is drawn by about a quarter of the samples.
    EXPECT_GT(seen[k], kSamples / patterns / 2) << "pattern " << k;
  }
}

TEST(SyntheticCorpusTest, RefusesSamplesItCannotMaterialise) {
  SyntheticCorpus::Options options = SmallVocab(0.05);
  options.max_length = 1000;
  const SyntheticCorpus corpus(options);
  auto expect_refused = [](const absl::Status& status, const std::string& id,
                           const std::string& length) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(
        std::string(status.message()),
        AllOf(HasSubstr("sample " + id), HasSubstr("length " + length)));
  };
  expect_refused(corpus.Tokens(-1, 5).status(), "-1", "5");
  expect_refused(corpus.Tokens(4, 0).status(), "4", "0");
  expect_refused(corpus.Tokens(4, 1001).status(), "4", "1001");
  expect_refused(corpus.Features(-2, 5).status(), "-2", "5");
  EXPECT_TRUE(corpus.Tokens(4, 1000).ok());

  options.vocab = 0;
  const SyntheticCorpus no_vocab(options);
  expect_refused(no_vocab.Tokens(4, 5).status(), "4", "5");
  // The feature variant needs no vocabulary.
  EXPECT_TRUE(no_vocab.Features(4, 5).ok());
  options.feature_dim = 0;
  expect_refused(SyntheticCorpus(options).Features(4, 5).status(), "4", "5");
}

// Least squares by the normal equations: the coefficients of `x` (rows of
// `cols` values) that best predict `y`, and the mean squared residual.
double ResidualOfLeastSquares(const std::vector<std::vector<double>>& x,
                              const std::vector<double>& y) {
  const size_t n = x.front().size();
  std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));
  for (size_t r = 0; r < x.size(); ++r) {
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) a[i][j] += x[r][i] * x[r][j];
      a[i][n] += x[r][i] * y[r];
    }
  }
  for (size_t c = 0; c < n; ++c) {  // Gauss-Jordan; the matrix is SPD.
    for (size_t r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (size_t k = c; k <= n; ++k) a[r][k] -= f * a[c][k];
    }
  }
  double sse = 0;
  for (size_t r = 0; r < x.size(); ++r) {
    double fit = 0;
    for (size_t i = 0; i < n; ++i) fit += x[r][i] * a[i][n] / a[i][i];
    sse += (y[r] - fit) * (y[r] - fit);
  }
  return sse / x.size();
}

TEST(SyntheticCorpusTest, FeatureTargetsNeedTheWholeSample) {
  SyntheticCorpus::Options options;
  options.feature_dim = 4;
  options.target_noise = 0.01;
  options.seed = 5;
  const SyntheticCorpus corpus(options);
  constexpr int kDim = 4;
  constexpr int kLength = 8;
  // Per token: its own features, and the sample's mean features.
  std::vector<std::vector<double>> local;
  std::vector<std::vector<double>> with_context;
  std::vector<double> y;  // Output feature 0.
  for (int i = 0; i < 300; ++i) {
    FeatureSample s = *corpus.Features(i, kLength);
    ASSERT_EQ(s.features.size(), size_t{kLength * kDim});
    ASSERT_EQ(s.targets.size(), size_t{kLength * kDim});
    std::vector<double> mean(kDim, 0.0);
    for (int t = 0; t < kLength; ++t) {
      for (int j = 0; j < kDim; ++j)
        mean[j] += s.features[t * kDim + j] / kLength;
    }
    for (int t = 0; t < kLength; ++t) {
      std::vector<double> row(s.features.begin() + t * kDim,
                              s.features.begin() + (t + 1) * kDim);
      local.push_back(row);
      row.insert(row.end(), mean.begin(), mean.end());
      with_context.push_back(row);
      y.push_back(s.targets[t * kDim]);
    }
  }
  const double noise_var = options.target_noise * options.target_noise;
  // Own features and the sample's mean explain the target up to its noise...
  EXPECT_LT(ResidualOfLeastSquares(with_context, y), 2 * noise_var);
  // ...own features alone do not: the mean term is what attention learns.
  EXPECT_GT(ResidualOfLeastSquares(local, y), 20 * noise_var);
}

TEST(SyntheticCorpusTest, FeatureSamplesAreDeterministic) {
  SyntheticCorpus::Options options;
  options.feature_dim = 3;
  const SyntheticCorpus a(options);
  const SyntheticCorpus b(options);
  EXPECT_EQ(a.Features(9, 20)->features, b.Features(9, 20)->features);
  EXPECT_EQ(a.Features(9, 20)->targets, b.Features(9, 20)->targets);
  EXPECT_NE(a.Features(10, 20)->features, a.Features(9, 20)->features);
}

// A text corpus: each sample is a window of the text (bytes as tokens),
// its targets the next bytes, wrapping at the end; shorter is a prefix.
TEST(SyntheticCorpusTest, TextSamplesAreWindowsOfTheText) {
  SyntheticCorpus::Options options;
  options.text = "The quick brown fox jumps over the lazy dog.";
  SyntheticCorpus corpus(options);
  const std::string& text = options.text;
  std::set<size_t> offsets;
  for (int64_t id = 0; id < 20; ++id) {
    absl::StatusOr<TokenSample> s = corpus.Tokens(id, 100);  // Wraps twice.
    ASSERT_TRUE(s.ok()) << s.status();
    // Where in the text the window starts.
    size_t start = std::string::npos;
    for (size_t o = 0; o < text.size(); ++o) {
      bool match = true;
      for (int t = 0; t < 100 && match; ++t) {
        match = s->inputs[t] ==
                static_cast<unsigned char>(text[(o + t) % text.size()]);
      }
      if (match) start = o;
    }
    ASSERT_NE(start, std::string::npos) << "sample " << id;
    offsets.insert(start);
    for (int t = 0; t + 1 < 100; ++t) EXPECT_EQ(s->targets[t], s->inputs[t + 1]);
    absl::StatusOr<TokenSample> shorter = corpus.Tokens(id, 7);
    ASSERT_TRUE(shorter.ok());
    EXPECT_TRUE(std::equal(shorter->inputs.begin(), shorter->inputs.end(),
                           s->inputs.begin()));
  }
  EXPECT_GT(offsets.size(), 5u);  // Seeded offsets, not one window.

  options.vocab = 128;
  EXPECT_THAT(std::string(SyntheticCorpus(options).Tokens(0, 8).status().message()),
              HasSubstr("bytes"));
}

}  // namespace
}  // namespace dcp

#include "train/corpus.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/base/internal/raw_logging.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dcp {
namespace {

// Domains of the hash, so that the draws of one purpose never repeat those
// of another.
enum Stream : uint64_t {
  kPermStream = 1,
  kPatternStream,
  kStartStream,
  kNoiseCoinStream,
  kNoiseTokenStream,
  kFeatureStream,
  kMatrixStream,
  kTargetNoiseStream,
  kTextOffsetStream,
};

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A counter-based draw: a pure function of its arguments.
uint64_t Draw(uint64_t seed, Stream stream, uint64_t a, uint64_t b = 0,
              uint64_t c = 0) {
  uint64_t h = SplitMix64(seed ^ (static_cast<uint64_t>(stream) << 56));
  h = SplitMix64(h ^ a);
  h = SplitMix64(h ^ b);
  return SplitMix64(h ^ c);
}

// In [0, 1), 53 bits.
double Uniform(uint64_t bits) {
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

// A standard normal from two draws (Box-Muller).
double Normal(uint64_t bits1, uint64_t bits2) {
  const double u1 = 1.0 - Uniform(bits1);  // In (0, 1]: log is finite.
  const double u2 = Uniform(bits2);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

int32_t Below(uint64_t bits, int32_t n) {
  return static_cast<int32_t>(bits % static_cast<uint64_t>(n));
}

std::vector<float> SeededMatrix(uint64_t seed, uint64_t which, int dim) {
  std::vector<float> m(static_cast<size_t>(dim) * dim);
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  for (int i = 0; i < dim * dim; ++i) {
    m[i] = static_cast<float>(scale *
                              Normal(Draw(seed, kMatrixStream, which, i, 0),
                                     Draw(seed, kMatrixStream, which, i, 1)));
  }
  return m;
}

}  // namespace

SyntheticCorpus::SyntheticCorpus(Options options)
    : options_([&] {
        options.patterns = std::max(options.patterns, 1);
        return options;
      }()) {
  const int32_t vocab = options_.vocab;
  const uint64_t seed = options_.seed;
  perms_.resize(options_.patterns);
  if (vocab >= 1) {
    for (int k = 0; k < options_.patterns; ++k) {
      std::vector<int32_t>& perm = perms_[k];
      perm.resize(vocab);
      for (int32_t i = 0; i < vocab; ++i) perm[i] = i;
      // Fisher-Yates with counter-based draws.
      for (int32_t i = vocab - 1; i > 0; --i) {
        std::swap(perm[i], perm[Below(Draw(seed, kPermStream, k, i), i + 1)]);
      }
    }
  }
  if (options_.feature_dim >= 1) {
    feature_a_ = SeededMatrix(seed, 0, options_.feature_dim);
    feature_b_ = SeededMatrix(seed, 1, options_.feature_dim);
  }
}

absl::Status SyntheticCorpus::CheckSample(int64_t sample,
                                          int64_t length) const {
  if (sample < 0 || length <= 0 || length > options_.max_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot materialise sample ", sample, " of length ", length,
        ": ids must be >= 0 and lengths in [1, ", options_.max_length, "]"));
  }
  return absl::OkStatus();
}

int SyntheticCorpus::PatternOf(int64_t sample) const {
  return static_cast<int>(
      Draw(options_.seed, kPatternStream, static_cast<uint64_t>(sample)) %
      static_cast<uint64_t>(options_.patterns));
}

int32_t SyntheticCorpus::Rule(int pattern, int32_t previous,
                              int32_t current) const {
  ABSL_RAW_CHECK(pattern >= 0 && pattern < options_.patterns,
                 "no such pattern");
  ABSL_RAW_CHECK(options_.vocab >= 1, "the corpus has no vocabulary");
  return perms_[pattern][pattern % 2 == 0 ? current : previous];
}

absl::StatusOr<TokenSample> SyntheticCorpus::Tokens(int64_t sample,
                                                    int64_t length) const {
  if (absl::Status s = CheckSample(sample, length); !s.ok()) return s;
  if (options_.vocab < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot materialise sample ", sample, " of length ", length,
        ": the corpus has a vocabulary of ", options_.vocab, " tokens"));
  }
  if (!options_.text.empty()) return TextTokens(sample, length);
  const uint64_t seed = options_.seed;
  const uint64_t id = static_cast<uint64_t>(sample);
  const int32_t vocab = options_.vocab;
  const int pattern = PatternOf(sample);
  // length + 1 tokens: the last one is only a target.
  std::vector<int32_t> tokens(static_cast<size_t>(length) + 1);
  for (int64_t t = 0; t <= length; ++t) {
    int32_t token;
    if (t < 2) {
      token = Below(Draw(seed, kStartStream, id, t), vocab);
    } else {
      token = Rule(pattern, tokens[t - 2], tokens[t - 1]);
    }
    if (t >= 2 &&
        Uniform(Draw(seed, kNoiseCoinStream, id, t)) < options_.noise) {
      token = Below(Draw(seed, kNoiseTokenStream, id, t), vocab);
    }
    tokens[t] = token;
  }
  TokenSample out;
  out.inputs.assign(tokens.begin(), tokens.end() - 1);
  out.targets.assign(tokens.begin() + 1, tokens.end());
  return out;
}

absl::StatusOr<TokenSample> SyntheticCorpus::TextTokens(int64_t sample,
                                                        int64_t length) const {
  if (options_.vocab < 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot materialise sample ", sample, " of length ", length,
        ": a text corpus's tokens are bytes, and the vocabulary has only ",
        options_.vocab));
  }
  const std::string& text = options_.text;
  const uint64_t size = text.size();
  const uint64_t offset =
      Draw(options_.seed, kTextOffsetStream, static_cast<uint64_t>(sample), 0) %
      size;
  TokenSample out;
  out.inputs.resize(static_cast<size_t>(length));
  out.targets.resize(static_cast<size_t>(length));
  for (int64_t t = 0; t < length; ++t) {
    const uint64_t at = (offset + static_cast<uint64_t>(t)) % size;
    out.inputs[t] = static_cast<unsigned char>(text[at]);
    out.targets[t] = static_cast<unsigned char>(text[(at + 1) % size]);
  }
  return out;
}

absl::StatusOr<FeatureSample> SyntheticCorpus::Features(int64_t sample,
                                                        int64_t length) const {
  if (absl::Status s = CheckSample(sample, length); !s.ok()) return s;
  const int dim = options_.feature_dim;
  if (dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot materialise feature sample ", sample,
                     " of length ", length, ": feature_dim is ", dim));
  }
  const uint64_t seed = options_.seed;
  const uint64_t id = static_cast<uint64_t>(sample);
  FeatureSample out;
  out.length = length;
  out.dim = dim;
  const size_t n = static_cast<size_t>(length) * dim;
  out.features.resize(n);
  out.targets.resize(n);
  std::vector<double> mean(dim, 0.0);
  for (int64_t t = 0; t < length; ++t) {
    for (int j = 0; j < dim; ++j) {
      const uint64_t cell = static_cast<uint64_t>(t) * dim + j;
      const double x = Normal(Draw(seed, kFeatureStream, id, cell, 0),
                              Draw(seed, kFeatureStream, id, cell, 1));
      out.features[cell] = static_cast<float>(x);
      mean[j] += x / static_cast<double>(length);
    }
  }
  std::vector<double> context(dim, 0.0);  // B m: the same for every token.
  for (int i = 0; i < dim; ++i) {
    for (int j = 0; j < dim; ++j)
      context[i] += feature_b_[i * dim + j] * mean[j];
  }
  for (int64_t t = 0; t < length; ++t) {
    const float* x = &out.features[static_cast<size_t>(t) * dim];
    for (int i = 0; i < dim; ++i) {
      double y = context[i];
      for (int j = 0; j < dim; ++j) y += feature_a_[i * dim + j] * x[j];
      const uint64_t cell = static_cast<uint64_t>(t) * dim + i;
      y += options_.target_noise *
           Normal(Draw(seed, kTargetNoiseStream, id, cell, 0),
                  Draw(seed, kTargetNoiseStream, id, cell, 1));
      out.targets[cell] = static_cast<float>(y);
    }
  }
  return out;
}

}  // namespace dcp

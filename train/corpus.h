#ifndef DCP_TRAIN_CORPUS_H_
#define DCP_TRAIN_CORPUS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dcp {

/// One sample for a causal decoder: `inputs[t]` is token t of the sample and
/// `targets[t]` the token after it, so every one of the sample's `length`
/// positions carries a next-token loss.
struct TokenSample {
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
};

/// One sample for the non-causal (DiT-style) variant: `length` tokens of
/// `dim` features each, row-major (features[t * dim + j]), and a target of
/// the same shape to regress.
struct FeatureSample {
  int64_t length = 0;
  int dim = 0;
  std::vector<float> features;
  std::vector<float> targets;
};

/// A deterministic synthetic corpus: sample `id` of length L is a pure
/// function of (options, id, L), so any rank materialises the samples of
/// its tasks alone, with no data files and no coordination.
///
/// Token samples follow one of `patterns` rules, drawn per sample, each with
/// its own seeded permutation perm_k of the vocabulary: even patterns are
/// order-1 (next = perm_k[current]), odd ones look two tokens back (next =
/// perm_k[previous]), which a model can only learn by attending to the
/// previous position. Table lookups rather than arithmetic, so that a small
/// model learns them in tens of steps. The two start tokens are random, and
/// each later token is replaced by a uniform one with probability `noise`. A
/// model that learns the rules and infers from the context which one a sample
/// follows predicts a fraction ~(1 - noise) of the tokens, so its loss falls
/// from ln(vocab) towards the noise's entropy. Token t depends only on (id, t):
/// a shorter length yields a prefix of a longer one.
///
/// With `Options::text`, token samples are windows of that text instead (a
/// byte-level language model's data), with the same guarantees.
///
/// Feature samples draw features ~ N(0, 1) per (id, t, j); the target of
/// token t is A x_t + B m + noise, where A and B are seeded dim x dim
/// matrices (scaled by 1/sqrt(dim)) and m the mean of the sample's
/// features: learning it needs bidirectional attention within the sample.
///
/// Immutable after construction; thread-safe.
///
///   SyntheticCorpus::Options options;
///   options.vocab = 256;
///   SyntheticCorpus corpus(options);
///   ASSIGN_OR_RETURN(TokenSample s, corpus.Tokens(/*sample=*/42, 512));
class SyntheticCorpus {
 public:
  struct Options {
    /// Token ids are in [0, vocab). Token samples need vocab >= 1.
    int32_t vocab = 256;
    /// Longest sample materialised; longer requests are refused.
    int64_t max_length = int64_t{1} << 20;
    /// Rules samples draw from; at least 1 (fewer are taken as 1).
    int patterns = 4;
    /// Probability that a token is uniform noise rather than the rule's.
    double noise = 0.05;
    /// Features per token of feature samples. Feature samples need dim >= 1.
    int feature_dim = 16;
    /// Standard deviation of the noise on feature targets.
    double target_noise = 0.01;
    uint64_t seed = 0;
    /// A real text instead of the rules: when not empty, token sample `id`
    /// of length L is L + 1 consecutive bytes of it (the bytes are the
    /// tokens, so it needs vocab >= 256), starting at a seeded offset drawn
    /// per sample and wrapping around at the end. E.g. the GPL's text,
    /// which every Debian system has (/usr/share/common-licenses/GPL-3).
    std::string text;
  };

  explicit SyntheticCorpus(Options options);

  /// Sample `sample` truncated to `length` tokens. INVALID_ARGUMENT naming
  /// the sample and the length for a negative id, a length <= 0 or over
  /// `max_length`, a vocabulary < 1, or one under 256 with a text.
  absl::StatusOr<TokenSample> Tokens(int64_t sample, int64_t length) const;

  /// The feature sample `sample` of `length` tokens. INVALID_ARGUMENT
  /// naming the sample and the length as for `Tokens`, or for
  /// feature_dim < 1.
  absl::StatusOr<FeatureSample> Features(int64_t sample, int64_t length) const;

  /// The rule token sample `sample` follows, in [0, patterns): for tests and
  /// diagnostics (what an ideal model would have to infer).
  int PatternOf(int64_t sample) const;

  /// The token the rule of `pattern` puts after (previous, current): an
  /// order-1 rule ignores `previous`, a lag-2 rule `current`.
  int32_t Rule(int pattern, int32_t previous, int32_t current) const;

  const Options& options() const { return options_; }

 private:
  absl::Status CheckSample(int64_t sample, int64_t length) const;
  // `Tokens` of a text corpus.
  absl::StatusOr<TokenSample> TextTokens(int64_t sample, int64_t length) const;

  const Options options_;
  // perms_[k]: the permutation of pattern k; empty without a vocabulary.
  std::vector<std::vector<int32_t>> perms_;
  // Row-major dim x dim matrices of the feature targets.
  std::vector<float> feature_a_;
  std::vector<float> feature_b_;
};

}  // namespace dcp

#endif  // DCP_TRAIN_CORPUS_H_

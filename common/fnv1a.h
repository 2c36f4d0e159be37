#ifndef DCP_COMMON_FNV1A_H_
#define DCP_COMMON_FNV1A_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace dcp {

/// 64-bit FNV-1a (Fowler, Noll, Vo) of a stream of bytes: for digests that
/// are stored or compared between processes and hosts, which absl::Hash
/// (seeded per process) cannot give. Not a checksum against corruption (see
/// record_log.h's CRC-32C) and not cryptographic.
///
/// A value type; feed it bytes in order:
///
///   Fnv1a64 hash;
///   for (absl::string_view part : parts) hash.Update(part);
///   const uint64_t digest = hash.digest();
class Fnv1a64 {
 public:
  /// The published offset basis: the digest of no bytes.
  static constexpr uint64_t kOffsetBasis = 0xcbf29ce484222325ull;
  /// The published 64-bit FNV prime, 2^40 + 2^8 + 0xb3.
  static constexpr uint64_t kPrime = 0x100000001b3ull;

  /// Hashes `bytes` after those fed before.
  void Update(absl::string_view bytes) {
    for (const char c : bytes) {
      hash_ = (hash_ ^ static_cast<unsigned char>(c)) * kPrime;
    }
  }

  uint64_t digest() const { return hash_; }

 private:
  uint64_t hash_ = kOffsetBasis;
};

/// The FNV-1a-64 digest of `bytes`.
inline uint64_t Fnv1a64Of(absl::string_view bytes) {
  Fnv1a64 hash;
  hash.Update(bytes);
  return hash.digest();
}

}  // namespace dcp

#endif  // DCP_COMMON_FNV1A_H_

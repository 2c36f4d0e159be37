// Fuzzes the jsonl length reader (LengthFormat::kJsonl); see
// FuzzLengthSource for what it checks.

#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_support.h"
#include "fuzz/length_source_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dcp::fuzz::FuzzLengthSource(dcp::LengthFormat::kJsonl,
                              dcp::fuzz::AsText(data, size));
  return 0;
}

// Fuzzes the idx length reader (LengthFormat::kMegatronIdx); see
// FuzzLengthSource for what it checks.

#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_support.h"
#include "fuzz/length_source_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dcp::fuzz::FuzzLengthSource(dcp::LengthFormat::kMegatronIdx,
                              dcp::fuzz::AsText(data, size));
  return 0;
}

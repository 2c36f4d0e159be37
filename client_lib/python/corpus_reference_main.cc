// corpus_test's reference: train/corpus.h's SyntheticCorpus::Tokens for the
// cases on stdin, one a line,
//   vocab seed patterns noise max_length sample length [text_file]
// answered on stdout, one line each: "OK <inputs> | <targets>" (token ids
// separated by spaces) or "ERROR <status>".
#include <cstdint>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "train/corpus.h"

namespace {

std::string Join(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ' ';
    out += std::to_string(ids[i]);
  }
  return out;
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    dcp::SyntheticCorpus::Options options;
    int64_t sample = 0;
    int64_t length = 0;
    std::string text_file;
    if (!(in >> options.vocab >> options.seed >> options.patterns >>
          options.noise >> options.max_length >> sample >> length)) {
      std::cout << "ERROR malformed case: " << line << "\n";
      continue;
    }
    if (in >> text_file) {
      std::ifstream text(text_file, std::ios::binary);
      std::ostringstream bytes;
      bytes << text.rdbuf();
      options.text = bytes.str();
    }
    const dcp::SyntheticCorpus corpus(options);
    absl::StatusOr<dcp::TokenSample> tokens = corpus.Tokens(sample, length);
    if (!tokens.ok()) {
      std::cout << "ERROR " << tokens.status().ToString() << "\n";
    } else {
      std::cout << "OK " << Join(tokens->inputs) << " | "
                << Join(tokens->targets) << "\n";
    }
  }
  return 0;
}

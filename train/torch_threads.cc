#include "train/torch_threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

namespace dcp::train {

void SetTorchThreads(int threads) {
  at::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (auto* set_blas_threads = reinterpret_cast<SetThreads>(
          dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set_blas_threads(threads);
  }
}

}  // namespace dcp::train

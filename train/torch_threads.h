#ifndef DCP_TRAIN_TORCH_THREADS_H_
#define DCP_TRAIN_TORCH_THREADS_H_

namespace dcp::train {

/// Sets how many threads this process's torch computes with: torch's
/// intra-op threads (at::set_num_threads) and the pool of the BLAS under
/// it. Debian's libtorch calls whichever BLAS the system's libblas.so.3
/// alternative names: tools/setup.sh installs serial BLIS, which has no
/// pool, but a threaded OpenBLAS runs one of its own, a thread per core,
/// that torch does not size, so its `openblas_set_num_threads` is looked up
/// at run time and called when it is there. Process-wide; `threads` >= 1.
void SetTorchThreads(int threads);

}  // namespace dcp::train

#endif  // DCP_TRAIN_TORCH_THREADS_H_

// Bandwidth of the Ulysses layout kernels (kernels/ulysses_layout_cuda.h) on
// one GPU, for model-sized packs:
//
//   bazel run -c opt --config=cuda //kernels:ulysses_layout_benchmark --
//     [--iterations=50] [--warmup=5] [--device=0]
//
// Per shape (rank 0 of a group of p; the rank holding the most padding where
// the pack is shorter than S) and kernel it prints the bytes the kernel
// reads plus the bytes it writes (a kv head replicated f times is read f
// times), the median time of --iterations runs after --warmup, timed with
// CUDA events on one stream, the bandwidth that makes, and that as a fraction
// of a cudaMemcpyDeviceToDevice of the bytes the kernel writes (which reads
// and writes them: the same accounting) timed the same way. Without a CUDA
// device it prints a line saying so and exits 0.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "common/status_macros.h"
#include "kernels/ulysses_layout.h"
#include "kernels/ulysses_layout_cuda.h"

ABSL_FLAG(int, iterations, 50, "Timed runs per kernel; the median is shown.");
ABSL_FLAG(int, warmup, 5, "Untimed runs before them.");
ABSL_FLAG(int, device, 0, "CUDA device.");

namespace dcp::kernels {
namespace {

struct BenchmarkOptions {
  int iterations = 50;
  int warmup = 5;
  int device = 0;
};

// A pack of `total_tokens` over a group, in shards of `shard_tokens` (0:
// as few as hold it); measured on rank 0, or the last rank.
struct Shape {
  const char* name;
  int p, heads, kv_heads, kv_replication, head_dim;
  int64_t total_tokens;
  DType dtype;
  int64_t shard_tokens = 0;
  bool last_rank = false;
};

const Shape kShapes[] = {
    {"70B-like: 64 heads, 8 kv, p=8 (8 heads a rank)", 8, 64, 8, 1, 128, 32768,
     DType::kBFloat16},
    {"the same in float32", 8, 64, 8, 1, 128, 32768, DType::kFloat32},
    {"8B-like: 32 heads, 8 kv, p=4", 4, 32, 8, 1, 128, 32768, DType::kBFloat16},
    {"32 heads, 4 kv sent twice, p=8", 8, 32, 4, 2, 128, 32768,
     DType::kBFloat16},
    {"70B-like, T=30000 in shards of 4096, last rank", 8, 64, 8, 1, 128, 30000,
     DType::kBFloat16, 4096, true},
    {"head_dim 64, 16 heads, p=8, 128k tokens", 8, 16, 16, 1, 64, 131072,
     DType::kBFloat16},
};

UlyssesLayout LayoutOf(const Shape& s) {
  UlyssesLayout l;
  l.group_size = s.p;
  l.shard_tokens =
      s.shard_tokens ? s.shard_tokens : (s.total_tokens + s.p - 1) / s.p;
  l.total_tokens = s.total_tokens;
  l.rank = s.last_rank ? s.p - 1 : 0;
  l.heads = s.heads;
  l.kv_heads = s.kv_heads;
  l.kv_replication = s.kv_replication;
  l.head_dim = s.head_dim;
  l.dtype = s.dtype;
  return l;
}

// A device allocation, freed at scope exit.
class DeviceBuffer {
 public:
  static absl::StatusOr<DeviceBuffer> Allocate(int64_t bytes) {
    DeviceBuffer buffer;
    CUDA_RETURN_IF_ERROR(
        cudaMalloc(&buffer.data_, std::max<int64_t>(bytes, 1)));
    // Content does not matter to a copy; any defined bytes do.
    CUDA_RETURN_IF_ERROR(
        cudaMemset(buffer.data_, 0x3c, std::max<int64_t>(bytes, 1)));
    return buffer;
  }
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) : data_(other.data_) {
    other.data_ = nullptr;
  }
  DeviceBuffer& operator=(DeviceBuffer&& other) {
    std::swap(data_, other.data_);
    return *this;
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  char* get() const { return static_cast<char*>(data_); }

 private:
  void* data_ = nullptr;
};

// One kernel of one shape: what it moves, and a call that enqueues it.
struct Kernel {
  std::string name;
  int64_t read_bytes = 0, written_bytes = 0;
  std::function<absl::Status(cudaStream_t)> run;
};

// The median of `iterations` timed runs of `run`, after `warmup` more, in
// seconds.
absl::StatusOr<double> MedianSeconds(
    const BenchmarkOptions& options, cudaStream_t stream,
    const std::function<absl::Status(cudaStream_t)>& run) {
  cudaEvent_t start, stop;
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
  std::vector<double> seconds;
  absl::Status status;
  for (int i = 0; i < options.warmup + options.iterations && status.ok(); ++i) {
    float ms = 0;
    status = [&]() -> absl::Status {
      CUDA_RETURN_IF_ERROR(cudaEventRecord(start, stream));
      RETURN_IF_ERROR(run(stream));
      CUDA_RETURN_IF_ERROR(cudaEventRecord(stop, stream));
      CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
      CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start, stop));
      return absl::OkStatus();
    }();
    if (i >= options.warmup) seconds.push_back(ms * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  RETURN_IF_ERROR(status);
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  return n % 2 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
}

// Buffers for every kernel of a shape, and the kernels over them.
struct ShapeRun {
  DeviceBuffer q, k, v, qkv_send, qkv_recv, q_h, k_h, v_h, attn, out_send,
      out_recv, out;
  std::vector<Kernel> kernels;
};

absl::StatusOr<ShapeRun> Prepare(const UlyssesLayout& l) {
  const int64_t b = ElementBytes(l.dtype), d = l.head_dim;
  const int64_t h = l.local_heads(), e = l.local_kv_heads();
  const int64_t real = l.real_rows(), t = l.total_tokens;
  ShapeRun run;
  ASSIGN_OR_RETURN(run.q, DeviceBuffer::Allocate(real * l.heads * d * b));
  ASSIGN_OR_RETURN(run.k, DeviceBuffer::Allocate(real * l.kv_heads * d * b));
  ASSIGN_OR_RETURN(run.v, DeviceBuffer::Allocate(real * l.kv_heads * d * b));
  ASSIGN_OR_RETURN(run.qkv_send,
                   DeviceBuffer::Allocate(l.qkv_exchange_elements() * b));
  ASSIGN_OR_RETURN(run.qkv_recv,
                   DeviceBuffer::Allocate(l.qkv_exchange_elements() * b));
  ASSIGN_OR_RETURN(run.q_h, DeviceBuffer::Allocate(t * h * d * b));
  ASSIGN_OR_RETURN(run.k_h, DeviceBuffer::Allocate(t * e * d * b));
  ASSIGN_OR_RETURN(run.v_h, DeviceBuffer::Allocate(t * e * d * b));
  ASSIGN_OR_RETURN(run.attn, DeviceBuffer::Allocate(t * h * d * b));
  ASSIGN_OR_RETURN(run.out_send,
                   DeviceBuffer::Allocate(l.out_exchange_elements() * b));
  ASSIGN_OR_RETURN(run.out_recv,
                   DeviceBuffer::Allocate(l.out_exchange_elements() * b));
  ASSIGN_OR_RETURN(run.out, DeviceBuffer::Allocate(real * l.heads * d * b));

  const QkvShard shard{run.q.get(), run.k.get(), run.v.get()};
  const HeadShardedQkv heads{run.q_h.get(), run.k_h.get(), run.v_h.get()};
  const char* recv = run.qkv_recv.get();
  const char* attn = run.attn.get();
  const char* out_recv = run.out_recv.get();
  char* send = run.qkv_send.get();
  char* out_send = run.out_send.get();
  char* out = run.out.get();
  run.kernels = {
      {"PackQkv", l.group_size * real * (h + 2 * e) * d * b,
       l.qkv_exchange_elements() * b,
       [=](cudaStream_t s) { return cuda::PackQkv(l, shard, send, s); }},
      {"UnpackQkv (T rows)", t * (h + 2 * e) * d * b, t * (h + 2 * e) * d * b,
       [=](cudaStream_t s) {
         return cuda::UnpackQkv(l, recv, Rows::kReal, heads, s);
       }},
      {"PackOutput (T rows)", t * h * d * b, l.out_exchange_elements() * b,
       [=](cudaStream_t s) {
         return cuda::PackOutput(l, attn, Rows::kReal, out_send, s);
       }},
      {"UnpackOutput (real rows)", real * l.heads * d * b,
       real * l.heads * d * b,
       [=](cudaStream_t s) {
         return cuda::UnpackOutput(l, out_recv, Rows::kReal, out, s);
       }},
  };
  return run;
}

absl::Status RunShape(const BenchmarkOptions& options, const Shape& shape,
                      cudaStream_t stream) {
  const UlyssesLayout l = LayoutOf(shape);
  RETURN_IF_ERROR(l.Validate());
  std::printf(
      "\n%s: %s, T=%lld over p=%d (shard %lld, rank %d: %lld real rows), "
      "heads %d, kv %d x%d, head_dim %d\n",
      shape.name, DTypeName(l.dtype), static_cast<long long>(l.total_tokens),
      l.group_size, static_cast<long long>(l.shard_tokens), l.rank,
      static_cast<long long>(l.real_rows()), l.heads, l.kv_heads,
      l.kv_replication, l.head_dim);
  std::printf("  %-26s %10s %10s %9s %12s %9s\n", "kernel", "MiB r+w",
              "median us", "GB/s", "memcpy GB/s", "fraction");
  ASSIGN_OR_RETURN(ShapeRun run, Prepare(l));
  ASSIGN_OR_RETURN(DeviceBuffer copy_src,
                   DeviceBuffer::Allocate(l.qkv_exchange_elements() *
                                          ElementBytes(l.dtype)));
  ASSIGN_OR_RETURN(DeviceBuffer copy_dst,
                   DeviceBuffer::Allocate(l.qkv_exchange_elements() *
                                          ElementBytes(l.dtype)));
  for (const Kernel& kernel : run.kernels) {
    ASSIGN_OR_RETURN(double seconds,
                     MedianSeconds(options, stream, kernel.run));
    const int64_t bytes = kernel.written_bytes;
    ASSIGN_OR_RETURN(
        double copy_seconds,
        MedianSeconds(options, stream, [&](cudaStream_t s) -> absl::Status {
          CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(copy_dst.get(), copy_src.get(),
                                               bytes, cudaMemcpyDeviceToDevice,
                                               s));
          return absl::OkStatus();
        }));
    const double moved = kernel.read_bytes + kernel.written_bytes;
    const double bandwidth = moved / seconds;
    const double copy_bandwidth = 2.0 * bytes / copy_seconds;
    std::printf("  %-26s %10.1f %10.1f %9.1f %12.1f %9.3f\n",
                kernel.name.c_str(), moved / (1 << 20), seconds * 1e6,
                bandwidth * 1e-9, copy_bandwidth * 1e-9,
                bandwidth / copy_bandwidth);
  }
  return absl::OkStatus();
}

absl::Status Run(const BenchmarkOptions& options) {
  cudaDeviceProp prop;
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, options.device));
  std::printf(
      "Ulysses layout kernels on device %d, %s (sm_%d%d, %.0f GiB): median "
      "of %d runs after %d warm-up; GB/s = (bytes read + written) / time; "
      "fraction = that / the same of a device-to-device cudaMemcpy of the "
      "bytes written\n",
      options.device, prop.name, prop.major, prop.minor,
      prop.totalGlobalMem / double(1 << 30), options.iterations,
      options.warmup);
  cudaStream_t stream;
  CUDA_RETURN_IF_ERROR(cudaStreamCreate(&stream));
  absl::Status status;
  for (const Shape& shape : kShapes) {
    status = RunShape(options, shape, stream);
    if (!status.ok()) break;
  }
  cudaStreamDestroy(stream);
  return status;
}

}  // namespace
}  // namespace dcp::kernels

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Bandwidth of the Ulysses layout kernels against a device-to-device "
      "copy. Flags: --iterations, --warmup, --device.");
  absl::ParseCommandLine(argc, argv);
  dcp::kernels::BenchmarkOptions options;
  options.iterations = absl::GetFlag(FLAGS_iterations);
  options.warmup = absl::GetFlag(FLAGS_warmup);
  options.device = absl::GetFlag(FLAGS_device);
  if (options.iterations < 1 || options.warmup < 0) {
    std::fprintf(stderr, "need --iterations >= 1 and --warmup >= 0\n");
    return 2;
  }
  int devices = 0;
  const cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess || devices == 0) {
    std::printf(
        "ulysses_layout_benchmark: no CUDA device (%s); nothing to "
        "measure\n",
        error != cudaSuccess ? cudaGetErrorString(error) : "0 devices");
    return 0;
  }
  const absl::Status status = dcp::kernels::Run(options);
  if (!status.ok()) {
    std::fprintf(stderr, "ulysses_layout_benchmark: %s\n",
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}

// Every CUDA layout kernel against the CPU reference, bit for bit. Runs on a
// machine with a GPU and a --config=cuda build; skips otherwise.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/ulysses_layout.h"
#include "kernels/ulysses_layout_cpu.h"
#include "kernels/ulysses_layout_cuda.h"
#include "kernels/ulysses_layout_testing.h"

namespace dcp::kernels {
namespace {

using testing_layout::CaseName;
using testing_layout::Shape;

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

// The shared uneven shapes and the CPU test's empty pack, then model-sized
// ones: head vectors of 16-byte words, and odd ones that move in 2- or
// 4-byte words.
std::vector<Shape> TestedShapes() {
  return testing_layout::UnevenShapes({
      {4, 16, 4, 1, 2, 6, 0},         // an empty pack
      {8, 64, 8, 1, 128, 256, 2000},  // 8 heads a rank, GQA 8:1
      {8, 32, 4, 2, 128, 300, 2345},  // kv heads replicated twice
      {4, 32, 8, 1, 64, 257, 1025},
      {2, 8, 8, 1, 127, 99, 190},  // odd head_dim
      {8, 8, 2, 4, 96, 33, 200},
  });
}

// The same random bytes on the host and on the device, with a guard after
// them that no function may write, at `offset` bytes past an allocation
// (cudaMalloc's 256-byte alignment, or an element past it, which forces
// narrow words).
class MirroredBytes {
 public:
  static constexpr size_t kGuard = 64;

  MirroredBytes(size_t size, size_t offset, std::mt19937_64& rng)
      : offset_(offset), host_(size + kGuard) {
    for (size_t i = 0; i < host_.size(); i += 8) {
      const uint64_t word = rng();
      std::memcpy(&host_[i], &word, std::min<size_t>(8, host_.size() - i));
    }
    EXPECT_EQ(cudaMalloc(&allocation_, host_.size() + offset_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(device(), host_.data(), host_.size(),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~MirroredBytes() { cudaFree(allocation_); }
  MirroredBytes(const MirroredBytes&) = delete;
  MirroredBytes& operator=(const MirroredBytes&) = delete;

  uint8_t* host() { return host_.data(); }
  uint8_t* device() { return static_cast<uint8_t*>(allocation_) + offset_; }

  // Whether the device bytes, guard included, equal the host's.
  ::testing::AssertionResult Same() {
    std::vector<uint8_t> copy(host_.size());
    if (cudaMemcpy(copy.data(), device(), copy.size(),
                   cudaMemcpyDeviceToHost) != cudaSuccess) {
      return ::testing::AssertionFailure() << "copy to host failed";
    }
    if (std::memcmp(copy.data(), host_.data(), copy.size()) == 0) {
      return ::testing::AssertionSuccess();
    }
    for (size_t i = 0; i < copy.size(); ++i) {
      if (copy[i] != host_[i]) {
        return ::testing::AssertionFailure()
               << "first difference at byte " << i << " of " << copy.size()
               << (i >= copy.size() - kGuard ? " (the guard)" : "")
               << ": device " << int{copy[i]} << ", CPU " << int{host_[i]};
      }
    }
    return ::testing::AssertionSuccess();
  }

 private:
  size_t offset_;
  std::vector<uint8_t> host_;
  void* allocation_ = nullptr;
};

class UlyssesLayoutCudaTest
    : public ::testing::TestWithParam<std::tuple<Shape, DType>> {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  const Shape& shape() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }
  int64_t element() const { return ElementBytes(dtype()); }
  UlyssesLayout Layout(int rank) const {
    return testing_layout::LayoutOf(shape(), rank, dtype());
  }
  // Buffer offsets to run with: aligned, and one element off.
  std::vector<size_t> Offsets() const {
    return {0, static_cast<size_t>(element())};
  }
  size_t Bytes(int64_t elements) const { return elements * element(); }
  ::testing::AssertionResult Synchronized() {
    const cudaError_t error = cudaStreamSynchronize(stream_);
    if (error == cudaSuccess) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << cudaGetErrorString(error);
  }

  cudaStream_t stream_ = nullptr;
  std::mt19937_64 rng_{20240611};
};

TEST_P(UlyssesLayoutCudaTest, PackQkvMatchesCpu) {
  for (int r = 0; r < shape().p; ++r) {
    for (size_t offset : Offsets()) {
      SCOPED_TRACE(absl::StrCat("rank ", r, ", offset ", offset));
      const UlyssesLayout l = Layout(r);
      const int64_t rows = l.real_rows(), d = l.head_dim;
      MirroredBytes q(Bytes(rows * l.heads * d), offset, rng_);
      MirroredBytes k(Bytes(rows * l.kv_heads * d), offset, rng_);
      MirroredBytes v(Bytes(rows * l.kv_heads * d), offset, rng_);
      MirroredBytes send(Bytes(l.qkv_exchange_elements()), offset, rng_);
      ASSERT_TRUE(
          cpu::PackQkv(l, {q.host(), k.host(), v.host()}, send.host()).ok());
      const absl::Status status = cuda::PackQkv(
          l, {q.device(), k.device(), v.device()}, send.device(), stream_);
      ASSERT_TRUE(status.ok()) << status;
      ASSERT_TRUE(Synchronized());
      EXPECT_TRUE(send.Same());
    }
  }
}

// q, k and v as views of one fused projection, rows strided.
TEST_P(UlyssesLayoutCudaTest, PackQkvOfFusedProjectionMatchesCpu) {
  for (int r = 0; r < shape().p; ++r) {
    for (size_t offset : Offsets()) {
      SCOPED_TRACE(absl::StrCat("rank ", r, ", offset ", offset));
      const UlyssesLayout l = Layout(r);
      const int64_t row = (l.heads + 2 * l.kv_heads) * l.head_dim;
      MirroredBytes fused(Bytes(l.real_rows() * row), offset, rng_);
      MirroredBytes send(Bytes(l.qkv_exchange_elements()), offset, rng_);
      const auto views = [&](uint8_t* base) {
        QkvShard shard;
        shard.q = base;
        shard.k = base + Bytes(l.heads * l.head_dim);
        shard.v = base + Bytes((l.heads + l.kv_heads) * l.head_dim);
        shard.q_row_stride = shard.k_row_stride = shard.v_row_stride = row;
        return shard;
      };
      ASSERT_TRUE(cpu::PackQkv(l, views(fused.host()), send.host()).ok());
      const absl::Status status =
          cuda::PackQkv(l, views(fused.device()), send.device(), stream_);
      ASSERT_TRUE(status.ok()) << status;
      ASSERT_TRUE(Synchronized());
      EXPECT_TRUE(send.Same());
    }
  }
}

TEST_P(UlyssesLayoutCudaTest, UnpackQkvMatchesCpu) {
  const UlyssesLayout l = Layout(0);
  for (Rows rows : {Rows::kReal, Rows::kPadded}) {
    for (size_t offset : Offsets()) {
      SCOPED_TRACE(absl::StrCat(rows == Rows::kReal ? "real" : "padded",
                                " rows, offset ", offset));
      const int64_t n = l.head_sharded_rows(rows) * l.head_dim;
      MirroredBytes recv(Bytes(l.qkv_exchange_elements()), offset, rng_);
      MirroredBytes q(Bytes(n * l.local_heads()), offset, rng_);
      MirroredBytes k(Bytes(n * l.local_kv_heads()), offset, rng_);
      MirroredBytes v(Bytes(n * l.local_kv_heads()), offset, rng_);
      ASSERT_TRUE(
          cpu::UnpackQkv(l, recv.host(), rows, {q.host(), k.host(), v.host()})
              .ok());
      const absl::Status status =
          cuda::UnpackQkv(l, recv.device(), rows,
                          {q.device(), k.device(), v.device()}, stream_);
      ASSERT_TRUE(status.ok()) << status;
      ASSERT_TRUE(Synchronized());
      EXPECT_TRUE(q.Same());
      EXPECT_TRUE(k.Same());
      EXPECT_TRUE(v.Same());
      EXPECT_TRUE(recv.Same());  // read only
    }
  }
}

TEST_P(UlyssesLayoutCudaTest, PackOutputMatchesCpu) {
  const UlyssesLayout l = Layout(0);
  for (Rows rows : {Rows::kReal, Rows::kPadded}) {
    for (size_t offset : Offsets()) {
      SCOPED_TRACE(absl::StrCat(rows == Rows::kReal ? "real" : "padded",
                                " rows, offset ", offset));
      MirroredBytes attn(
          Bytes(l.head_sharded_rows(rows) * l.local_heads() * l.head_dim),
          offset, rng_);
      MirroredBytes send(Bytes(l.out_exchange_elements()), offset, rng_);
      ASSERT_TRUE(cpu::PackOutput(l, attn.host(), rows, send.host()).ok());
      const absl::Status status =
          cuda::PackOutput(l, attn.device(), rows, send.device(), stream_);
      ASSERT_TRUE(status.ok()) << status;
      ASSERT_TRUE(Synchronized());
      EXPECT_TRUE(send.Same());
    }
  }
}

TEST_P(UlyssesLayoutCudaTest, UnpackOutputMatchesCpu) {
  for (int r = 0; r < shape().p; ++r) {
    const UlyssesLayout l = Layout(r);
    for (Rows rows : {Rows::kReal, Rows::kPadded}) {
      for (size_t offset : Offsets()) {
        SCOPED_TRACE(absl::StrCat("rank ", r, ", ",
                                  rows == Rows::kReal ? "real" : "padded",
                                  " rows, offset ", offset));
        MirroredBytes recv(Bytes(l.out_exchange_elements()), offset, rng_);
        MirroredBytes out(Bytes(l.shard_rows(rows) * l.heads * l.head_dim),
                          offset, rng_);
        ASSERT_TRUE(cpu::UnpackOutput(l, recv.host(), rows, out.host()).ok());
        const absl::Status status =
            cuda::UnpackOutput(l, recv.device(), rows, out.device(), stream_);
        ASSERT_TRUE(status.ok()) << status;
        ASSERT_TRUE(Synchronized());
        EXPECT_TRUE(out.Same());
      }
    }
  }
}

// The CUDA functions check their arguments as the reference does; nothing
// is launched for a bad call.
TEST_P(UlyssesLayoutCudaTest, ArgumentErrorsMatchCpu) {
  UlyssesLayout l = Layout(0);
  MirroredBytes buffer(Bytes(l.qkv_exchange_elements()), 0, rng_);
  uint8_t* odd = buffer.device() + 1;
  l.kv_replication = 0;
  EXPECT_EQ(cuda::PackQkv(l, {}, buffer.device(), stream_),
            cpu::PackQkv(l, {}, buffer.host()));
  l = Layout(0);
  if (l.real_rows() > 0) {
    EXPECT_EQ(cuda::PackQkv(l, {odd, odd, odd}, buffer.device(), stream_),
              cpu::PackQkv(
                  l, {buffer.host() + 1, buffer.host() + 1, buffer.host() + 1},
                  buffer.host()));
  }
  EXPECT_EQ(cuda::UnpackQkv(l, nullptr, Rows::kPadded, {}, stream_),
            cpu::UnpackQkv(l, nullptr, Rows::kPadded, {}));
  EXPECT_EQ(
      cuda::PackOutput(l, buffer.device(), Rows::kPadded, nullptr, stream_),
      cpu::PackOutput(l, buffer.host(), Rows::kPadded, nullptr));
  EXPECT_EQ(
      cuda::UnpackOutput(l, odd, Rows::kPadded, buffer.device(), stream_),
      cpu::UnpackOutput(l, buffer.host() + 1, Rows::kPadded, buffer.host()));
  ASSERT_TRUE(Synchronized());
  EXPECT_TRUE(buffer.Same());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, UlyssesLayoutCudaTest,
    ::testing::Combine(::testing::ValuesIn(TestedShapes()),
                       ::testing::Values(DType::kFloat32, DType::kBFloat16)),
    [](const ::testing::TestParamInfo<UlyssesLayoutCudaTest::ParamType>& info) {
      return CaseName(std::get<0>(info.param), std::get<1>(info.param));
    });

}  // namespace
}  // namespace dcp::kernels

// The CUDA C emitter (codegen/cuda): determinism, the printed form of a
// pointwise and a softmax kernel, the error for what is not supported, and
// NVRTC compiles of every kernel here to an sm_90 CUBIN without spills.
// Runs of the kernels on the simulator: CudaSimRunTest.cpp, CudaSimRowsTest.cpp;
// of the prelude: CudaPreludeTest.cpp.
#include "EmitCuda.h"
#include "FuseForTests.h"
#include "GeneralizeKernel.h"
#include "kiln/runtime/cuda/Nvrtc.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>


namespace {

using kiln::codegen::cuda::EmittedKernel;
using kiln::codegen::cuda::KernelKind;
using kiln::test::emit;
using kiln::test::fuse;

// ---- the kernels of these tests (also the NVRTC list) ----

const char *const kAddExp = R"(
func.func @f(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.add %a, %b : tensor<4x8xf32>
  %1 = kiln.exp %0 : tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
})";

const char *const kSoftmax = R"(
func.func @softmax(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %m = kiln.reduce_max %a [1] : tensor<4x8xf32> -> tensor<4xf32>
  %mr = kiln.reshape %m : tensor<4xf32> -> tensor<4x1xf32>
  %mb = kiln.broadcast %mr : tensor<4x1xf32> -> tensor<4x8xf32>
  %0 = kiln.sub %a, %mb : tensor<4x8xf32>
  %1 = kiln.exp %0 : tensor<4x8xf32>
  %s = kiln.reduce_sum %1 [1] : tensor<4x8xf32> -> tensor<4xf32>
  %sr = kiln.reshape %s : tensor<4xf32> -> tensor<4x1xf32>
  %sb = kiln.broadcast %sr : tensor<4x1xf32> -> tensor<4x8xf32>
  %2 = kiln.div %1, %sb : tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
})";

const std::string kLayerNormBf16Text = kiln::test::layerNormBf16Text(6);
const char *const kLayerNormBf16 = kLayerNormBf16Text.c_str();

const char *const kColumnSum = R"(
func.func @bias_grad(%g: tensor<64x24xf32>) -> tensor<24xf32> {
  %s = kiln.reduce_sum %g [0] : tensor<64x24xf32> -> tensor<24xf32>
  return %s : tensor<24xf32>
})";

const char *const kFullSumI64 = R"(
func.func @count(%a: tensor<50x40xi64>) -> tensor<i64> {
  %s = kiln.reduce_sum %a [0, 1] : tensor<50x40xi64> -> tensor<i64>
  return %s : tensor<i64>
})";

const char *const kArgMax = R"(
func.func @argmax(%x: tensor<4x8xf32>) -> tensor<4xi64> {
  %1 = kiln.argmax %x [1] : tensor<4x8xf32> -> tensor<4xi64>
  return %1 : tensor<4xi64>
})";

const char *const kCumsum = R"(
func.func @cumsum(%x: tensor<4x300xf32>) -> tensor<4x300xf32> {
  %1 = kiln.cumsum %x [1] : tensor<4x300xf32>
  return %1 : tensor<4x300xf32>
})";

const char *const kGather = R"(
func.func @embed(%t: tensor<50x8xf32>, %i: tensor<6x8xi64>) -> tensor<6x8xf32> {
  %g = kiln.gather %t[%i] dim = 0 as "embedding" : tensor<50x8xf32>, tensor<6x8xi64> -> tensor<6x8xf32>
  %r = kiln.relu %g : tensor<6x8xf32>
  return %r : tensor<6x8xf32>
})";

const char *const kScatterAdd = R"(
func.func @embed_grad(%i: tensor<6x8xi64>, %g: tensor<6x8xf32>) -> tensor<50x8xf32> {
  %z = kiln.constant 0.0 : tensor<50x8xf32>
  %s = kiln.scatter_add %z[%i], %g dim = 0 : tensor<50x8xf32>, tensor<6x8xi64>, tensor<6x8xf32>
  return %s : tensor<50x8xf32>
})";

const char *const kViews = R"(
func.func @views(%a: tensor<8x4xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %at = kiln.transpose %a [1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
  %bb = kiln.broadcast %b : tensor<8xf32> -> tensor<4x8xf32>
  %0 = kiln.mul %at, %bb : tensor<4x8xf32>
  %1 = kiln.sub %0, %at : tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
})";

const char *const kBf16Chain = R"(
func.func @bf16(%a: tensor<3x37xbf16>, %b: tensor<3x37xbf16>) -> tensor<3x37xbf16> {
  %0 = kiln.mul %a, %b : tensor<3x37xbf16>
  %1 = kiln.add %0, %a : tensor<3x37xbf16>
  return %1 : tensor<3x37xbf16>
})";

const char *const kDivisionModes = R"(
func.func @modes(%a: tensor<16xf32>, %b: tensor<16xf32>, %p: tensor<16xi64>, %q: tensor<16xi64>)
    -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xi64>, tensor<16xi64>, tensor<16xi64>, tensor<16xi64>) {
  %0 = kiln.floor_div %a, %b : tensor<16xf32>
  %1 = kiln.remainder %a, %b : tensor<16xf32>
  %2 = kiln.fmod %a, %b : tensor<16xf32>
  %3 = kiln.floor_div %p, %q : tensor<16xi64>
  %4 = kiln.remainder %p, %q : tensor<16xi64>
  %5 = kiln.fmod %p, %q : tensor<16xi64>
  %6 = kiln.div %p, %q : tensor<16xi64>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xi64>, tensor<16xi64>, tensor<16xi64>, tensor<16xi64>
})";

const char *const kRoundCompareSelect = R"(
func.func @rcs(%a: tensor<10xf32>, %b: tensor<10xf32>) -> (tensor<10xf32>, tensor<10xi1>, tensor<10xf32>, tensor<10xi64>) {
  %r = kiln.round %a : tensor<10xf32>
  %c = kiln.compare gt, %a, %b : tensor<10xf32>
  %s = kiln.select %c, %a, %b : tensor<10xf32>
  %m = kiln.maximum %a, %b : tensor<10xf32>
  %t = kiln.add %s, %m : tensor<10xf32>
  %i = kiln.convert %a : tensor<10xf32> -> tensor<10xi64>
  return %r, %c, %t, %i : tensor<10xf32>, tensor<10xi1>, tensor<10xf32>, tensor<10xi64>
})";

const char *const kAllKernels[] = {kAddExp,   kSoftmax, kLayerNormBf16, kColumnSum,    kFullSumI64,
                                   kArgMax,   kCumsum,  kGather,        kScatterAdd,   kViews,
                                   kBf16Chain, kDivisionModes, kRoundCompareSelect};

// ---- determinism and the printed form ----

TEST(CudaEmit, SameFusionSameBytes) {
  for (const char *text : kAllKernels) {
    EmittedKernel a = emit(text), b = emit(text);
    EXPECT_FALSE(a.source.empty());
    EXPECT_EQ(a.source, b.source) << text;
  }
}

TEST(CudaEmit, PointwiseKernelReadsAsTheFusion) {
  EmittedKernel k = emit(kAddExp);
  EXPECT_EQ(k.name, "fusion_0");
  EXPECT_EQ(k.launch.kind, KernelKind::Pointwise);
  const std::string &s = k.source;
  EXPECT_NE(s.find("extern \"C\" __global__ void fusion_0(const float *__restrict__ in0, const float *__restrict__ "
                   "in1, float *__restrict__ out0) {"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("const int n = 32;"), std::string::npos) << s; // 32-bit index math
  EXPECT_NE(s.find("kiln_vec<float, 4>"), std::string::npos) << s; // 16-byte vector path
  EXPECT_NE(s.find("const float v0 = (a0 + a1);"), std::string::npos) << s;
  EXPECT_NE(s.find("const float v1 = expf(v0);"), std::string::npos) << s;
  EXPECT_NE(s.find("kiln_store(out0 + i, v1);"), std::string::npos) << s; // the scalar tail
  ASSERT_EQ(k.params.size(), 3u);
  EXPECT_EQ(k.launch.block_threads, 256);
  EXPECT_EQ(k.launch.gridBlocks({}), 1); // 8 float4 items
}

TEST(CudaEmit, SoftmaxIsOneWarpPerRowKernel) {
  EmittedKernel k = emit(kSoftmax);
  EXPECT_EQ(k.launch.kind, KernelKind::WarpRows);
  const std::string &s = k.source;
  EXPECT_NE(s.find("acc = kiln_warp_allreduce(acc, kiln_max());"), std::string::npos) << s;
  EXPECT_NE(s.find("acc = kiln_warp_allreduce(acc, kiln_sum());"), std::string::npos) << s;
  EXPECT_NE(s.find("expf("), std::string::npos) << s;
  EXPECT_EQ(s.find("__syncthreads"), std::string::npos) << s; // a warp needs no barrier
  EXPECT_EQ(k.launch.block_threads, 256);
  EXPECT_EQ(k.launch.work_per_block, 8); // 8 warps, a row each
  EXPECT_EQ(k.launch.gridBlocks({}), 1);
}

TEST(CudaEmit, LongRowsTakeABlockEach) {
  EmittedKernel k = emit(kLayerNormBf16);
  EXPECT_EQ(k.launch.kind, KernelKind::BlockRows);
  EXPECT_NE(k.source.find("kiln_block_allreduce(acc, kiln_sum(), kiln_scratch0)"), std::string::npos) << k.source;
  EXPECT_NE(k.source.find("__shared__ float kiln_scratch0[32];"), std::string::npos) << k.source;
  EXPECT_EQ(k.launch.gridBlocks({}), 6);
  EXPECT_EQ(k.launch.workspace_bytes, 0);
}

TEST(CudaEmit, UnsupportedOpNamesTheOpAndTheKind) {
  auto f = fuse(R"(
func.func @f(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = kiln.fusion "k"(%a) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf32>):
    %0 = kiln.exp %x : tensor<4x8xf32>
    %1 = kiln.cumsum %0 [1] : tensor<4x8xf32>
    kiln.yield %1 : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
})",
                /*runFuse=*/false);
  ASSERT_TRUE(f);
  ASSERT_EQ(f->fusions.size(), 1u);
  std::string error;
  EXPECT_TRUE(mlir::failed(kiln::codegen::cuda::emitCudaKernel(f->fusions[0], nullptr, "k", &error)));
  EXPECT_NE(error.find("kiln.cumsum"), std::string::npos) << error;
  EXPECT_NE(error.find("not supported yet"), std::string::npos) << error;
}

TEST(CudaEmit, HugeTensorsGet64BitIndexMath) {
  EmittedKernel k = emit(R"(
func.func @f(%a: tensor<65536x65536xf32>) -> tensor<65536x65536xf32> {
  %0 = kiln.neg %a : tensor<65536x65536xf32>
  return %0 : tensor<65536x65536xf32>
})");
  EXPECT_NE(k.source.find("const long long n = 4294967296;"), std::string::npos) << k.source;
  EXPECT_EQ(k.launch.gridBlocks({}), 65536); // capped: the grid-stride loop covers the rest
}

// ---- NVRTC: every kernel above compiles to an sm_90 CUBIN, no spills ----

/// Compiles `source` (the prelude prepended) for sm_90 with the runtime's
/// NVRTC service (a private cache folder: every run compiles) and checks a
/// non-empty CUBIN and 0 spill bytes for `kernel`.
void expect_cubin_without_spills(const std::string &source, const std::string &kernel) {
  static kiln::runtime::cuda::NvrtcCompiler nvrtc([] {
    kiln::runtime::cuda::NvrtcCompilerOptions o;
    o.cache_dir = "";  // no disk cache: the point is to compile
    return o;
  }());
  kiln::runtime::cuda::KernelSource src;
  src.code = kiln::codegen::cuda::cudaPrelude() + source;
  src.kernel_names = {kernel};
  src.file_name = kernel + ".cu";
  try {
    const kiln::runtime::cuda::CompiledModule m = nvrtc.compile(src, 90);
    EXPECT_GT(m.binary.size(), 0u);
    const kiln::runtime::cuda::KernelResources *r = m.kernel(kernel);
    ASSERT_NE(r, nullptr) << m.log;
    EXPECT_EQ(r->spill_store_bytes + r->spill_load_bytes, 0) << m.log;
  } catch (const std::exception &e) {
    ADD_FAILURE() << e.what() << "\n" << source;
  }
}

TEST(CudaNvrtc, EveryKernelCompilesWithoutSpills) {
  if (!kiln::runtime::cuda::nvrtc_available())
    GTEST_SKIP() << "skipped: " << kiln::runtime::cuda::nvrtc_unavailable_reason();
  for (const char *text : kAllKernels) {
    auto f = fuse(text);
    ASSERT_TRUE(f);
    for (kiln::ir::FusionOp fusion : f->fusions) {
      std::string error;
      auto k = kiln::codegen::cuda::emitCudaKernel(fusion, nullptr, "", &error);
      ASSERT_TRUE(mlir::succeeded(k)) << error;
      expect_cubin_without_spills(k->source, k->name);
    }
  }
}


// Row-split generalization (dim 0 a size parameter): 64-bit index math, the
// size after the pointers, the grid from the size; NVRTC compiles them.
TEST(CudaNvrtc, ShapeGenericKernelsCompile) {
  const bool nvrtc = kiln::runtime::cuda::nvrtc_available();
  for (const char *text : {kAddExp, kSoftmax, kLayerNormBf16, kBf16Chain}) {
    auto f = fuse(text);
    ASSERT_TRUE(f);
    kiln::ir::FusionOp fusion = f->fusions[0];
    ASSERT_TRUE(kiln::codegen::isRowSplittable(fusion)) << text;
    kiln::codegen::KernelGeneralization generic = kiln::codegen::rowSplitGeneralization(fusion);
    std::string error;
    auto k = kiln::codegen::cuda::emitCudaKernel(fusion, &generic, "generic", &error);
    ASSERT_TRUE(mlir::succeeded(k)) << error;
    EXPECT_EQ(k->params.back().name, "size0") << k->source;
    EXPECT_EQ(k->params.back().role, kiln::codegen::cuda::KernelParam::Role::Size);
    EXPECT_NE(k->source.find("long long"), std::string::npos);
    EXPECT_EQ(k->launch.work_classes, std::vector<int>{0});
    if (!nvrtc)
      continue;
    expect_cubin_without_spills(k->source, k->name);
  }
}
} // namespace

namespace {
// KILN_PRINT_CUDA=1 prints every kernel of this file (to read the emitter's output).
TEST(CudaEmit, PrintKernelsWhenAsked) {
  if (!std::getenv("KILN_PRINT_CUDA"))
    GTEST_SKIP() << "skipped: set KILN_PRINT_CUDA=1 to print the kernels";
  for (const char *text : kAllKernels) {
    auto f = fuse(text);
    ASSERT_TRUE(f);
    for (kiln::ir::FusionOp fusion : f->fusions) {
      std::string error;
      auto k = kiln::codegen::cuda::emitCudaKernel(fusion, nullptr, "", &error);
      ASSERT_TRUE(mlir::succeeded(k)) << error;
      std::printf("// kind %s, block %lld, grid %lld\n%s\n", kiln::codegen::cuda::kindName(k->launch.kind),
                  static_cast<long long>(k->launch.block_threads), static_cast<long long>(k->launch.gridBlocks({})),
                  k->source.c_str());
    }
  }
}
} // namespace

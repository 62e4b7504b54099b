// The prelude every simulated kernel is compiled with: host C++ definitions
// of what the kernel-source contract uses (runtime/src/sim/README.md).
#include "Prelude.h"

#include "ApiTable.h"

namespace kiln::runtime::sim::detail {
namespace {

/// Standard headers first: the CUDA keyword macros below (__noinline__ in
/// particular) would break libstdc++'s own attribute spellings.
constexpr const char *kHeaders = R"PRE(// kiln cuda-sim prelude (generated; do not edit)
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <type_traits>
#include <utility>
)PRE";

/// Keywords, indices, barriers and warp operations.
constexpr const char *kCore = R"PRE(
extern "C" KilnSimApi kiln_sim_api;
KilnSimApi kiln_sim_api;
thread_local unsigned char kiln_sim_tls_anchor;
extern "C" void *kiln_sim_tls_touch() { return &kiln_sim_tls_anchor; }

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// A block runs on one OS thread, so thread-local storage is per block
// (block scope thread_local is static). Dynamic shared memory
// (`extern __shared__ T name[];`) is rewritten by the loader into a macro
// for the launch's per-block arena.
#define __shared__ thread_local
#define __constant__ const

constexpr int warpSize = 32;
#define threadIdx (kiln_sim_api.current()->thread_idx)
#define blockIdx (kiln_sim_api.current()->block_idx)
#define blockDim (kiln_sim_api.current()->block_dim)
#define gridDim (kiln_sim_api.current()->grid_dim)

#define __syncthreads() kiln_sim_api.barrier(__LINE__)
#define __syncwarp kiln_sim_syncwarp
#define __shfl_sync(...) kiln_sim_shuffle(KILN_SIM_SHFL_IDX, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) kiln_sim_shuffle(KILN_SIM_SHFL_UP, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) kiln_sim_shuffle(KILN_SIM_SHFL_DOWN, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) kiln_sim_shuffle(KILN_SIM_SHFL_XOR, __LINE__, __VA_ARGS__)
#define __ballot_sync(mask, pred) kiln_sim_ballot(__LINE__, (mask), (pred))
#define __all_sync(mask, pred) (kiln_sim_ballot(__LINE__, (mask), (pred)) == (unsigned)(mask))
#define __any_sync(mask, pred) (kiln_sim_ballot(__LINE__, (mask), (pred)) != 0u)
#define __activemask() kiln_sim_api.activemask()
#define __trap() kiln_sim_api.trap("__trap()")
#define __threadfence() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define __threadfence_block() __atomic_thread_fence(__ATOMIC_SEQ_CST)

template <class T>
static inline T kiln_sim_shuffle(int kind, int line, unsigned mask, T var, int lane_arg, int width = 32) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                "cuda-sim: shuffles move trivially copyable values of at most 8 bytes");
  KilnSimWarpOp op = {kind, line, mask, lane_arg, width, 0ull, 0ull};
  memcpy(&op.value, &var, sizeof(T));
  kiln_sim_api.warp_op(&op);
  T out;
  memcpy(&out, &op.result, sizeof(T));
  return out;
}
static inline unsigned kiln_sim_ballot(int line, unsigned mask, int pred) {
  KilnSimWarpOp op = {KILN_SIM_BALLOT, line, mask, 0, 32, pred ? 1ull : 0ull, 0ull};
  kiln_sim_api.warp_op(&op);
  return (unsigned)op.result;
}
// __builtin_LINE() as a default argument is the caller's line.
static inline void kiln_sim_syncwarp(unsigned mask = 0xffffffffu, int line = __builtin_LINE()) {
  KilnSimWarpOp op = {KILN_SIM_SYNCWARP, line, mask, 0, 32, 0ull, 0ull};
  kiln_sim_api.warp_op(&op);
}

// Every argument of a kernel is read from cuLaunchKernel's `void **args`.
template <class... A, size_t... I>
static inline void kiln_sim_invoke(void (*f)(A...), void **args, std::index_sequence<I...>) {
  f(*static_cast<typename std::remove_reference<A>::type *>(args[I])...);
}
template <class... A>
static inline void kiln_sim_invoke(void (*f)(A...), void **args) {
  kiln_sim_invoke(f, args, std::index_sequence_for<A...>{});
}
// The size of each parameter (what cuLaunchKernel reads from the CUBIN's
// metadata): a captured launch copies its argument values by these sizes.
template <class... A>
static inline unsigned long kiln_sim_arg_sizes(void (*)(A...), unsigned long *out) {
  const unsigned long sizes[] = {sizeof(typename std::remove_reference<A>::type)..., 0ul};
  if (out)
    for (unsigned long i = 0; i < sizeof...(A); ++i) out[i] = sizes[i];
  return sizeof...(A);
}
)PRE";

/// Atomics: __atomic builtins (blocks run on several OS threads), each a
/// point where the scheduler may switch threads (so spin loops progress).
constexpr const char *kAtomics = R"PRE(
#define KILN_SIM_ATOMIC_RMW(name, T, builtin)                                          \
  static inline T name(T *p, T v) {                                                    \
    kiln_sim_api.atomic_point();                                                       \
    return builtin(p, v, __ATOMIC_RELAXED);                                            \
  }
#define KILN_SIM_ATOMIC_CAS_LOOP(name, T, combine)                                     \
  static inline T name(T *p, T v) {                                                    \
    kiln_sim_api.atomic_point();                                                       \
    T old;                                                                             \
    __atomic_load(p, &old, __ATOMIC_RELAXED);                                         \
    T next;                                                                            \
    do {                                                                               \
      next = combine;                                                                  \
    } while (!__atomic_compare_exchange(p, &old, &next, true, __ATOMIC_RELAXED,        \
                                        __ATOMIC_RELAXED));                            \
    return old;                                                                        \
  }
#define KILN_SIM_ATOMIC_INT(T)                                                         \
  KILN_SIM_ATOMIC_RMW(atomicAdd, T, __atomic_fetch_add)                                \
  KILN_SIM_ATOMIC_RMW(atomicSub, T, __atomic_fetch_sub)                                \
  KILN_SIM_ATOMIC_RMW(atomicAnd, T, __atomic_fetch_and)                                \
  KILN_SIM_ATOMIC_RMW(atomicOr, T, __atomic_fetch_or)                                  \
  KILN_SIM_ATOMIC_RMW(atomicXor, T, __atomic_fetch_xor)                                \
  KILN_SIM_ATOMIC_RMW(atomicExch, T, __atomic_exchange_n)                              \
  KILN_SIM_ATOMIC_CAS_LOOP(atomicMax, T, (old > v ? old : v))                          \
  KILN_SIM_ATOMIC_CAS_LOOP(atomicMin, T, (old < v ? old : v))                          \
  static inline T atomicCAS(T *p, T compare, T v) {                                    \
    kiln_sim_api.atomic_point();                                                       \
    __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED); \
    return compare;                                                                    \
  }
KILN_SIM_ATOMIC_INT(int)
KILN_SIM_ATOMIC_INT(unsigned)
KILN_SIM_ATOMIC_INT(unsigned long long)
KILN_SIM_ATOMIC_INT(long long)
// Float atomics (CUDA has them; the emitter's reductions do not use them).
KILN_SIM_ATOMIC_CAS_LOOP(atomicAdd, float, (old + v))
KILN_SIM_ATOMIC_CAS_LOOP(atomicAdd, double, (old + v))
KILN_SIM_ATOMIC_CAS_LOOP(atomicExch, float, (v))
)PRE";

/// CUDA's device math names that the C library lacks, and the intrinsics.
constexpr const char *kMath = R"PRE(
// The C library's math functions, declared here: <math.h> in C++ pulls in
// <cmath>, which costs ~0.3 s of every kernel's compile.
extern "C" {
#define KILN_SIM_MATH1(name) float name##f(float) noexcept; double name(double) noexcept;
#define KILN_SIM_MATH2(name) float name##f(float, float) noexcept; double name(double, double) noexcept;
KILN_SIM_MATH1(exp) KILN_SIM_MATH1(exp2) KILN_SIM_MATH1(exp10) KILN_SIM_MATH1(expm1)
KILN_SIM_MATH1(log) KILN_SIM_MATH1(log2) KILN_SIM_MATH1(log10) KILN_SIM_MATH1(log1p)
KILN_SIM_MATH1(sqrt) KILN_SIM_MATH1(cbrt) KILN_SIM_MATH1(sin) KILN_SIM_MATH1(cos) KILN_SIM_MATH1(tan)
KILN_SIM_MATH1(asin) KILN_SIM_MATH1(acos) KILN_SIM_MATH1(atan) KILN_SIM_MATH1(sinh) KILN_SIM_MATH1(cosh)
KILN_SIM_MATH1(tanh) KILN_SIM_MATH1(asinh) KILN_SIM_MATH1(acosh) KILN_SIM_MATH1(atanh)
KILN_SIM_MATH1(erf) KILN_SIM_MATH1(erfc) KILN_SIM_MATH1(lgamma) KILN_SIM_MATH1(tgamma)
KILN_SIM_MATH1(fabs) KILN_SIM_MATH1(floor) KILN_SIM_MATH1(ceil) KILN_SIM_MATH1(trunc)
KILN_SIM_MATH1(round) KILN_SIM_MATH1(rint) KILN_SIM_MATH1(nearbyint)
KILN_SIM_MATH2(pow) KILN_SIM_MATH2(atan2) KILN_SIM_MATH2(fmod) KILN_SIM_MATH2(fmax) KILN_SIM_MATH2(fmin)
KILN_SIM_MATH2(hypot) KILN_SIM_MATH2(copysign) KILN_SIM_MATH2(remainder) KILN_SIM_MATH2(fdim)
float fmaf(float, float, float) noexcept;
double fma(double, double, double) noexcept;
float ldexpf(float, int) noexcept;
double ldexp(double, int) noexcept;
float frexpf(float, int *) noexcept;
double frexp(double, int *) noexcept;
long lrintf(float) noexcept;
long lroundf(float) noexcept;
void sincosf(float, float *, float *) noexcept;
void sincos(double, double *, double *) noexcept;
}
#define KILN_SIM_CLASSIFY(name, builtin)                                  \
  static inline bool name(float x) { return builtin(x); }                 \
  static inline bool name(double x) { return builtin(x); }
KILN_SIM_CLASSIFY(isnan, __builtin_isnan)
KILN_SIM_CLASSIFY(isinf, __builtin_isinf)
KILN_SIM_CLASSIFY(isfinite, __builtin_isfinite)
KILN_SIM_CLASSIFY(signbit, __builtin_signbit)
#ifndef INFINITY
#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#endif
// glibc declares __expf and friends itself (_GNU_SOURCE): map CUDA's fast
// intrinsics to the accurate functions by name.
#define __expf expf
#define __exp10f exp10f
#define __logf logf
#define __log2f log2f
#define __log10f log10f
#define __sinf sinf
#define __cosf cosf
#define __tanf tanf
#define __powf powf
#define __sincosf sincosf
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline int __float2int_rn(float x) { return (int)rintf(x); }
static inline float __int2float_rn(int x) { return (float)x; }
static inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
static inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
static inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
static inline float __uint_as_float(unsigned i) { float x; memcpy(&x, &i, 4); return x; }
static inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
static inline double __longlong_as_double(long long i) { double x; memcpy(&x, &i, 8); return x; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline int __mul24(int a, int b) { return a * b; }
#define KILN_SIM_MINMAX(T)                                        \
  static inline T min(T a, T b) { return a < b ? a : b; }         \
  static inline T max(T a, T b) { return a > b ? a : b; }
KILN_SIM_MINMAX(int)
KILN_SIM_MINMAX(unsigned)
KILN_SIM_MINMAX(long long)
KILN_SIM_MINMAX(unsigned long long)
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
)PRE";

/// UBSan's handlers, defined in the kernel library itself (linked with
/// -Bsymbolic) so a failed check reports through the simulator: the kernel,
/// block and thread plus the check's source location. Every handler's data
/// starts with the source location (compiler-rt's ubsan_handlers.h).
constexpr const char *kUbsan = R"PRE(
struct KilnSimSourceLocation { const char *file; unsigned line, column; };
struct KilnSimTypeDescriptor { unsigned short kind, info; char name[1]; };
struct KilnSimOutOfBoundsData { KilnSimSourceLocation loc; const KilnSimTypeDescriptor *array_type, *index_type; };
static void kiln_sim_ub(const char *check, void *data, const char *detail) {
  const KilnSimSourceLocation *loc = (const KilnSimSourceLocation *)data;
  kiln_sim_api.undefined_behaviour(check, loc->file, loc->line, loc->column, detail);
  __builtin_unreachable();
}
static void kiln_sim_ub_bounds(void *data, void *index) {
  const KilnSimOutOfBoundsData *d = (const KilnSimOutOfBoundsData *)data;
  char detail[160];
  const bool is_signed = (d->index_type->info & 1) != 0;
  if (is_signed)
    snprintf(detail, sizeof detail, "index %lld out of bounds for type %s", (long long)(size_t)index, d->array_type->name);
  else
    snprintf(detail, sizeof detail, "index %llu out of bounds for type %s", (unsigned long long)(size_t)index, d->array_type->name);
  kiln_sim_ub("out of bounds index", data, detail);
}
extern "C" {
void __ubsan_handle_out_of_bounds(void *d, void *i) { kiln_sim_ub_bounds(d, i); }
void __ubsan_handle_out_of_bounds_abort(void *d, void *i) { kiln_sim_ub_bounds(d, i); }
#define KILN_SIM_UB_HANDLER(name, what)                                                       \
  void __ubsan_handle_##name(void *d, void *, void *) { kiln_sim_ub(what, d, ""); }           \
  void __ubsan_handle_##name##_abort(void *d, void *, void *) { kiln_sim_ub(what, d, ""); }
KILN_SIM_UB_HANDLER(add_overflow, "signed integer overflow in +")
KILN_SIM_UB_HANDLER(sub_overflow, "signed integer overflow in -")
KILN_SIM_UB_HANDLER(mul_overflow, "signed integer overflow in *")
KILN_SIM_UB_HANDLER(negate_overflow, "signed integer overflow in unary -")
KILN_SIM_UB_HANDLER(divrem_overflow, "integer division by zero or overflow")
KILN_SIM_UB_HANDLER(shift_out_of_bounds, "shift out of bounds")
KILN_SIM_UB_HANDLER(type_mismatch_v1, "misaligned or null pointer use")
KILN_SIM_UB_HANDLER(pointer_overflow, "pointer arithmetic overflow")
KILN_SIM_UB_HANDLER(load_invalid_value, "load of an invalid bool or enum value")
KILN_SIM_UB_HANDLER(vla_bound_not_positive, "variable-length array bound not positive")
KILN_SIM_UB_HANDLER(float_cast_overflow, "float to integer conversion overflow")
KILN_SIM_UB_HANDLER(nonnull_arg, "null passed as a nonnull argument")
KILN_SIM_UB_HANDLER(nonnull_return_v1, "null returned from a returns_nonnull function")
KILN_SIM_UB_HANDLER(invalid_builtin, "invalid builtin argument")
KILN_SIM_UB_HANDLER(alignment_assumption, "alignment assumption violated")
// clang's extra checks (KILN_SIM_CXX=clang++): it links no UBSan runtime
// into a shared library, so every handler it may call is defined here.
KILN_SIM_UB_HANDLER(function_type_mismatch, "call through a function pointer of the wrong type")
KILN_SIM_UB_HANDLER(function_type_mismatch_v1, "call through a function pointer of the wrong type")
KILN_SIM_UB_HANDLER(implicit_conversion, "implicit conversion changed the value")
KILN_SIM_UB_HANDLER(nullability_arg, "null passed as a _Nonnull argument")
KILN_SIM_UB_HANDLER(nullability_return_v1, "null returned as _Nonnull")
KILN_SIM_UB_HANDLER(nonnull_return, "null returned from a returns_nonnull function")
KILN_SIM_UB_HANDLER(type_mismatch, "misaligned or null pointer use")
void __ubsan_handle_builtin_unreachable(void *d) { kiln_sim_ub("__builtin_unreachable reached", d, ""); }
void __ubsan_handle_missing_return(void *d) { kiln_sim_ub("missing return", d, ""); }
}
)PRE";

} // namespace

std::string prelude_text() {
  std::string text = kHeaders;
  text += KILN_SIM_STRINGIFY(KILN_SIM_API_TYPES);
  text += "\n";
  text += kCore;
  text += kAtomics;
  text += kMath;
  text += kUbsan;
  return text;
}

} // namespace kiln::runtime::sim::detail

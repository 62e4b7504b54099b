// The table of simulator entry points a host-compiled kernel calls (barriers,
// warp operations, the current thread's indices, failures), written once
// here and used twice: compiled into the runtime, and stringified into the
// prelude text every kernel is compiled with (Prelude.cpp), so the two sides
// cannot disagree on the layout. Not installed.
#pragma once

// Spelled as a macro body so Prelude.cpp can stringify the same text.
// Plain C types only: the prelude has no Kiln headers.
#define KILN_SIM_API_TYPES                                                                         \
  struct uint3 {                                                                                   \
    unsigned x, y, z;                                                                              \
  };                                                                                               \
  struct dim3 {                                                                                    \
    unsigned x, y, z;                                                                              \
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}     \
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}                                            \
  };                                                                                               \
  /* What a CUDA thread sees as threadIdx / blockIdx / blockDim / gridDim. */                      \
  struct KilnSimThreadInfo {                                                                       \
    uint3 thread_idx;                                                                              \
    uint3 block_idx;                                                                               \
    dim3 block_dim;                                                                                \
    dim3 grid_dim;                                                                                 \
  };                                                                                               \
  /* One lane's part of a warp operation (shuffle, ballot, syncwarp). */                          \
  struct KilnSimWarpOp {                                                                           \
    int kind;                 /* KilnSimWarpKind */                                                \
    int line;                 /* the call site's source line */                                    \
    unsigned mask;            /* the lanes that must take part */                                  \
    int lane_arg;             /* srcLane, delta or laneMask */                                     \
    int width;                /* the shuffle's segment width */                                    \
    unsigned long long value; /* this lane's operand (bytes of var, or the predicate) */           \
    unsigned long long result;                                                                     \
  };                                                                                               \
  enum KilnSimWarpKind {                                                                           \
    KILN_SIM_SHFL_IDX = 0,                                                                         \
    KILN_SIM_SHFL_UP = 1,                                                                          \
    KILN_SIM_SHFL_DOWN = 2,                                                                        \
    KILN_SIM_SHFL_XOR = 3,                                                                         \
    KILN_SIM_BALLOT = 4,                                                                           \
    KILN_SIM_SYNCWARP = 5                                                                          \
  };                                                                                               \
  struct KilnSimApi {                                                                              \
    const KilnSimThreadInfo *(*current)();                                                         \
    void (*barrier)(int line);                                                                     \
    void (*warp_op)(KilnSimWarpOp *op);                                                            \
    unsigned (*activemask)();                                                                      \
    void (*atomic_point)();                                                                        \
    unsigned char *(*dynamic_smem)();                                                              \
    /* Undefined behaviour found by a UBSan check: does not return. */                           \
    void (*undefined_behaviour)(const char *check, const char *file, unsigned line,               \
                                unsigned column, const char *detail);                              \
    /* __trap() or a failed assert: does not return. */                                           \
    void (*trap)(const char *what);                                                                \
  };

#define KILN_SIM_STRINGIFY_(...) #__VA_ARGS__
#define KILN_SIM_STRINGIFY(...) KILN_SIM_STRINGIFY_(__VA_ARGS__)

namespace kiln::runtime::sim::detail {
KILN_SIM_API_TYPES

/// The symbol each kernel library exports, filled by the loader after
/// dlopen (HostCompiler.cpp): the prelude's calls go through it.
inline constexpr const char *kApiSymbol = "kiln_sim_api";
/// Each kernel `name` gets an entry `kiln_sim_entry_<name>(void **args)`
/// that calls it with cuLaunchKernel's argument convention.
inline constexpr const char *kEntryPrefix = "kiln_sim_entry_";
/// kiln_sim_argsizes_<kernel>(unsigned long *out): the parameter count, and
/// each parameter's size in out[i] when out is not null.
inline constexpr const char *kArgSizesPrefix = "kiln_sim_argsizes_";
/// Touches the library's thread-local storage so dlinfo can find it.
inline constexpr const char *kTlsTouchSymbol = "kiln_sim_tls_touch";

/// The runtime's implementation of the table (Scheduler.cpp).
const KilnSimApi &runtime_api();
} // namespace kiln::runtime::sim::detail

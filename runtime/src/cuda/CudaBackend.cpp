// The CUDA DeviceBackend over DeviceApi (kiln/runtime/cuda/CudaBackend.h).
#include "kiln/runtime/cuda/CudaBackend.h"

#include <mutex>
#include <stdexcept>
#include <utility>

#include "CublasLtGemm.h"
#include "kiln/runtime/cuda/CompiledKernel.h"
#include "kiln/runtime/cuda/CachingAllocator.h"
#include "kiln/runtime/cuda/CurrentStream.h"

namespace kiln::runtime::cuda {
namespace {

/// A CUDA stream: a raw handle of one device; owned streams are destroyed
/// with the object (the default stream is not owned).
class CudaStream final : public Stream {
public:
  CudaStream(DeviceApi &api, int index, StreamHandle handle, bool owned)
      : api_(api), index_(index), handle_(handle), owned_(owned) {}
  ~CudaStream() override {
    if (owned_)
      api_.stream_destroy(handle_);
  }
  Device device() const override { return Device(DeviceType::CUDA, index_); }
  void synchronize() override { api_.stream_synchronize(handle_); }
  StreamHandle handle() const { return handle_; }

private:
  DeviceApi &api_;
  int index_;
  StreamHandle handle_;
  bool owned_;
};

/// A timed CUDA event.
class CudaEvent final : public Event {
public:
  explicit CudaEvent(DeviceApi &api) : api_(api), event_(api.timed_event_create()) {}
  ~CudaEvent() override { api_.event_destroy(event_); }
  void record(Stream &stream) override {
    api_.event_record(event_, stream_handle(stream));
    recorded_ = true;
  }
  void wait(Stream &stream) override {
    if (recorded_)
      api_.stream_wait_event(stream_handle(stream), event_);
  }
  void synchronize() override {
    if (recorded_)
      api_.event_synchronize(event_);
  }
  bool query() const override { return !recorded_ || api_.event_query(event_); }
  double elapsed_seconds(const Event &start) const override {
    const auto *s = dynamic_cast<const CudaEvent *>(&start);
    if (!s || !s->recorded_ || !recorded_ || !query() || !s->query())
      return 0;
    return api_.event_elapsed_seconds(s->event_, event_);
  }

private:
  DeviceApi &api_;
  EventHandle event_;
  bool recorded_ = false;
};

/// Everything one device index holds.
struct PerDevice {
  std::shared_ptr<DeviceApi> api;
  std::unique_ptr<CachingAllocator> allocator;
  std::unique_ptr<CudaStream> default_stream;
  std::unique_ptr<CublasLtGemm> gemm; ///< a GPU's cuBLASLt (made on first use)
};

class CudaBackend final : public DeviceBackend {
public:
  explicit CudaBackend(std::vector<std::shared_ptr<DeviceApi>> apis) {
    if (apis.empty())
      throw std::invalid_argument("cuda backend: needs at least one device");
    for (size_t i = 0; i < apis.size(); ++i) {
      PerDevice d;
      d.api = std::move(apis[i]);
      d.allocator = std::make_unique<CachingAllocator>(*d.api, static_cast<int>(i));
      d.default_stream = std::make_unique<CudaStream>(*d.api, static_cast<int>(i), kDefaultStream, false);
      devices_.push_back(std::move(d));
    }
    host_allocator_ = std::make_unique<CachingHostAllocator>(*devices_[0].api);
    host_accessible_ = devices_[0].api->properties().host_accessible;
  }

  DeviceType type() const override { return DeviceType::CUDA; }
  int device_count() const override { return static_cast<int>(devices_.size()); }
  Allocator &allocator(int index) override { return *at(index).allocator; }
  bool host_accessible() const override { return host_accessible_; }
  DeviceApi &api(int index) { return *at(index).api; }
  CachingHostAllocator &host_allocator() { return *host_allocator_; }

  void copy(void *dst, Device dst_device, const void *src, Device src_device, size_t nbytes) override {
    Stream &s = default_stream(cuda_index(dst_device, src_device));
    copy_async(dst, dst_device, src, src_device, nbytes, s);
    s.synchronize();
  }
  Stream &default_stream(int index) override { return *at(index).default_stream; }
  std::unique_ptr<Stream> create_stream(int index) override {
    DeviceApi &a = api(index);
    return std::make_unique<CudaStream>(a, index, a.stream_create(), true);
  }
  std::unique_ptr<Event> create_event(int index) override { return std::make_unique<CudaEvent>(api(index)); }

  void copy_async(void *dst, Device dst_device, const void *src, Device src_device, size_t nbytes,
                  Stream &stream) override {
    if (nbytes == 0)
      return;
    const CopyKind kind = !src_device.is_cuda()  ? CopyKind::HostToDevice
                          : !dst_device.is_cuda() ? CopyKind::DeviceToHost
                                                  : CopyKind::DeviceToDevice;
    api(cuda_index(dst_device, src_device)).memcpy_async(dst, src, nbytes, kind, stream_handle(stream));
  }
  void copy_to_contiguous(const TensorView &src, void *dst, Stream &stream) override {
    host_fallback("copy_to_contiguous (strided copy)", stream,
                  [src, dst] { cpu_backend()->copy_to_contiguous(src, dst, cpu_stream()); });
  }
  /// A compiled graph's kernel (codegen's CUDA target: kernel.native is a
  /// CompiledKernel) on the stream's device.
  void launch(const KernelHandle &kernel, const KernelArgs &args, Stream &stream) override {
    const auto *compiled = static_cast<const CompiledKernel *>(kernel.native.get());
    if (!compiled)
      throw std::runtime_error("cuda backend: launch got a kernel without a CUDA function (a CPU kernel library's "
                               "kernel; compile the graph for the CUDA device: codegen's CUDA target)");
    const int index = stream.device().index;
    if (!compiled->module) {
      gemm_with_epilogue(*compiled, args, stream);
      return;
    }
    launch_compiled_kernel(*compiled, args, api(index), index, stream_handle(stream));
  }
  void gemm(const TensorView &a, const TensorView &b, const TensorView &c, Stream &stream) override {
    if (!host_accessible_) {
      PerDevice &d = at(stream.device().index);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!d.gemm) d.gemm = std::make_unique<CublasLtGemm>(*d.api);
      }
      d.gemm->run(a, b, c, stream_handle(stream));
      return;
    }
    host_fallback("gemm", stream, [a, b, c] { cpu_backend()->gemm(a, b, c, cpu_stream()); });
  }
  void conv2d(ConvOp op, const Conv2dParams &p, const TensorView &a, const TensorView &b, const TensorView &out,
              Stream &stream) override {
    host_fallback("conv2d (cuDNN)", stream,
                  [op, p, a, b, out] { cpu_backend()->conv2d(op, p, a, b, out, cpu_stream()); });
  }
  void max_pool2d(MaxPoolOp op, const Pool2dParams &p, const TensorView &a, const TensorView &indices,
                  const TensorView &values, Stream &stream) override {
    host_fallback("max_pool2d", stream, [op, p, a, indices, values] {
      cpu_backend()->max_pool2d(op, p, a, indices, values, cpu_stream());
    });
  }

private:
  /// c = epilogue(a x b + bias): cuBLASLt's epilogue on a GPU; on the
  /// simulator the CPU's GEMM, then the same epilogue math on the host.
  /// Operands a, b, then bias [N] or (Dgelu, DgeluBgrad) aux [M, N]; results
  /// c, then aux (BiasGeluAux) or bgrad (DgeluBgrad): CompiledKernel.h.
  void gemm_with_epilogue(const CompiledKernel &k, const KernelArgs &args, Stream &stream) {
    const GemmEpilogue epilogue = k.gemm_epilogue;
    const bool reads_aux = epilogue == GemmEpilogue::Dgelu || epilogue == GemmEpilogue::DgeluBgrad;
    const size_t results = epilogue == GemmEpilogue::BiasGeluAux || epilogue == GemmEpilogue::DgeluBgrad ? 2 : 1;
    if (epilogue == GemmEpilogue::None || args.operands.size() != 3 || args.results.size() != results)
      throw std::runtime_error(std::string("cuda backend: a GEMM epilogue launch (") + gemm_epilogue_name(epilogue) +
                               ") takes a, b, a bias or aux operand and " + std::to_string(results) + " result(s)");
    const TensorView &a = *args.operands[0], &b = *args.operands[1], &third = *args.operands[2];
    const TensorView &c = *args.results[0];
    const TensorView second = results == 2 ? *args.results[1] : TensorView{};
    // cuBLASLt's pointers: BIAS_POINTER (bias read, or bgrad written) and EPILOGUE_AUX_POINTER.
    const TensorView &vec = reads_aux ? second : third;
    const TensorView &mat = reads_aux ? third : second;
    if (!host_accessible_) {
      PerDevice &d = at(stream.device().index);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!d.gemm) d.gemm = std::make_unique<CublasLtGemm>(*d.api);
      }
      d.gemm->run_with_epilogue(a, b, c, static_cast<int32_t>(epilogue), vec.buffer ? vec.data() : nullptr,
                                stream_handle(stream), mat.buffer ? mat.data() : nullptr);
      return;
    }
    host_fallback("gemm", stream, [a, b, vec, mat, c, epilogue] {
      cpu_backend()->gemm(a, b, c, cpu_stream());
      apply_gemm_epilogue_on_host(epilogue, vec, mat, c);
    });
  }

  PerDevice &at(int index) {
    if (index < 0 || index >= device_count())
      throw std::out_of_range("cuda backend: device index " + std::to_string(index) + " out of range (" +
                              std::to_string(device_count()) + " devices)");
    return devices_[static_cast<size_t>(index)];
  }
  static int cuda_index(Device a, Device b) { return a.is_cuda() ? a.index : b.index; }
  static Stream &cpu_stream() { return cpu_backend()->default_stream(0); }
  /// On a host-accessible device (the simulator) work without a CUDA kernel
  /// yet runs on the CPU once `stream`'s earlier work is done; on a GPU it
  /// is an error naming the operation.
  /// It is a host function on the stream (DeviceApi::launch_host_func: the
  /// simulator runs it inline, or records it as a host node of a capture,
  /// holding the views' buffers until the graph is destroyed).
  void host_fallback(const char *what, Stream &stream, std::function<void()> work) {
    if (!host_accessible_)
      throw std::runtime_error(std::string("cuda backend: ") + what +
                               " has no CUDA implementation yet on a real GPU; use the CPU or KILN_CUDA_SIM=1");
    api(stream.device().index).launch_host_func(stream_handle(stream), std::move(work));
  }

  std::vector<PerDevice> devices_;
  std::unique_ptr<CachingHostAllocator> host_allocator_;
  bool host_accessible_ = false;
  std::mutex mu_; ///< guards the lazily made per-device library handles
};

} // namespace

std::shared_ptr<DeviceBackend> make_cuda_backend(std::vector<std::shared_ptr<DeviceApi>> devices) {
  return std::make_shared<CudaBackend>(std::move(devices));
}

DeviceApi *device_api(int index) {
  auto *b = dynamic_cast<CudaBackend *>(find_backend(DeviceType::CUDA));
  return b && index >= 0 && index < b->device_count() ? &b->api(index) : nullptr;
}

std::unique_ptr<Stream> borrowed_stream(int device, StreamHandle stream) {
  auto *b = dynamic_cast<CudaBackend *>(find_backend(DeviceType::CUDA));
  if (!b)
    throw std::runtime_error("cuda backend: borrowed_stream(cuda:" + std::to_string(device) +
                             "): the registered CUDA backend is not a CudaBackend");
  return std::make_unique<CudaStream>(b->api(device), device, stream, /*owned=*/false);
}

CachingHostAllocator *pinned_allocator() {
  auto *b = dynamic_cast<CudaBackend *>(find_backend(DeviceType::CUDA));
  return b ? &b->host_allocator() : nullptr;
}

StreamHandle stream_handle(Stream &stream) {
  auto *s = dynamic_cast<CudaStream *>(&stream);
  if (!s)
    throw std::invalid_argument("cuda backend: expected a CUDA stream, got a stream of " + stream.device().str());
  return s->handle();
}

} // namespace kiln::runtime::cuda

// libFuzzer target: kiln::load and kiln::verify (the safetensors reader,
// frontend/src/serialize/safetensors.cpp) on arbitrary file bytes.
//
// Properties: every rejection is a kiln::Error (any other exception, a
// crash or a sanitizer report is a bug); load() and verify() agree (verify
// checks everything but BOOL byte values, serialize.h); a loaded file's
// tensors are contiguous CPU tensors whose byte sizes add up to the file's
// data section.
#include <cstring>

#include "fuzz_input.h"
#include "kiln/serialize.h"

namespace {

/// The error message, or "" if `fn` succeeded.
template <class F> std::string error_of(F fn) {
  try {
    fn();
  } catch (const kiln::Error &e) {
    return e.what();
  }
  return "";
}

void check_loaded(const kiln::LoadedTensors &loaded, size_t file_size) {
  size_t bytes = 0;
  for (const auto &[name, t] : loaded.tensors) {
    if (!t.defined() || !t.is_contiguous() || !t.device().is_cpu())
      kiln::fuzz::violated("load returned a tensor '" + name + "' that is not a contiguous CPU tensor");
    bytes += static_cast<size_t>(t.numel()) * kiln::itemsize(t.dtype());
  }
  if (bytes > file_size)
    kiln::fuzz::violated("load returned " + std::to_string(bytes) + " tensor bytes from a file of " +
                         std::to_string(file_size));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static kiln::fuzz::MemFile file;
  const std::string &path = file.put(data, size);
  kiln::LoadedTensors loaded;
  const std::string load_error = error_of([&] { loaded = kiln::load(path); });
  const std::string verify_error = error_of([&] { kiln::verify(path); });
  if (load_error.empty()) {
    check_loaded(loaded, size);
    if (!verify_error.empty())
      kiln::fuzz::violated("load accepted a file that verify rejects: " + verify_error);
  } else if (verify_error.empty() && load_error.find("BOOL tensor") == std::string::npos) {
    kiln::fuzz::violated("verify accepted a file that load rejects: " + load_error);
  }
  return 0;
}

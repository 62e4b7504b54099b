// A deployment against Kiln::runtime alone: loads DIR/mlp.kiln (written by
// the user app with kiln::export_compiled), runs it on DIR/x.bin [8, 16]
// float32 and checks the output equals DIR/y.bin (kiln::compile's eval
// output) byte for byte. Prints "kiln-runtime-app: ok" on success.
#include "kiln/load_compiled.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

static std::vector<uint8_t> read_bytes(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kiln-runtime-app DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  try {
    kiln::LoadedModel model = kiln::load_compiled(dir + "/mlp.kiln");
    kiln::runtime::HostTensor x = kiln::runtime::HostTensor::zeros(kiln::runtime::ElementType::Float32, {8, 16});
    x.data = read_bytes(dir + "/x.bin");
    const std::vector<kiln::runtime::HostTensor> out = model.run({x});
    const std::vector<uint8_t> expected = read_bytes(dir + "/y.bin");
    if (out.size() != 1 || out[0].data != expected) {
      std::fprintf(stderr, "kiln-runtime-app: the loaded model's output differs from kiln::compile's (%zu bytes vs %zu)\n",
                   out.empty() ? size_t(0) : out[0].data.size(), expected.size());
      return 1;
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kiln-runtime-app: %s\n", e.what());
    return 1;
  }
  std::printf("kiln-runtime-app: ok (output equals kiln::compile's, byte for byte)\n");
  return 0;
}

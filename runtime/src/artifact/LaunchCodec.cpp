// LaunchCodec.cpp - a LaunchExecutable as data and back (FORMAT.md,
// "program"): the Builder calls that rebuild it, in slot order, and the
// memory plan, which the rebuilt executable must reproduce exactly.
#include <cstring>
#include <map>
#include <set>

#include "LaunchInternal.h"
#include "artifact/Json.h"
#include "artifact/JsonDom.h"
#include "kiln/runtime/Artifact.h"
#include "kiln/runtime/cuda/CompiledKernel.h"

namespace kiln::runtime {

using artifact::json;

struct LaunchCodec {
  static bool encode(const LaunchExecutable &exe, std::string *out, std::string *error,
                     std::vector<artifact::CudaUnit> *cuda_units);
};

namespace {

json type_json(const SlotType &t) { return {{"dtype", dtype_name(t.dtype)}, {"sizes", t.sizes}}; }

const char *kind_code(LaunchKind k) {
  switch (k) {
  case LaunchKind::Kernel: return "kernel";
  case LaunchKind::Gemm: return "gemm";
  case LaunchKind::Transpose: return "transpose";
  case LaunchKind::Broadcast: return "broadcast";
  case LaunchKind::Reshape: return "reshape";
  case LaunchKind::Copy: return "copy";
  case LaunchKind::Conv: return "conv";
  case LaunchKind::MaxPool: return "max_pool";
  }
  return "?";
}

/// A double as its 16 hex digits (JSON has no NaN or infinity; a scalar may be -inf).
std::string bits_of(double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(bits));
  return text;
}

bool double_of_bits(const std::string &hex, double *v) {
  if (hex.size() != 16) return false;
  uint64_t bits = 0;
  for (char c : hex) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    bits = bits << 4 | static_cast<uint64_t>(d);
  }
  std::memcpy(v, &bits, sizeof bits);
  return true;
}

/// Translation units of a CUDA executable, numbered by first use.
struct CudaUnits {
  std::map<const cuda::CudaModule *, int> index;
  std::vector<artifact::CudaUnit> *units = nullptr;
  int of(const cuda::CudaModule &m) {
    auto [it, added] = index.emplace(&m, static_cast<int>(index.size()));
    if (added) units->push_back(artifact::CudaUnit{m.kernel_names(), m.source(), "", "", {}});
    return it->second;
  }
};

/// The CUDA launch of a kernel step (FORMAT.md, "program"): unit and index of
/// its function, parameters (kind, index, dim, value bits), size sources,
/// grid rule, block, dynamic shared bytes; or a GEMM epilogue.
json cuda_launch_json(const cuda::CompiledKernel &k, CudaUnits &units) {
  json params = json::array();
  for (const cuda::KernelArgSource &p : k.params)
    params.push_back({static_cast<int>(p.kind), p.index, p.dim, bits_of(p.value)});
  json sizes = json::array();
  for (auto [arg, dim] : k.size_sources) sizes.push_back({arg, dim});
  json j = {{"epilogue", static_cast<int>(k.gemm_epilogue)}, {"params", params}, {"sizes", sizes},
            {"grid", {k.grid_rule.static_work, k.grid_rule.work_per_block, k.grid_rule.max_blocks}},
            {"work_classes", k.grid_rule.work_classes}, {"block", k.block_threads},
            {"shared_bytes", k.dynamic_shared_bytes}};
  if (k.module) {
    j["unit"] = units.of(*k.module);
    j["index"] = k.index;
  }
  return j;
}

json launch_json(const LaunchExecutable::Launch &l, const std::vector<SlotType> &types, CudaUnits *cuda_units) {
  json j = {{"op", kind_code(l.kind)}, {"operands", l.operands}, {"results", l.results}};
  switch (l.kind) {
  case LaunchKind::Kernel: {
    j["name"] = l.name;
    j["symbol"] = l.symbol.empty() ? l.name : l.symbol;
    j["split_rows"] = l.kernel.split_rows;
    json results = json::array();
    for (int r : l.results) results.push_back(type_json(types[r]));
    j["result_types"] = results;
    json pairs = json::array();
    for (const InPlace &p : l.in_place) pairs.push_back({p.operand, p.result});
    j["in_place"] = pairs;
    json checks = json::array();
    for (const auto &[slot, c] : l.checks) checks.push_back({{"slot", slot}, {"op", c.op}, {"dim", c.dim}, {"size", c.size}});
    j["index_checks"] = checks;
    if (cuda_units) j["cuda"] = cuda_launch_json(*static_cast<const cuda::CompiledKernel *>(l.kernel.native.get()), *cuda_units);
    break;
  }
  case LaunchKind::Transpose:
  case LaunchKind::Broadcast:
  case LaunchKind::Reshape: j["attr"] = l.attr; break;
  case LaunchKind::Conv:
    j["conv_op"] = static_cast<int>(l.conv_op);
    j["stride"] = l.conv.stride;
    j["padding"] = l.conv.padding;
    j["dilation"] = l.conv.dilation;
    j["groups"] = l.conv.groups;
    j["result_type"] = type_json(types[l.results.at(0)]);
    break;
  case LaunchKind::MaxPool:
    j["pool_op"] = static_cast<int>(l.pool_op);
    j["kernel"] = l.pool.kernel;
    j["stride"] = l.pool.stride;
    j["padding"] = l.pool.padding;
    j["result_type"] = type_json(types[l.results.at(0)]);
    break;
  case LaunchKind::Gemm:
  case LaunchKind::Copy: break;
  }
  return j;
}

json plan_json(const std::vector<SlotPlan> &plans) {
  json a = json::array();
  for (const SlotPlan &p : plans)
    a.push_back({static_cast<int>(p.storage), p.nbytes, p.offset, p.pool, p.base, p.def, p.last_use, p.escapes});
  return a;
}

std::string hex_of(const void *data, size_t n) {
  static const char *digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t b = static_cast<const uint8_t *>(data)[i];
    s.push_back(digits[b >> 4]);
    s.push_back(digits[b & 15]);
  }
  return s;
}

bool bytes_of_hex(const std::string &hex, std::vector<unsigned char> *out) {
  if (hex.size() % 2) return false;
  auto nibble = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<unsigned char>(hi * 16 + lo));
  }
  return true;
}

// ---- decoding (simdjson's DOM: JsonDom.h) ------------------------------------

namespace dom = artifact::dom;
using dom::Element;

/// A slot type {"dtype", "sizes"}, its bytes checked against kMaxTensorBytes.
bool type_of(Element m, SlotType *t, std::string *error) {
  std::string dtype;
  int64_t bytes = 0;
  if (!dom::get_string(m, "dtype", &dtype, error) || !artifact::parse_dtype(dtype, &t->dtype, error) ||
      !dom::get_ints(m, "sizes", &t->sizes, error, 0))
    return false;
  if (!artifact::checked_nbytes(t->sizes, t->dtype, &bytes)) {
    *error = "a slot of " + slot_type_str(*t) + " exceeds " + std::to_string(artifact::kMaxTensorBytes) + " bytes";
    return false;
  }
  return true;
}

bool get_type(Element j, const char *key, SlotType *t, std::string *error) {
  Element m;
  return dom::member(j, key, &m, error) && type_of(m, t, error);
}

bool get_slot_list(Element j, const char *key, std::vector<int> *out, std::string *error) {
  std::vector<int64_t> v;
  if (!dom::get_ints(j, key, &v, error, -1)) return false;
  out->clear();
  for (int64_t x : v) {
    if (x > (1 << 30)) {
      *error = std::string("field '") + key + "': slot " + std::to_string(x) + " out of range";
      return false;
    }
    out->push_back(static_cast<int>(x));
  }
  return true;
}

template <size_t N> bool get_pair(Element j, const char *key, std::array<int64_t, N> *out, std::string *error) {
  std::vector<int64_t> v;
  if (!dom::get_ints(j, key, &v, error, 0)) return false;
  if (v.size() != N) {
    *error = std::string("field '") + key + "' must have " + std::to_string(N) + " entries";
    return false;
  }
  for (size_t i = 0; i < N; ++i) (*out)[i] = v[i];
  return true;
}

/// `e` as exactly `n` integers (the first `n_ints` of them; a string is
/// accepted at index `string_at` into *str when that is < n).
bool small_tuple(Element e, size_t n, int64_t *ints, size_t string_at = SIZE_MAX, std::string *str = nullptr) {
  dom::Array a;
  if (e.get(a) != simdjson::SUCCESS || a.size() != n) return false;
  size_t i = 0;
  for (Element v : a) {
    if (i == string_at) {
      std::string_view sv;
      if (v.get(sv) != simdjson::SUCCESS) return false;
      str->assign(sv.data(), sv.size());
    } else if (!dom::as_int(v, &ints[i])) {
      return false;
    }
    ++i;
  }
  return true;
}

using Resolver = std::function<KernelHandle(const std::string &, bool, std::string *)>;
using CudaModules = std::vector<std::shared_ptr<const cuda::CudaModule>>;

/// A CUDA kernel step's launch (cuda_launch_json) over the artifact's modules.
KernelHandle cuda_kernel_of(Element step, const std::string &name, const CudaModules &modules, std::string *error) {
  Element c;
  if (!dom::member(step, "cuda", &c, error) || !c.is_object()) {
    if (error->empty()) *error = "kernel " + name + ": 'cuda' must be an object";
    return {};
  }
  auto k = std::make_shared<cuda::CompiledKernel>();
  int64_t epilogue = 0, block = 0, shared = 0;
  std::vector<int64_t> grid, classes;
  dom::Array params, sizes;
  if (!dom::get_array(c, "params", &params, error) || !dom::get_array(c, "sizes", &sizes, error) ||
      !dom::get_int(c, "epilogue", &epilogue, error) || !dom::get_ints(c, "grid", &grid, error, 0) ||
      !dom::get_ints(c, "work_classes", &classes, error, 0) || !dom::get_int(c, "block", &block, error) ||
      !dom::get_int(c, "shared_bytes", &shared, error))
    return {};
  auto bad = [&](const std::string &what) {
    *error = "kernel " + name + ": cuda launch: " + what;
    return KernelHandle{};
  };
  if (grid.size() != 3 || grid[1] < 1 || grid[2] < 1 || block < 1 || block > 1024 || shared < 0 || shared > (1 << 20))
    return bad("bad grid rule, block or shared bytes");
  if (epilogue != 0 && epilogue != 4 && epilogue != 6 && epilogue != 36) return bad("bad GEMM epilogue");
  k->gemm_epilogue = static_cast<cuda::GemmEpilogue>(epilogue);
  for (Element p : params) {
    int64_t v[4] = {};
    std::string bits;
    if (!small_tuple(p, 4, v, 3, &bits)) return bad("parameters must be [kind, index, dim, value bits]");
    cuda::KernelArgSource a;
    const int64_t kind = v[0], index = v[1], dim = v[2];
    if (kind < 0 || kind > 5 || index < 0 || index > (1 << 20) || dim < 0 || dim > 64 || !double_of_bits(bits, &a.value))
      return bad("parameter out of range");
    a.kind = static_cast<cuda::KernelArgSource::Kind>(kind);
    a.index = static_cast<int>(index);
    a.dim = static_cast<int>(dim);
    k->params.push_back(a);
  }
  for (Element s : sizes) {
    int64_t v[2] = {};
    if (!small_tuple(s, 2, v) || v[0] < 0 || v[0] > (1 << 20) || v[1] < 0 || v[1] > 64)
      return bad("size sources must be [argument, dim]");
    k->size_sources.emplace_back(static_cast<int>(v[0]), static_cast<int>(v[1]));
  }
  for (int64_t cls : classes) {
    if (cls > 64) return bad("work class out of range");
    k->grid_rule.work_classes.push_back(static_cast<int>(cls));
  }
  k->grid_rule.static_work = grid[0];
  k->grid_rule.work_per_block = grid[1];
  k->grid_rule.max_blocks = grid[2];
  const cuda::GridRule rule = k->grid_rule;
  k->grid_blocks = [rule](const std::vector<int64_t> &class_sizes) { return rule.blocks(class_sizes); };
  k->block_threads = static_cast<uint32_t>(block);
  k->dynamic_shared_bytes = static_cast<size_t>(shared);
  if (dom::has_member(c, "unit")) {
    int64_t unit = 0, index = 0;
    if (!dom::get_int(c, "unit", &unit, error) || !dom::get_int(c, "index", &index, error)) return {};
    if (unit < 0 || static_cast<size_t>(unit) >= modules.size() || index < 0 ||
        static_cast<size_t>(index) >= modules[static_cast<size_t>(unit)]->kernel_names().size())
      return bad("function " + std::to_string(unit) + "/" + std::to_string(index) + " is not in section 'cuda'");
    k->module = modules[static_cast<size_t>(unit)];
    k->index = static_cast<size_t>(index);
  } else if (epilogue == 0) {
    return bad("neither a function nor a GEMM epilogue");
  }
  return KernelHandle{nullptr, false, k};
}

/// Replays one encoded step on the builder; returns the slots it made.
bool replay_step(Element step, LaunchExecutable::Builder &b, const Resolver &resolve, const CudaModules *cuda_modules,
                 std::vector<int> *made, std::string *error) {
  std::string op;
  if (!dom::get_string(step, "op", &op, error)) return false;
  std::vector<int> operands;
  auto operand = [&](size_t i) { return i < operands.size() ? operands[i] : -1; };
  if (op != "input" && op != "constant" && !get_slot_list(step, "operands", &operands, error)) return false;
  if (op == "input") {
    SlotType t;
    bool donatable = false;
    if (!get_type(step, "type", &t, error) || !dom::get_bool(step, "donatable", &donatable, error)) return false;
    made->push_back(b.addInput(t.sizes, t.dtype, donatable));
  } else if (op == "constant") {
    SlotType t;
    std::string hex;
    std::vector<unsigned char> bytes;
    int64_t nbytes = 0;
    if (!get_type(step, "type", &t, error) || !dom::get_string(step, "hex", &hex, error)) return false;
    artifact::checked_nbytes(t.sizes, t.dtype, &nbytes);
    if (!bytes_of_hex(hex, &bytes) || static_cast<int64_t>(bytes.size()) != nbytes) {
      *error = "constant of " + slot_type_str(t) + ": expected " + std::to_string(nbytes) + " bytes of hex data";
      return false;
    }
    made->push_back(b.addConstant(t, bytes.empty() ? reinterpret_cast<const unsigned char *>("") : bytes.data()));
  } else if (op == "kernel") {
    std::string name, symbol;
    bool split_rows = false;
    if (!dom::get_string(step, "name", &name, error) || !dom::get_string(step, "symbol", &symbol, error) ||
        !dom::get_bool(step, "split_rows", &split_rows, error))
      return false;
    dom::Array rt, ip, ic;
    if (!dom::get_array(step, "result_types", &rt, error) || !dom::get_array(step, "in_place", &ip, error) ||
        !dom::get_array(step, "index_checks", &ic, error))
      return false;
    std::vector<SlotType> results;
    for (Element r : rt) {
      SlotType t;
      if (!type_of(r, &t, error)) return false;
      results.push_back(std::move(t));
    }
    std::vector<InPlace> pairs;
    for (Element p : ip) {
      int64_t v[2] = {};
      if (!small_tuple(p, 2, v)) {
        *error = "kernel " + name + ": in_place pairs must be [operand, result]";
        return false;
      }
      const int64_t o = v[0], r = v[1];
      if (o < 0 || r < 0 || o >= static_cast<int64_t>(operands.size()) || r >= static_cast<int64_t>(results.size())) {
        *error = "kernel " + name + ": in_place pair [" + std::to_string(o) + ", " + std::to_string(r) + "] out of range";
        return false;
      }
      pairs.push_back(InPlace{static_cast<int>(o), static_cast<int>(r)});
    }
    KernelHandle kernel = cuda_modules ? cuda_kernel_of(step, name, *cuda_modules, error)
                          : resolve    ? resolve(symbol, split_rows, error)
                                       : KernelHandle{};
    if (!kernel) {
      if (error->empty()) *error = "kernel " + name + ": symbol " + symbol + " cannot be resolved";
      return false;
    }
    *made = b.addKernel(name, kernel, operands, results, {}, pairs);
    if (made->empty()) made->push_back(-1);
    if (symbol != name) b.setKernelSymbol(symbol);
    for (Element c : ic) {
      IndexCheck check;
      int64_t slot = 0;
      if (!dom::get_int(c, "slot", &slot, error) || !dom::get_string(c, "op", &check.op, error) ||
          !dom::get_int(c, "dim", &check.dim, error) || !dom::get_int(c, "size", &check.size, error))
        return false;
      if (slot < 0 || slot > (1 << 30)) {
        *error = "kernel " + name + ": index check slot out of range";
        return false;
      }
      b.addIndexCheck(static_cast<int>(slot), check);
    }
  } else if (op == "gemm") {
    made->push_back(b.addGemm(operand(0), operand(1)));
  } else if (op == "copy") {
    made->push_back(b.addCopy(operand(0)));
  } else if (op == "transpose" || op == "broadcast" || op == "reshape") {
    std::vector<int64_t> attr;
    if (!dom::get_ints(step, "attr", &attr, error, 0)) return false;
    made->push_back(op == "transpose"   ? b.addTranspose(operand(0), attr)
                    : op == "broadcast" ? b.addBroadcast(operand(0), attr)
                                        : b.addReshape(operand(0), attr));
  } else if (op == "conv") {
    Conv2dParams p;
    int64_t kind = 0;
    SlotType t;
    if (!dom::get_int(step, "conv_op", &kind, error) || !get_pair(step, "stride", &p.stride, error) ||
        !get_pair(step, "padding", &p.padding, error) || !get_pair(step, "dilation", &p.dilation, error) ||
        !dom::get_int(step, "groups", &p.groups, error) || !get_type(step, "result_type", &t, error))
      return false;
    if (kind < 0 || kind > 2 || p.stride[0] < 1 || p.stride[1] < 1 || p.dilation[0] < 1 || p.dilation[1] < 1) {
      *error = "conv: bad op, stride or dilation";
      return false;
    }
    made->push_back(b.addConv(static_cast<ConvOp>(kind), p, operand(0), operand(1), t));
  } else if (op == "max_pool") {
    Pool2dParams p;
    int64_t kind = 0;
    SlotType t;
    if (!dom::get_int(step, "pool_op", &kind, error) || !get_pair(step, "kernel", &p.kernel, error) ||
        !get_pair(step, "stride", &p.stride, error) || !get_pair(step, "padding", &p.padding, error) ||
        !get_type(step, "result_type", &t, error))
      return false;
    if (kind < 0 || kind > 2 || p.stride[0] < 1 || p.stride[1] < 1 || p.kernel[0] < 1 || p.kernel[1] < 1) {
      *error = "max_pool: bad op, kernel or stride";
      return false;
    }
    made->push_back(b.addMaxPool(static_cast<MaxPoolOp>(kind), p, operand(0), kind == 0 ? -1 : operand(1), t));
  } else {
    *error = "unknown step '" + op + "'";
    return false;
  }
  return true;
}

/// Whether the encoded plan (plan_json's [storage, nbytes, offset, pool,
/// base, def, last_use, escapes] per slot) is `plans`, entry for entry.
bool plans_equal(Element encoded, const std::vector<SlotPlan> &plans) {
  dom::Array a;
  if (encoded.get(a) != simdjson::SUCCESS || a.size() != plans.size()) return false;
  size_t i = 0;
  for (Element e : a) {
    const SlotPlan &p = plans[i++];
    dom::Array f;
    if (e.get(f) != simdjson::SUCCESS || f.size() != 8) return false;
    const int64_t want[7] = {static_cast<int>(p.storage), p.nbytes, p.offset, p.pool, p.base, p.def, p.last_use};
    size_t k = 0;
    for (Element v : f) {
      if (k < 7) {
        int64_t x = 0;
        if (!dom::as_int(v, &x) || x != want[k]) return false;
      } else {
        bool escapes = false;
        if (v.get(escapes) != simdjson::SUCCESS || escapes != p.escapes) return false;
      }
      ++k;
    }
  }
  return true;
}

} // namespace

bool LaunchCodec::encode(const LaunchExecutable &exe, std::string *out, std::string *error,
                         std::vector<artifact::CudaUnit> *cuda_units) {
  const bool cuda = exe.device_ == Device(DeviceType::CUDA, 0);
  if (exe.device_.type != DeviceType::CPU && !cuda) {
    *error = "only CPU and cuda:0 executables can be exported, this one runs on " + exe.device_.str();
    return false;
  }
  if (cuda && !cuda_units) {
    *error = "a CUDA executable's translation units need a place (encode_launches' cuda_units)";
    return false;
  }
  CudaUnits units;
  if (cuda) {
    cuda_units->clear();
    units.units = cuda_units;
  }
  DeviceBackend *backend = cuda ? find_backend(DeviceType::CUDA) : nullptr;
  if (cuda && !backend) {
    *error = "no CUDA backend to read the executable's constants from";
    return false;
  }
  std::map<int, const Buffer *> constants;
  for (const auto &[slot, buffer] : exe.constants_) constants[slot] = buffer.get();
  std::map<int, size_t> input_index;
  for (size_t i = 0; i < exe.inputs_.size(); ++i) input_index[exe.inputs_[i]] = i;
  json steps = json::array();
  std::set<int> emitted;
  for (size_t slot = 0; slot < exe.types_.size(); ++slot) {
    const SlotPlan &plan = exe.plans_[slot];
    const SlotType &type = exe.types_[slot];
    if (auto in = input_index.find(static_cast<int>(slot)); in != input_index.end()) {
      steps.push_back({{"op", "input"}, {"slot", slot}, {"type", type_json(type)}, {"donatable", exe.input_donatable(in->second)}});
    } else if (plan.storage == SlotStorage::Constant) {
      const Buffer *buffer = constants.at(static_cast<int>(slot));
      const size_t n = static_cast<size_t>(detail::nbytes_of(type));
      std::vector<unsigned char> host(n);
      if (cuda && n) backend->copy(host.data(), kCPU, buffer->data(), exe.device_, n);
      else if (n) std::memcpy(host.data(), buffer->data(), n);
      steps.push_back({{"op", "constant"}, {"slot", slot}, {"type", type_json(type)}, {"hex", hex_of(host.data(), n)}});
    } else if (plan.def >= 0 && !emitted.count(plan.def)) {
      const LaunchExecutable::Launch &l = *exe.launches_.at(plan.def);
      if (l.results.empty() || l.results[0] != static_cast<int>(slot)) {
        *error = "launch " + std::to_string(plan.def) + " (" + l.name + ") does not define slot " + std::to_string(slot);
        return false;
      }
      if (cuda && l.kind == LaunchKind::Kernel && !l.kernel.native) {
        *error = "kernel " + l.name + " has no CUDA function";
        return false;
      }
      json step = launch_json(l, exe.types_, cuda ? &units : nullptr);
      step["slot"] = slot;
      steps.push_back(std::move(step));
      emitted.insert(plan.def);
    }
  }
  if (emitted.size() != exe.launches_.size()) {
    *error = "the executable has launches without results";
    return false;
  }
  json program = {{"device", cuda ? "cuda" : "cpu"},
                  {"steps", steps},
                  {"outputs", exe.outputs_},
                  {"arena_bytes", exe.arena_bytes_},
                  {"plan", plan_json(exe.plans_)}};
  *out = program.dump(0);
  return true;
}

namespace artifact {

bool encode_launches(const LaunchExecutable &exe, std::string *json_text, std::string *error,
                     std::vector<CudaUnit> *cuda_units) {
  return LaunchCodec::encode(exe, json_text, error, cuda_units);
}

std::shared_ptr<LaunchExecutable> decode_launches(const std::string &text, const Resolver &resolve,
                                                  std::shared_ptr<const void> keep_alive, std::string *error,
                                                  const CudaModules *cuda_modules) {
  auto fail = [&](const std::string &what) {
    *error = "program: " + what;
    return nullptr;
  };
  // The parser owns the document's tape: one per thread, reused (a fresh
  // one allocates its buffers again, 0.2 ms for the GPT's program).
  thread_local simdjson::dom::parser parser;
  Element program;
  if (parser.parse(text).get(program) != simdjson::SUCCESS || !program.is_object()) return fail("not a JSON object");
  std::string device, why;
  Element steps_element, plan;
  dom::Array steps;
  std::vector<int> outputs;
  int64_t arena = 0;
  const bool dynamic = dom::has_member(program, "dynamic");  // an instantiated template: the plan is the Builder's
  if (!dom::get_string(program, "device", &device, &why) || !dom::get_array(program, "steps", &steps, &why) ||
      (!dynamic && !dom::member(program, "plan", &plan, &why)) || !get_slot_list(program, "outputs", &outputs, &why) ||
      (!dynamic && !dom::get_int(program, "arena_bytes", &arena, &why)))
    return fail(why);
  if (device != "cpu" && device != "cuda") return fail("device '" + device + "', this runtime runs CPU and CUDA programs");
  if ((device == "cuda") != (cuda_modules != nullptr))
    return fail("a " + device + " program in a " + (cuda_modules ? "CUDA" : "CPU") + " artifact");
  LaunchExecutable::Builder b;
  if (cuda_modules) b.setDevice(Device(DeviceType::CUDA, 0));
  int64_t next_slot = 0;
  for (Element step : steps) {
    int64_t slot = -1;
    std::vector<int> made;
    why.clear();
    if (!dom::get_int(step, "slot", &slot, &why) || !replay_step(step, b, resolve, cuda_modules, &made, &why))
      return fail("step " + std::to_string(next_slot) + ": " + why);
    if (!b.error().empty()) return fail(b.error());
    if (made.empty() || slot != next_slot || made[0] != slot)
      return fail("step for slot " + std::to_string(slot) + " made slot " +
                  std::to_string(made.empty() ? -1 : made[0]) + ", expected " + std::to_string(next_slot));
    next_slot += static_cast<int64_t>(made.size());
  }
  for (int o : outputs)
    if (o < 0 || o >= next_slot) return fail("output slot " + std::to_string(o) + " out of range");
  b.setOutputs(outputs);
  b.keepAlive(std::move(keep_alive));
  std::shared_ptr<LaunchExecutable> exe = b.finish(&why);
  if (!exe) return fail(why);
  if (!dynamic && (exe->arena_bytes() != arena || !plans_equal(plan, exe->slot_plans())))
    return fail("the memory plan differs from the exported one (arena " + std::to_string(exe->arena_bytes()) +
                " bytes, exported " + std::to_string(arena) + "): the runtime's planner changed; export the model again");
  return exe;
}

namespace {

/// Sizes of the dynamic dim the three programs were built at.
struct FitSizes {
  int64_t s0, s1, s2;
  std::string str() const { return std::to_string(s0) + ", " + std::to_string(s1) + ", " + std::to_string(s2); }
};

bool fit_values(const json &v0, const json &v1, const json &v2, const FitSizes &z, const std::string &path, json *out,
                std::string *error) {
  if (v0 == v1 && v1 == v2) {
    *out = v0;
    return true;
  }
  if (v0.is_number_integer() && v1.is_number_integer() && v2.is_number_integer()) {
    const int64_t d = v1.get<int64_t>() - v0.get<int64_t>(), b = d / (z.s1 - z.s0), a = v0.get<int64_t>() - b * z.s0;
    if (d % (z.s1 - z.s0) == 0 && a + b * z.s2 == v2.get<int64_t>()) {
      *out = json::object({{"s", json::array({a, b})}});
      return true;
    }
    *error = path + " is " + v0.dump() + ", " + v1.dump() + ", " + v2.dump() + " at sizes " + z.str() +
             ": not a + b s";
    return false;
  }
  if (v0.is_object() && v1.is_object() && v2.is_object() && v0.size() == v1.size() && v1.size() == v2.size()) {
    *out = json::object();
    for (auto it = v0.begin(); it != v0.end(); ++it) {
      if (!v1.contains(it.key()) || !v2.contains(it.key())) break;
      json fitted;
      if (!fit_values(*it, v1[it.key()], v2[it.key()], z, path + "." + it.key(), &fitted, error)) return false;
      (*out)[it.key()] = std::move(fitted);
    }
    if (out->size() == v0.size()) return true;
  }
  if (v0.is_array() && v1.is_array() && v2.is_array() && v0.size() == v1.size() && v1.size() == v2.size()) {
    *out = json::array();
    for (size_t i = 0; i < v0.size(); ++i) {
      json fitted;
      if (!fit_values(v0[i], v1[i], v2[i], z, path + "[" + std::to_string(i) + "]", &fitted, error)) return false;
      out->push_back(std::move(fitted));
    }
    return true;
  }
  *error = path + " differs between sizes " + z.str() + " (" +
           v0.dump().substr(0, 60) + " vs " + v1.dump().substr(0, 60) + ")";
  return false;
}

json instantiate_value(const json &v, int64_t s) {
  if (v.is_object() && v.size() == 1 && v.contains("s") && v["s"].is_array() && v["s"].size() == 2 &&
      v["s"][0].is_number_integer() && v["s"][1].is_number_integer()) {
    int64_t bs = 0, value = 0;  // an overflow gives -1, which every size and slot check refuses
    if (__builtin_mul_overflow(v["s"][1].get<int64_t>(), s, &bs) ||
        __builtin_add_overflow(v["s"][0].get<int64_t>(), bs, &value))
      return json(-1);
    return json(value);
  }
  if (v.is_object()) {
    json out = json::object();
    for (auto it = v.begin(); it != v.end(); ++it) out[it.key()] = instantiate_value(*it, s);
    return out;
  }
  if (v.is_array()) {
    json out = json::array();
    for (const json &x : v) out.push_back(instantiate_value(x, s));
    return out;
  }
  return v;
}

} // namespace

bool fit_dynamic_program(const std::vector<std::string> &programs, const std::vector<int64_t> &sizes,
                         std::string *program_template, std::string *error) {
  if (programs.size() != 3 || sizes.size() != 3 || sizes[0] == sizes[1] || sizes[0] == sizes[2] || sizes[1] == sizes[2]) {
    *error = "fit_dynamic_program: expected the programs at three distinct sizes";
    return false;
  }
  json j[3];
  for (int i = 0; i < 3; ++i) {
    j[i] = json::parse(programs[static_cast<size_t>(i)], nullptr, false);
    if (!j[i].is_object()) {
      *error = "fit_dynamic_program: program " + std::to_string(i) + " is not a JSON object";
      return false;
    }
    j[i].erase("plan");
    j[i].erase("arena_bytes");
  }
  json fitted;
  if (!fit_values(j[0], j[1], j[2], FitSizes{sizes[0], sizes[1], sizes[2]}, "program", &fitted, error)) return false;
  fitted["dynamic"] = true;
  *program_template = fitted.dump(0);
  return true;
}

bool instantiate_program(const std::string &program_template, int64_t s, std::string *program, std::string *error) {
  json t = json::parse(program_template, nullptr, false);
  if (!t.is_object() || !t.contains("dynamic")) {
    *error = "program: not a shape-generic template";
    return false;
  }
  *program = instantiate_value(t, s).dump(0);
  return true;
}

bool program_symbols(const std::string &text, std::vector<std::string> *symbols, std::string *error) {
  json program = json::parse(text, nullptr, false);
  std::string why;
  const json *steps = program.is_object() ? member(program, "steps", &why) : nullptr;
  if (!steps || !steps->is_array()) {
    *error = "program: no steps";
    return false;
  }
  std::set<std::string> set;
  for (const json &step : *steps) {
    std::string op, symbol;
    if (step.is_object() && get_string(step, "op", &op, &why) && op == "kernel" && get_string(step, "symbol", &symbol, &why))
      set.insert(symbol);
  }
  symbols->assign(set.begin(), set.end());
  return true;
}

} // namespace artifact
} // namespace kiln::runtime

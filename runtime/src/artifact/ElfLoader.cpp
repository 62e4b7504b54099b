// ElfLoader.cpp - see ElfLoader.h. ELF64 layout: the System V gABI and the
// x86-64 psABI (relocation types, section flags); every offset, size and
// index read from the file is checked against the file before it is used.
#include "artifact/ElfLoader.h"

#include <elf.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace kiln::runtime::artifact {
namespace {

/// MLIR's unranked memref (CRunnerUtils.h): rank + pointer to a ranked
/// descriptor {allocated, aligned, offset, sizes[rank], strides[rank]}.
struct UnrankedMemRef {
  int64_t rank;
  void *descriptor;
};

/// memrefCopy of mlir_c_runner_utils (a lowered memref.copy calls it),
/// written here so the runtime needs no MLIR library: copies a strided
/// memref element by element (elem_size bytes each) in row-major order.
extern "C" void kiln_memref_copy(int64_t elem_size, UnrankedMemRef *src_arg, UnrankedMemRef *dst_arg) {
  const int64_t rank = src_arg->rank;
  auto *src = static_cast<int64_t *>(src_arg->descriptor);
  auto *dst = static_cast<int64_t *>(dst_arg->descriptor);
  char *src_ptr = reinterpret_cast<char *>(src[1]) + src[2] * elem_size;
  char *dst_ptr = reinterpret_cast<char *>(dst[1]) + dst[2] * elem_size;
  if (rank == 0) {
    std::memcpy(dst_ptr, src_ptr, static_cast<size_t>(elem_size));
    return;
  }
  const int64_t *sizes = src + 3, *src_strides = src + 3 + rank, *dst_strides = dst + 3 + rank;
  for (int64_t d = 0; d < rank; ++d)
    if (sizes[d] == 0) return;
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);
  int64_t read = 0, write = 0;
  for (;;) {
    std::memcpy(dst_ptr + write * elem_size, src_ptr + read * elem_size, static_cast<size_t>(elem_size));
    int64_t axis = rank - 1;
    for (; axis >= 0; --axis) {
      read += src_strides[axis];
      write += dst_strides[axis];
      if (++index[axis] < sizes[axis]) break;
      read -= sizes[axis] * src_strides[axis];
      write -= sizes[axis] * dst_strides[axis];
      index[axis] = 0;
    }
    if (axis < 0) return;
  }
}

/// The external symbols kernels may call, and nothing else.
void *external_symbol(const std::string &name) {
  struct Entry {
    const char *name;
    void *address;
  };
  static const Entry kTable[] = {
      {"malloc", reinterpret_cast<void *>(&::malloc)},
      {"free", reinterpret_cast<void *>(&::free)},
      {"aligned_alloc", reinterpret_cast<void *>(&::aligned_alloc)},
      {"memcpy", reinterpret_cast<void *>(&::memcpy)},
      {"memmove", reinterpret_cast<void *>(&::memmove)},
      {"memset", reinterpret_cast<void *>(&::memset)},
      {"memrefCopy", reinterpret_cast<void *>(&kiln_memref_copy)},
      {"fmodf", reinterpret_cast<void *>(static_cast<float (*)(float, float)>(&::fmodf))},
      {"fmod", reinterpret_cast<void *>(static_cast<double (*)(double, double)>(&::fmod))},
      {"powf", reinterpret_cast<void *>(static_cast<float (*)(float, float)>(&::powf))},
      {"pow", reinterpret_cast<void *>(static_cast<double (*)(double, double)>(&::pow))},
      {"expf", reinterpret_cast<void *>(static_cast<float (*)(float)>(&::expf))},
      {"exp", reinterpret_cast<void *>(static_cast<double (*)(double)>(&::exp))},
      {"logf", reinterpret_cast<void *>(static_cast<float (*)(float)>(&::logf))},
      {"log", reinterpret_cast<void *>(static_cast<double (*)(double)>(&::log))},
      {"tanhf", reinterpret_cast<void *>(static_cast<float (*)(float)>(&::tanhf))},
      {"tanh", reinterpret_cast<void *>(static_cast<double (*)(double)>(&::tanh))},
      {"sqrtf", reinterpret_cast<void *>(static_cast<float (*)(float)>(&::sqrtf))},
      {"sqrt", reinterpret_cast<void *>(static_cast<double (*)(double)>(&::sqrt))},
      {"erff", reinterpret_cast<void *>(static_cast<float (*)(float)>(&::erff))},
      {"erf", reinterpret_cast<void *>(static_cast<double (*)(double)>(&::erf))},
      {"sinf", reinterpret_cast<void *>(static_cast<float (*)(float)>(&::sinf))},
      {"sin", reinterpret_cast<void *>(static_cast<double (*)(double)>(&::sin))},
      {"cosf", reinterpret_cast<void *>(static_cast<float (*)(float)>(&::cosf))},
      {"cos", reinterpret_cast<void *>(static_cast<double (*)(double)>(&::cos))},
      {"log1pf", reinterpret_cast<void *>(static_cast<float (*)(float)>(&::log1pf))},
      {"log1p", reinterpret_cast<void *>(static_cast<double (*)(double)>(&::log1p))},
      {"expm1f", reinterpret_cast<void *>(static_cast<float (*)(float)>(&::expm1f))},
      {"expm1", reinterpret_cast<void *>(static_cast<double (*)(double)>(&::expm1))},
      {"floorf", reinterpret_cast<void *>(static_cast<float (*)(float)>(&::floorf))},
      {"floor", reinterpret_cast<void *>(static_cast<double (*)(double)>(&::floor))},
      {"ceilf", reinterpret_cast<void *>(static_cast<float (*)(float)>(&::ceilf))},
      {"ceil", reinterpret_cast<void *>(static_cast<double (*)(double)>(&::ceil))},
      {"roundf", reinterpret_cast<void *>(static_cast<float (*)(float)>(&::roundf))},
      {"round", reinterpret_cast<void *>(static_cast<double (*)(double)>(&::round))},
      {"atan2f", reinterpret_cast<void *>(static_cast<float (*)(float, float)>(&::atan2f))},
      {"atan2", reinterpret_cast<void *>(static_cast<double (*)(double, double)>(&::atan2))},
  };
  for (const Entry &e : kTable)
    if (name == e.name) return e.address;
  return nullptr;
}

struct Section {
  const Elf64_Shdr *header = nullptr;
  size_t offset = 0;  // in the mapping; SIZE_MAX if not loaded
  bool loaded = false;
  bool code = false;
};

bool in_file(const std::string &file, uint64_t offset, uint64_t size) {
  return offset <= file.size() && size <= file.size() - offset;
}

size_t align_to(size_t n, uint64_t alignment) {
  if (alignment <= 1) return n;
  return (n + alignment - 1) / alignment * alignment;
}

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

} // namespace

LoadedObject::~LoadedObject() {
  if (base_) munmap(base_, size_);
}

void *LoadedObject::symbol(const std::string &name) const {
  auto it = symbols_.find(name);
  return it == symbols_.end() ? nullptr : it->second;
}

std::unique_ptr<LoadedObject> LoadedObject::load(const std::string &file, bool execute, std::string *error) {
  auto fail = [&](const std::string &what) {
    *error = "kernels: " + what;
    return nullptr;
  };
  // ---- the ELF header ---------------------------------------------------
  if (file.size() < sizeof(Elf64_Ehdr)) return fail("truncated ELF object (" + std::to_string(file.size()) + " bytes)");
  Elf64_Ehdr eh;
  std::memcpy(&eh, file.data(), sizeof eh);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return fail("not an ELF object");
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB)
    return fail("expected a 64-bit little-endian ELF object");
  if (eh.e_machine != EM_X86_64) return fail("wrong ISA: object code for ELF machine " + std::to_string(eh.e_machine) + ", expected x86-64 (62)");
  if (eh.e_type != ET_REL) return fail("expected a relocatable object (ET_REL), got ELF type " + std::to_string(eh.e_type));
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 || eh.e_shnum > 4096 ||
      !in_file(file, eh.e_shoff, uint64_t(eh.e_shnum) * sizeof(Elf64_Shdr)) || eh.e_shoff % 8 != 0)
    return fail("section header table outside the object");
  // Copy the headers out (the string may not be 8-byte aligned).
  std::vector<Elf64_Shdr> headers(eh.e_shnum);
  std::memcpy(headers.data(), file.data() + eh.e_shoff, headers.size() * sizeof(Elf64_Shdr));
  std::vector<Section> sections(headers.size());
  // ---- layout: code first (page aligned), then the rest ----------------
  size_t code_end = 0, total = 0;
  for (int pass = 0; pass < 2; ++pass) {
    size_t cursor = pass == 0 ? 0 : align_to(code_end, kPage);
    for (size_t i = 0; i < headers.size(); ++i) {
      const Elf64_Shdr &sh = headers[i];
      sections[i].header = &headers[i];
      if (!(sh.sh_flags & SHF_ALLOC) || sh.sh_size == 0) continue;
      if (sh.sh_type != SHT_PROGBITS && sh.sh_type != SHT_NOBITS) continue;  // .eh_frame is X86_64_UNWIND: skipped
      const bool code = (sh.sh_flags & SHF_EXECINSTR) != 0;
      if (code != (pass == 0)) continue;
      if (sh.sh_addralign > kPage || sh.sh_size > (size_t(1) << 32))
        return fail("section " + std::to_string(i) + " has alignment " + std::to_string(sh.sh_addralign) + " or size " +
                    std::to_string(sh.sh_size) + " beyond the loader's limits");
      if (sh.sh_type == SHT_PROGBITS && !in_file(file, sh.sh_offset, sh.sh_size))
        return fail("section " + std::to_string(i) + " lies outside the object");
      cursor = align_to(cursor, sh.sh_addralign);
      sections[i].offset = cursor;
      sections[i].loaded = true;
      sections[i].code = code;
      cursor += sh.sh_size;
    }
    if (pass == 0) code_end = cursor;
    else total = cursor;
  }
  auto object = std::unique_ptr<LoadedObject>(new LoadedObject());
  object->size_ = align_to(std::max<size_t>(total, 1), kPage);
  void *base = mmap(nullptr, object->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return fail("cannot map " + std::to_string(object->size_) + " bytes");
  object->base_ = base;
  char *mem = static_cast<char *>(base);
  for (const Section &s : sections)
    if (s.loaded && s.header->sh_type == SHT_PROGBITS)
      std::memcpy(mem + s.offset, file.data() + s.header->sh_offset, s.header->sh_size);
  // ---- symbols -----------------------------------------------------------
  const Elf64_Shdr *symtab = nullptr;
  for (const Elf64_Shdr &sh : headers)
    if (sh.sh_type == SHT_SYMTAB) {
      if (symtab) return fail("more than one symbol table");
      symtab = &sh;
    }
  if (!symtab) return fail("no symbol table");
  if (symtab->sh_entsize != sizeof(Elf64_Sym) || !in_file(file, symtab->sh_offset, symtab->sh_size) ||
      symtab->sh_link >= headers.size())
    return fail("bad symbol table");
  const Elf64_Shdr &strtab = headers[symtab->sh_link];
  if (strtab.sh_type != SHT_STRTAB || !in_file(file, strtab.sh_offset, strtab.sh_size))
    return fail("bad string table");
  const size_t num_symbols = symtab->sh_size / sizeof(Elf64_Sym);
  // An ELF symbol table always starts with the null symbol (gABI, "Symbol
  // Table"); the loop below starts after it.
  if (num_symbols == 0) return fail("empty symbol table (expected at least the null symbol)");
  std::vector<Elf64_Sym> symbols(num_symbols);
  std::memcpy(symbols.data(), file.data() + symtab->sh_offset, num_symbols * sizeof(Elf64_Sym));
  auto name_of = [&](uint32_t at, std::string *name) {
    if (at >= strtab.sh_size) return false;
    const char *begin = file.data() + strtab.sh_offset + at;
    const void *nul = std::memchr(begin, '\0', strtab.sh_size - at);
    if (!nul) return false;
    *name = std::string(begin, static_cast<const char *>(nul));
    return true;
  };
  std::vector<uint64_t> address(num_symbols, 0);
  for (size_t i = 1; i < num_symbols; ++i) {
    const Elf64_Sym &sym = symbols[i];
    std::string name;
    if (!name_of(sym.st_name, &name)) return fail("symbol " + std::to_string(i) + " has a name outside the string table");
    const int type = ELF64_ST_TYPE(sym.st_info);
    if (sym.st_shndx == SHN_UNDEF) {
      if (name.empty()) continue;
      void *external = external_symbol(name);
      if (!external) return fail("the kernels call '" + name + "', which this runtime does not provide");
      address[i] = reinterpret_cast<uint64_t>(external);
    } else if (sym.st_shndx == SHN_ABS) {
      address[i] = sym.st_value;
    } else if (sym.st_shndx < headers.size() && sections[sym.st_shndx].loaded) {
      const Section &s = sections[sym.st_shndx];
      if (sym.st_value > s.header->sh_size) return fail("symbol '" + name + "' lies outside its section");
      address[i] = reinterpret_cast<uint64_t>(mem + s.offset + sym.st_value);
      if (ELF64_ST_BIND(sym.st_info) == STB_GLOBAL && (type == STT_FUNC || type == STT_OBJECT || type == STT_NOTYPE))
        object->symbols_[name] = mem + s.offset + sym.st_value;
    } else if (sym.st_shndx >= SHN_LORESERVE || type == STT_SECTION || type == STT_FILE) {
      if (sym.st_shndx == SHN_COMMON) return fail("common symbol '" + name + "' is not supported");
    }  // else: a symbol of a section not loaded (.eh_frame, debug): relocations against it are skipped below
  }
  // ---- relocations -------------------------------------------------------
  for (size_t i = 0; i < headers.size(); ++i) {
    const Elf64_Shdr &sh = headers[i];
    if (sh.sh_type == SHT_REL) return fail("SHT_REL relocations are not supported (expected RELA)");
    if (sh.sh_type != SHT_RELA) continue;
    if (sh.sh_info >= headers.size() || !sections[sh.sh_info].loaded) continue;  // e.g. .rela.eh_frame
    if (sh.sh_link != static_cast<size_t>(symtab - headers.data()) || sh.sh_entsize != sizeof(Elf64_Rela) ||
        !in_file(file, sh.sh_offset, sh.sh_size))
      return fail("bad relocation section " + std::to_string(i));
    const Section &target = sections[sh.sh_info];
    if (target.header->sh_type != SHT_PROGBITS) return fail("relocations against a NOBITS section");
    const size_t count = sh.sh_size / sizeof(Elf64_Rela);
    for (size_t k = 0; k < count; ++k) {
      Elf64_Rela r;
      std::memcpy(&r, file.data() + sh.sh_offset + k * sizeof r, sizeof r);
      const uint32_t type = ELF64_R_TYPE(r.r_info);
      const uint64_t sym = ELF64_R_SYM(r.r_info);
      if (type == R_X86_64_NONE) continue;
      const size_t width = type == R_X86_64_64 || type == R_X86_64_PC64 ? 8 : 4;
      if (sym >= num_symbols || r.r_offset > target.header->sh_size || width > target.header->sh_size - r.r_offset)
        return fail("relocation " + std::to_string(k) + " of section " + std::to_string(sh.sh_info) + " out of range");
      const Elf64_Sym &s = symbols[sym];
      if (address[sym] == 0 && sym != 0 && s.st_shndx != SHN_ABS &&
          !(s.st_shndx < headers.size() && sections[s.st_shndx].loaded))
        return fail("relocation " + std::to_string(k) + " refers to an unloaded or undefined symbol");
      char *place = mem + target.offset + r.r_offset;
      const uint64_t S = address[sym], P = reinterpret_cast<uint64_t>(place);
      const int64_t A = r.r_addend;
      switch (type) {
      case R_X86_64_64: {
        uint64_t v = S + static_cast<uint64_t>(A);
        std::memcpy(place, &v, 8);
        break;
      }
      case R_X86_64_PC64: {
        uint64_t v = S + static_cast<uint64_t>(A) - P;
        std::memcpy(place, &v, 8);
        break;
      }
      case R_X86_64_PC32:
      case R_X86_64_PLT32: {
        const int64_t v = static_cast<int64_t>(S + static_cast<uint64_t>(A) - P);
        if (v < INT32_MIN || v > INT32_MAX)
          return fail("a 32-bit PC-relative relocation does not reach its target (the object must use the large code model)");
        const int32_t v32 = static_cast<int32_t>(v);
        std::memcpy(place, &v32, 4);
        break;
      }
      default:
        return fail("unsupported relocation type " + std::to_string(type) + " (expected R_X86_64_64, PC64, PC32 or PLT32)");
      }
    }
  }
  // ---- protections: code read+execute, the rest read-only or read-write (W^X) --
  const size_t code_bytes = align_to(code_end, kPage);
  if (code_bytes > 0 && mprotect(mem, code_bytes, execute ? PROT_READ | PROT_EXEC : PROT_READ) != 0)
    return fail("mprotect of the code failed");
  bool writable = false;  // a kernel with mutable globals (.data/.bss) keeps its data pages writable
  for (const Section &s : sections)
    writable = writable || (s.loaded && !s.code && (s.header->sh_flags & SHF_WRITE));
  if (object->size_ > code_bytes &&
      mprotect(mem + code_bytes, object->size_ - code_bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ) != 0)
    return fail("mprotect of the constants failed");
  return object;
}

} // namespace kiln::runtime::artifact

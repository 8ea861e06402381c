// modules.cpp: cuModuleLoadData, cuModuleGetFunction and cuModuleUnload for PTX text. simcuda
// cannot run device code, so a PTX module's entries run the kernel registered under the same
// name (its "equivalent": simcuda_register_kernel, or the built-ins of equivalents.cpp, which are
// registered on the first load); the PTX only says which entries the module has and their
// parameter layout.
//
// Contract, after the CUDA driver API reference (cuModuleLoadData: "the image may be a cubin or
// fatbin as output by nvcc, or a NULL-terminated PTX"; cuModuleGetFunction: CUDA_ERROR_NOT_FOUND
// when the module has no function of that name):
// - the call needs an initialised driver and a current context (the module is that context's);
// - a null image is CUDA_ERROR_INVALID_VALUE; an ELF cubin or a fatbin (by their magic numbers)
//   is CUDA_ERROR_NO_BINARY_FOR_GPU (simcuda has no binary for its GPU: it runs no device code);
//   text without a `.version` directive, or with no `.entry`, is CUDA_ERROR_INVALID_PTX;
// - cuModuleGetFunction of a name the module does not declare is CUDA_ERROR_NOT_FOUND; of an
//   entry with no equivalent, or whose equivalent's parameter layout differs from the PTX's, it
//   is CUDA_ERROR_NOT_SUPPORTED (a limit of simcuda; SIMCUDA_DEBUG=1 says which);
// - a handle that is no loaded module is CUDA_ERROR_INVALID_HANDLE; functions of an unloaded
//   module stay launchable (they are the process-wide registrations).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "internal.hpp"

struct CUmod_st {
  struct Entry {
    std::string name;
    std::vector<size_t> offsets, sizes;
  };
  CUctx_st* ctx = nullptr;
  std::vector<Entry> entries;
};

namespace simcuda {
namespace {

std::mutex g_modules_mu;
std::vector<std::unique_ptr<CUmod_st>> g_modules;  // guarded by g_modules_mu

bool debug() {
  const char* v = std::getenv("SIMCUDA_DEBUG");
  return v != nullptr && *v != '\0' && *v != '0';
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The size in bytes of a PTX scalar type (.u64, .f32, .b8, .pred...), 0 when unknown.
size_t type_bytes(std::string_view t) {
  if (t.size() < 3 || t[0] != '.') return 0;
  const std::string_view bits = t.substr(2);
  if (bits == "8") return 1;
  if (bits == "16") return 2;
  if (bits == "32") return 4;
  if (bits == "64") return 8;
  return 0;
}

// One `.param` declaration: `.param .u64 name`, `.param .align 8 .b8 name[16]`, or
// `.param .u64 .ptr .global .align 1 name` (pointer attributes). Adds its offset and size.
bool parse_param(std::string_view decl, CUmod_st::Entry& e) {
  std::vector<std::string_view> words;
  for (size_t at = 0; at < decl.size();) {
    while (at < decl.size() && is_space(decl[at])) ++at;
    size_t end = at;
    while (end < decl.size() && !is_space(decl[end])) ++end;
    if (end > at) words.push_back(decl.substr(at, end - at));
    at = end;
  }
  if (words.size() < 3 || words[0] != ".param") return false;
  size_t align = 0, elem = 0;
  for (size_t i = 1; i + 1 < words.size(); ++i) {
    if (words[i] == ".align") align = std::strtoul(std::string(words[i + 1]).c_str(), nullptr, 10);
    if (elem == 0) elem = type_bytes(words[i]);
  }
  if (elem == 0) return false;
  size_t count = 1;
  const std::string_view name = words.back();
  if (const size_t open = name.find('['); open != std::string_view::npos)
    count = std::strtoul(std::string(name.substr(open + 1)).c_str(), nullptr, 10);
  if (align == 0) align = elem;
  size_t at = 0;
  if (!e.offsets.empty()) at = e.offsets.back() + e.sizes.back();
  at = (at + align - 1) / align * align;
  e.offsets.push_back(at);
  e.sizes.push_back(elem * count);
  return true;
}

// Every `.entry name( params )` of the PTX text; false when the text is not PTX we can read.
bool parse_ptx(std::string_view ptx, std::vector<CUmod_st::Entry>& out) {
  if (ptx.find(".version") == std::string_view::npos) return false;
  for (size_t at = ptx.find(".entry"); at != std::string_view::npos; at = ptx.find(".entry", at + 6)) {
    size_t name_at = at + 6;
    while (name_at < ptx.size() && is_space(ptx[name_at])) ++name_at;
    const size_t open = ptx.find('(', name_at);
    const size_t close = ptx.find(')', open == std::string_view::npos ? name_at : open);
    if (open == std::string_view::npos || close == std::string_view::npos) return false;
    std::string_view name = ptx.substr(name_at, open - name_at);
    while (!name.empty() && is_space(name.back())) name.remove_suffix(1);
    if (name.empty()) return false;
    CUmod_st::Entry e;
    e.name = std::string(name);
    std::string_view params = ptx.substr(open + 1, close - open - 1);
    for (size_t p = 0; p < params.size();) {
      size_t comma = params.find(',', p);
      if (comma == std::string_view::npos) comma = params.size();
      std::string_view decl = params.substr(p, comma - p);
      bool blank = true;
      for (char c : decl) blank = blank && is_space(c);
      if (!blank && !parse_param(decl, e)) return false;
      p = comma + 1;
    }
    out.push_back(std::move(e));
  }
  return !out.empty();
}

bool is_binary_image(const void* image) {
  if (strnlen(static_cast<const char*>(image), 4) < 4) return false;  // both magics hold no zero byte
  const auto* b = static_cast<const unsigned char*>(image);
  const bool elf = b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F';
  std::uint32_t magic = 0;
  std::memcpy(&magic, b, sizeof magic);
  const bool fatbin = magic == 0xBA55ED50u || magic == 0x466243B1u;  // fatbin data / fatbin wrapper
  return elf || fatbin;
}

CUmod_st* live_module(CUmodule m) {
  for (const auto& p : g_modules)
    if (p.get() == m) return p.get();
  return nullptr;
}

// The registered kernel named `name` whose layout is the entry's, or null (with the reason
// under SIMCUDA_DEBUG).
CUfunc_st* equivalent_of(const CUmod_st::Entry& e) {
  Driver& dr = driver();
  std::lock_guard<std::mutex> lock(dr.kernels_mu);
  for (const auto& k : dr.kernels) {
    if (k->name != e.name) continue;
    if (k->param_offsets == e.offsets && k->param_sizes == e.sizes) return k.get();
    if (debug()) std::fprintf(stderr, "simcuda: %s: its equivalent's parameter layout differs from the PTX's\n", e.name.c_str());
    return nullptr;
  }
  if (debug()) std::fprintf(stderr, "simcuda: %s: no equivalent is registered (simcuda runs no PTX)\n", e.name.c_str());
  return nullptr;
}

}  // namespace
}  // namespace simcuda

using namespace simcuda;

extern "C" {

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (is_binary_image(image)) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  auto m = std::make_unique<CUmod_st>();
  m->ctx = current_ctx();
  if (!parse_ptx(static_cast<const char*>(image), m->entries)) return CUDA_ERROR_INVALID_PTX;
  register_builtin_equivalents();
  std::lock_guard<std::mutex> lock(g_modules_mu);
  *module = m.get();
  g_modules.push_back(std::move(m));
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUmod_st::Entry entry;
  {
    std::lock_guard<std::mutex> lock(g_modules_mu);
    const CUmod_st* m = live_module(hmod);
    if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    const CUmod_st::Entry* found = nullptr;
    for (const CUmod_st::Entry& e : m->entries)
      if (e.name == name) found = &e;
    if (found == nullptr) return CUDA_ERROR_NOT_FOUND;
    entry = *found;
  }
  CUfunc_st* f = equivalent_of(entry);
  if (f == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  *hfunc = f;
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule hmod) {
  if (!driver_initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard<std::mutex> lock(g_modules_mu);
  for (auto it = g_modules.begin(); it != g_modules.end(); ++it)
    if (it->get() == hmod) {
      g_modules.erase(it);
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_HANDLE;
}

}  // extern "C"

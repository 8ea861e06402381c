// kernels.cpp: kernel names, layouts and declared write sets (see kernels.hpp).
#include "kernels.hpp"

#include <algorithm>
#include <cstdlib>

#include "config.hpp"
#include "capture.hpp"
#include "func_cache.hpp"

namespace capuchin::interpose::exec {

void KernelTable::declare_outputs(const char* text) {
  std::string s(text);
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(pos, end - pos);
    const std::size_t colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 >= item.size()) {
      log(LogLevel::Warn, "CAPUCHIN_KERNEL_OUTPUTS: '%s' is not name:param; ignored", item.c_str());
    } else {
      char* stop = nullptr;
      const unsigned long idx = std::strtoul(item.c_str() + colon + 1, &stop, 10);
      if (stop == nullptr || *stop != '\0' || idx > 1023) log(LogLevel::Warn, "CAPUCHIN_KERNEL_OUTPUTS: bad parameter in '%s'", item.c_str());
      else outputs_by_name_[item.substr(0, colon)] = static_cast<unsigned>(idx);
    }
    pos = end + 1;
  }
}

KernelInfo& KernelTable::info_slow(CUfunction f, const FuncLayout* layout) {
  auto [it, fresh] = funcs_.try_emplace(f);
  KernelInfo& ki = it->second;
  if (!fresh) return ki;
  // Once per function, and only when the capture's layout lacks what is needed: the same
  // driver answers that layout came from (a CUkernel's too, which cuFuncGetParamInfo refuses).
  std::vector<ParamSpec> specs;
  HandleParams h;
  auto ask_driver = [&] {
    if (!specs.empty()) return;
    specs.resize(1024);
    h = describe_handle(f, specs.data(), 1024);
  };
  if (layout != nullptr && layout->name != nullptr) {
    ki.name = layout->name;
  } else {
    ask_driver();
    if (h.name != nullptr) ki.name = h.name;
  }
  auto out = outputs_by_name_.find(ki.name);
  const bool declared = out != outputs_by_name_.end();
  if (!declared && !all_layouts_) return ki;
  ask_driver();
  for (int i = 0; i < h.count; ++i) {
    ki.offset.push_back(specs[static_cast<std::size_t>(i)].offset);
    ki.size.push_back(specs[static_cast<std::size_t>(i)].size);
    ki.buffer = std::max(ki.buffer, specs[static_cast<std::size_t>(i)].offset + specs[static_cast<std::size_t>(i)].size);
  }
  if (!declared) return ki;
  if (out->second < ki.offset.size() && ki.size[out->second] == sizeof(void*)) ki.output = static_cast<int>(out->second);
  else log(LogLevel::Warn, "CAPUCHIN_KERNEL_OUTPUTS: %s has no pointer parameter %u; its write set stays unknown",
           ki.name.c_str(), out->second);
  return ki;
}

}  // namespace capuchin::interpose::exec

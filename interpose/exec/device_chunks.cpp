// device_chunks.cpp: see device_chunks.hpp.
#include "device_chunks.hpp"

#include "config.hpp"

namespace capuchin::interpose::exec {

CUresult DeviceChunks::take(std::size_t span, std::uint64_t keep_idle, CUmemGenericAllocationHandle* out) {
  for (std::size_t i = idle_.size(); i-- > 0;) {
    if (idle_[i].span != span) continue;
    *out = idle_[i].handle;
    idle_bytes_ -= span;
    idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(i));
    ++reused_;
    return CUDA_SUCCESS;
  }
  trim(keep_idle);
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device_;
  CUresult r = api_->mem_create(out, span, &p, 0);
  // The device may hold less free memory than the budget says (memory the executor does not
  // serve, a budget above the device): idle chunks of other spans go, and it is asked again.
  if (r == CUDA_ERROR_OUT_OF_MEMORY && !idle_.empty()) {
    trim(0);
    r = api_->mem_create(out, span, &p, 0);
  }
  if (r == CUDA_SUCCESS) ++created_;
  return r;
}

void DeviceChunks::give(CUmemGenericAllocationHandle h, std::size_t span) {
  if (h == 0) return;
  if (idle_.size() == kMaxIdle) release_oldest();
  idle_.push_back(Idle{h, span});
  idle_bytes_ += span;
}

void DeviceChunks::trim(std::uint64_t keep_idle) {
  while (idle_bytes_ > keep_idle && !idle_.empty()) release_oldest();
}

void DeviceChunks::release_oldest() {
  const Idle oldest = idle_.front();
  idle_.erase(idle_.begin());
  idle_bytes_ -= oldest.span;
  if (CUresult r = api_->mem_release(oldest.handle); r != CUDA_SUCCESS)
    log(LogLevel::Warn, "executor: releasing an idle device chunk failed (CUresult %d)", static_cast<int>(r));
}

}  // namespace capuchin::interpose::exec

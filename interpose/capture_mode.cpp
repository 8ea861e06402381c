// capture_mode.cpp: see capture_mode.hpp.
#include "capture_mode.hpp"

#include <atomic>

#include "capture.hpp"
#include "real_api.hpp"

namespace capuchin::interpose {

namespace {

using ExchangeFn = CUresult (*)(CUstreamCaptureMode*);

// Not found is not remembered: before the driver is loaded nothing can be found.
ExchangeFn exchange_fn() {
  static std::atomic<ExchangeFn> fn{nullptr};
  if (ExchangeFn f = fn.load(std::memory_order_acquire)) [[likely]] return f;
  ExchangeFn f = reinterpret_cast<ExchangeFn>(driver_symbol("cuThreadExchangeStreamCaptureMode"));
  if (f != nullptr) fn.store(f, std::memory_order_release);
  return f;
}

}  // namespace

bool leave_global_capture_mode() {
  ExchangeFn f = exchange_fn();
  if (f == nullptr) return true;  // a driver before 10.1: no capture modes to mind
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
  return f(&m) == CUDA_SUCCESS;
}

RelaxedCaptureScope::RelaxedCaptureScope() {
  if (!any_capture_active()) [[likely]] return;
  ExchangeFn f = exchange_fn();
  previous_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  swapped_ = f != nullptr && f(&previous_) == CUDA_SUCCESS;
}

RelaxedCaptureScope::~RelaxedCaptureScope() {
  if (!swapped_) return;
  if (ExchangeFn f = exchange_fn(); f != nullptr) (void)f(&previous_);  // restores; cannot fail after the first swap
}

}  // namespace capuchin::interpose

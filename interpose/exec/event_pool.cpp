// event_pool.cpp: the pooled, reference-counted events (see event_pool.hpp).
#include "event_pool.hpp"

#include "config.hpp"

namespace capuchin::interpose::exec {

bool make_timing_pair(const Api& api, CUevent& a, CUevent& b) {
  if (api.event_create(&a, CU_EVENT_DEFAULT) != CUDA_SUCCESS) return false;
  if (api.event_create(&b, CU_EVENT_DEFAULT) == CUDA_SUCCESS) return true;
  if (api.event_destroy != nullptr) (void)api.event_destroy(a);  // best effort
  return false;
}

InContext::InContext(const Api& api, CUcontext ctx) : api_(api) {
  CUcontext current = nullptr;
  if (ctx == nullptr || api.ctx_get_current == nullptr || api.ctx_push == nullptr || api.ctx_pop == nullptr ||
      api.ctx_get_current(&current) != CUDA_SUCCESS || current == ctx)
    return;
  pushed_ = api.ctx_push(ctx) == CUDA_SUCCESS;
  failed_ = !pushed_;
}

InContext::~InContext() {
  CUcontext popped = nullptr;
  if (pushed_ && api_.ctx_pop(&popped) != CUDA_SUCCESS)
    log(LogLevel::Error, "executor: restoring the thread's own context failed");
}

// In the executor's context, whatever context the calling thread has current.
CUresult EventPool::create(CUevent* ev) const {
  const InContext own(*api_, ctx_);
  if (own.failed()) return CUDA_ERROR_INVALID_CONTEXT;
  return api_->event_create(ev, CU_EVENT_DISABLE_TIMING);
}

std::int32_t EventPool::take_slot() {
  if (free_.empty()) {
    CUevent ev = nullptr;
    if (const CUresult r = create(&ev); r != CUDA_SUCCESS) {
      if (!create_failed_logged_) log(LogLevel::Warn, "executor: cuEventCreate failed (CUresult %d): ordering by stream waits", static_cast<int>(r));
      create_failed_logged_ = true;
      return -1;
    }
    events_.push_back(ev);
    refs_.push_back(0);
    pending_.push_back(nullptr);
    seen_.push_back(0);
    free_.push_back(static_cast<std::int32_t>(events_.size() - 1));
  }
  return free_.back();
}

Ev EventPool::defer(CUstream s) {
  const std::int32_t i = take_slot();
  if (i < 0) return Ev{};
  free_.pop_back();
  refs_[static_cast<std::size_t>(i)] = 1;
  fresh_recording(i);
  // A deferred event is marked by the stream it waits for; the legacy default stream's handle
  // is null, which means "recorded": name it by CU_STREAM_LEGACY instead (the same stream).
  pending_[static_cast<std::size_t>(i)] = s != nullptr ? s : CU_STREAM_LEGACY;
  return Ev{i};
}

void EventPool::settle(Ev e) const {
  if (!e) return;
  CUstream& s = pending_[static_cast<std::size_t>(e.i)];
  if (s == nullptr) return;
  const CUstream on = s;
  s = nullptr;
  // In the executor's context: the legacy stream is the current context's, and the event is ours.
  const InContext own(*api_, ctx_);
  const CUresult r = own.failed() ? CUDA_ERROR_INVALID_CONTEXT : api_->event_record(events_[static_cast<std::size_t>(e.i)], on);
  if (r == CUDA_SUCCESS) return;
  // The stream is gone or capturing without the owner having settled it first: nothing can
  // mark its work any more, so the host waits for the whole context (the uses are then done).
  if (!settle_failed_logged_)
    log(LogLevel::Warn, "executor: recording a deferred event on stream %p failed (CUresult %d): waiting for the "
        "whole context instead", static_cast<void*>(on), static_cast<int>(r));
  settle_failed_logged_ = true;
  if (api_->ctx_synchronize == nullptr || api_->ctx_synchronize() != CUDA_SUCCESS)
    log(LogLevel::Error, "executor: waiting for the context failed: a tensor used on stream %p may move before that use "
        "ends", static_cast<void*>(on));
}

Ev EventPool::record(CUstream s) {
  const std::int32_t i = take_slot();
  if (i < 0) return Ev{};
  if (const CUresult r = api_->event_record(events_[static_cast<std::size_t>(i)], s); r != CUDA_SUCCESS) {
    log(LogLevel::Warn, "executor: cuEventRecord failed (CUresult %d)", static_cast<int>(r));
    return Ev{};  // the slot stays free
  }
  free_.pop_back();
  refs_[static_cast<std::size_t>(i)] = 1;
  fresh_recording(i);
  return Ev{i};
}

bool EventPool::done(Ev e) const {
  if (!e) return true;
  const auto at = static_cast<std::size_t>(e.i);
  if ((seen_[at] & kComplete) != 0) {
    ++calls_saved_;
    return true;
  }
  // Deferred: it stands for work forwarded on its stream so far, all of it done when the stream
  // is idle. Asked so, it stays deferred: recorded now and queried at once, it would read as in
  // flight until the device reached it, however long the stream had been idle.
  if (const CUstream s = pending_[static_cast<std::size_t>(e.i)]; s != nullptr && api_->stream_query != nullptr) {
    const InContext own(*api_, ctx_);
    if (!own.failed() && api_->stream_query(s) == CUDA_SUCCESS) return true;
  }
  settle(e);
  // NOT_READY means in flight; any other error is a broken context the job's next call reports,
  // and waiting would not help: treat it as done. Recorded now (settled), this recording stays
  // the slot's until its last reference goes, so "complete" holds for every later ask; a
  // deferred event seen complete through its idle stream is not remembered (above): later uses
  // may still be marked with it.
  const bool complete = api_->event_query(events_[at]) != CUDA_ERROR_NOT_READY;
  if (complete) seen_[at] |= kComplete;
  return complete;
}

CUresult EventPool::order(CUstream s, Ev e) const {
  if (!e) return CUDA_SUCCESS;
  const auto at = static_cast<std::size_t>(e.i);
  const std::uint8_t own = own_bit(s);
  if ((seen_[at] & (kComplete | own)) != 0) {
    ++calls_saved_;
    return CUDA_SUCCESS;
  }
  settle(e);
  const CUresult r = api_->stream_wait_event(s, events_[at], 0);
  if (r == CUDA_SUCCESS) seen_[at] |= own;
  return r;
}

}  // namespace capuchin::interpose::exec

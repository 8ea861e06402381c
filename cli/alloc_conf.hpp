// alloc_conf.hpp: the PyTorch allocator setting `capuchin run` hands the job.
//
// capuchin's executor serves only allocations that reach CUDA's allocator one tensor at a time
// (cudaMalloc / cuMemAlloc / the stream-ordered ones); PyTorch's native caching allocator
// packs tensors into its own segments, and with expandable_segments maps them itself with
// cuMemMap, which the executor never serves (the budget would be silently ignored). So the job
// always runs with backend:cudaMallocAsync, whatever the user's PYTORCH_CUDA_ALLOC_CONF (or
// PyTorch 2.9's PYTORCH_ALLOC_CONF) says.
//
// Contract: merge_pytorch_alloc_conf takes the user's value (nullopt or blank: unset) and
// returns the value the job gets plus one note per change, for the user to read:
// - the value is split at commas outside [...] (roundup_power2_divisions' lists) into
//   `key:value` options (spaces around keys and values dropped, empty options dropped);
// - `backend` becomes backend:cudaMallocAsync, first; a backend other than that is noted;
// - options that only configure the native caching allocator (max_split_size_mb,
//   max_non_split_rounding_mb, garbage_collection_threshold, roundup_power2_divisions,
//   expandable_segments, release_lock_on_cudamalloc / _hipmalloc,
//   graph_capture_record_stream_reuse) are dropped, named in one note;
// - every other option (pinned_use_cuda_host_register, pinned_num_register_threads,
//   pinned_use_background_threads, per_process_memory_fraction, and keys we do not know) is
//   kept verbatim, in order: PyTorch judges them as it would without capuchin;
// - a value whose brackets do not balance cannot be split safely: it is returned unchanged,
//   with a note that PyTorch will reject it (the job then fails as it would without us).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace capuchin::cli {

struct MergedAllocConf {
  std::string value;
  std::vector<std::string> notes;
};

MergedAllocConf merge_pytorch_alloc_conf(std::optional<std::string_view> user);

}  // namespace capuchin::cli

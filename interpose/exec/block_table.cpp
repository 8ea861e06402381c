// block_table.cpp: finding blocks by address (see block.hpp).
#include <algorithm>

#include "block.hpp"

namespace capuchin::interpose::exec {

namespace {
bool base_before(const std::pair<CUdeviceptr, Block*>& e, CUdeviceptr addr) { return e.first < addr; }
}  // namespace

Block* BlockTable::by_addr(std::uint64_t addr) const {
  // Most candidate words of a launch are not ours (scalars, other memory): one range check.
  if (addr < lowest_ || addr >= highest_end_) return nullptr;
  if (auto exact = at_base_.find(addr); exact != at_base_.end()) return exact->second->live ? exact->second : nullptr;
  auto it = std::lower_bound(by_base_.begin(), by_base_.end(), addr, base_before);  // first base >= addr
  if (it == by_base_.begin()) return nullptr;
  Block* b = std::prev(it)->second;
  return b->live && addr < b->base + b->bytes ? b : nullptr;
}

void BlockTable::add_live(Block* b) {
  by_id_[b->id] = b;
  b->live = true;
  if (b->indexed) return;
  by_base_.insert(std::lower_bound(by_base_.begin(), by_base_.end(), b->base, base_before), {b->base, b});
  at_base_[b->base] = b;
  b->indexed = true;
  // A reused block may be asked for more bytes than at first, up to its span.
  lowest_ = std::min(lowest_, b->base);
  highest_end_ = std::max(highest_end_, b->base + b->span);
}

void BlockTable::remove_live(Block* b) {
  by_id_.erase(b->id);
  b->live = false;
}

void BlockTable::forget(Block* b) {
  if (b->live) remove_live(b);
  if (!b->indexed) return;
  auto it = std::lower_bound(by_base_.begin(), by_base_.end(), b->base, base_before);
  if (it != by_base_.end() && it->second == b) by_base_.erase(it);
  at_base_.erase(b->base);
  b->indexed = false;
  // (lowest_ and highest_end_ stay: a wider range only costs a search.)
}

}  // namespace capuchin::interpose::exec

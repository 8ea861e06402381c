// block_table.cpp: finding blocks by address (see block.hpp).
#include <algorithm>
#include <bit>

#include "block.hpp"

namespace capuchin::interpose::exec {

namespace {
bool base_before(const std::pair<CUdeviceptr, Block*>& e, CUdeviceptr addr) { return e.first < addr; }
}  // namespace

void BaseIndex::insert(CUdeviceptr base, Block* b) {
  if (2 * (count_ + 1) > slots_.size()) grow();  // at most half full: short probe runs
  std::size_t i = slot(base);
  while (slots_[i].base != 0 && slots_[i].base != base) i = (i + 1) & mask_;
  if (slots_[i].base == 0) ++count_;
  slots_[i] = Slot{base, b};
}

void BaseIndex::erase(CUdeviceptr base) {
  if (count_ == 0) return;
  std::size_t i = slot(base);
  while (slots_[i].base != base) {
    if (slots_[i].base == 0) return;
    i = (i + 1) & mask_;
  }
  // Backward-shift deletion: later entries of the run move up so no lookup stops early.
  for (std::size_t j = (i + 1) & mask_; slots_[j].base != 0; j = (j + 1) & mask_) {
    const std::size_t home = slot(slots_[j].base);
    // j's entry may fill the hole at i when its home is not cyclically in (i, j].
    const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    slots_[i] = slots_[j];
    i = j;
  }
  slots_[i] = Slot{};
  --count_;
}

void BaseIndex::grow() {
  std::vector<Slot> old;
  old.swap(slots_);
  const std::size_t n = old.empty() ? 64 : 2 * old.size();
  slots_.assign(n, Slot{});
  mask_ = n - 1;
  shift_ = 64 - static_cast<unsigned>(std::countr_zero(n));
  count_ = 0;
  for (const Slot& s : old)
    if (s.base != 0) insert(s.base, s.block);
}

Block* BlockTable::by_addr(std::uint64_t addr) const {
  // Most candidate words of a launch are not ours (scalars, other memory): one range check
  // against the lowest base and the highest block's end (blocks never overlap; a reused block
  // may be asked for more bytes than at first, up to its span).
  if (by_base_.empty() || addr < by_base_.front().first) return nullptr;
  if (const Block* last = by_base_.back().second; addr >= last->base + last->span) return nullptr;
  if (Block* exact = at_base_.find(addr)) return exact->live ? exact : nullptr;
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
  at_base_.insert(b->base, b);
  b->indexed = true;
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
}

}  // namespace capuchin::interpose::exec

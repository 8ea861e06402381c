// block_table.cpp: finding blocks by address (see block.hpp).
#include "block.hpp"

namespace capuchin::interpose::exec {

Block* BlockTable::by_addr(std::uint64_t addr) const {
  if (auto exact = at_base_.find(addr); exact != at_base_.end()) return exact->second;
  auto it = by_base_.upper_bound(addr);
  if (it == by_base_.begin()) return nullptr;
  --it;
  Block* b = it->second;
  return addr < b->base + b->bytes ? b : nullptr;
}

void BlockTable::add_live(Block* b) {
  by_id_[b->id] = b;
  by_base_[b->base] = b;
  at_base_[b->base] = b;
}

void BlockTable::remove_live(Block* b) {
  by_id_.erase(b->id);
  by_base_.erase(b->base);
  at_base_.erase(b->base);
}

}  // namespace capuchin::interpose::exec

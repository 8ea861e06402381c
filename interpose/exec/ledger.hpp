// ledger.hpp: the executor's account of device memory: the bytes its blocks hold on the
// device against the budget, which blocks hold them, and those blocks indexed for the victim
// search (victim_index.hpp).
//
// Contract: `where` changes only through move(), which keeps resident() equal to the spans of
// the listed blocks, lists exactly the blocks whose `where` is charged(), and indexes those on
// the device or coming in; last_tick changes only through touch() and touch_all(). Under the
// executor's lock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "block.hpp"
#include "device_chunks.hpp"
#include "victim_index.hpp"

namespace capuchin::interpose::exec {

// The bytes held on the device and the budget they are held to, and the blocks holding them:
// victims are looked for among those only (a shortage scanned every live block, most of them
// on the host under pressure), through their index by span and last use (victims()). A block
// leaves the list when its memory leaves the device or is given back (forget), before it is
// deleted.
class Ledger {
 public:
  static constexpr std::uint32_t kUnlisted = ~0u;
  std::uint64_t budget = 0;
  std::uint64_t resident() const { return resident_; }
  std::uint64_t peak() const { return peak_; }
  // From now on the peak counts anew (a budget that applies only now: CAPUCHIN_BUDGET=Nx).
  void restart_peak() { peak_ = resident_; }
  // The most held since restart_window() (an iteration's peak: the executor's standby).
  std::uint64_t window_peak() const { return window_peak_; }
  void restart_window() { window_peak_ = resident_; }
  bool fits(std::uint64_t more) const { return resident_ + more <= budget; }
  void move(Block& b, Where to) {
    if (charged(b.where) && !charged(to)) resident_ -= b.span, unlist(b);
    if (!charged(b.where) && charged(to)) {
      resident_ += b.span, peak_ = std::max(peak_, resident_), window_peak_ = std::max(window_peak_, resident_), list(b);
      if (idle_ != nullptr && idle_->idle_bytes() != 0) trim_idle();
    }
    b.where = to;
    // Indexed while it may move out: a block moving out stays charged, but no shortage can
    // take it, and at the head of its group (the least recently used) every search would pass it.
    if (to == Where::Device || to == Where::Incoming) victims_.add(b);
    else victims_.remove(b);
  }
  // Idle device chunks (device_chunks.hpp) are device memory not charged here; with managed
  // moves out still in flight (`outs`: bytes uncharged, not yet gone from the device) they stay
  // within the budget: every charge, and trim_idle() after the budget changed, releases what
  // is past it.
  void watch_idle(DeviceChunks* idle, const std::uint64_t* outs) {
    idle_ = idle;
    outs_ = outs;
  }
  // The idle bytes a new charge of `more` leaves room for.
  std::uint64_t idle_room(std::uint64_t more) const {
    const std::uint64_t used = resident_ + (outs_ != nullptr ? *outs_ : 0) + more;
    return used < budget ? budget - used : 0;
  }
  void trim_idle() {
    if (idle_ != nullptr) idle_->trim(idle_room(0));
  }
  void forget(Block& b) {  // a block given back to the driver (a second forget changes nothing)
    if (listed(b)) resident_ -= b.span, unlist(b);
  }
  // The blocks whose memory is on the device (charged), live or cached, in no useful order.
  const std::vector<Block*>& charged_blocks() const { return charged_; }
  // The same blocks by span and last use.
  const VictimIndex& victims() const { return victims_; }
  void index_victims() { victims_.start(charged_); }  // from now on (VictimIndex::start)
  // b was used at `tick`: the only way b.last_tick changes but touch_all.
  void touch(Block& b, std::uint64_t tick) {
    b.last_tick = tick;
    victims_.touched(b);
  }
  // Every block for_each(f) visits (calling f(Block&)) was used at `tick` (the executor's clock
  // stood still). One sort per span, not a walk per block: the blocks come in no useful order.
  template <class ForEach>
  void touch_all(ForEach&& for_each, std::uint64_t tick) {
    for_each([&](Block& b) { b.last_tick = tick; });
    victims_.reorder();
  }
  // Whether b is still listed: only a block forgotten or never charged may be deleted.
  static bool listed(const Block& b) { return b.charged_slot != kUnlisted; }

 private:
  void list(Block& b) {
    b.charged_slot = static_cast<std::uint32_t>(charged_.size());
    charged_.push_back(&b);
  }
  void unlist(Block& b) {
    if (!listed(b)) return;
    Block* last = charged_.back();
    charged_[b.charged_slot] = last;
    last->charged_slot = b.charged_slot;
    charged_.pop_back();
    b.charged_slot = kUnlisted;
    victims_.remove(b);
  }
  std::uint64_t resident_ = 0, peak_ = 0, window_peak_ = 0;
  std::vector<Block*> charged_;
  VictimIndex victims_;
  DeviceChunks* idle_ = nullptr;
  const std::uint64_t* outs_ = nullptr;
};

}  // namespace capuchin::interpose::exec

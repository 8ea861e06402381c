// budget.hpp: the one way a device-memory budget is written, for every command and variable
// (capuchin run --budget, CAPUCHIN_BUDGET, set-budget, sim / sweep / report / export --budget).
//
//   a size   "40GiB", "500MB", "268435456" (a plain integer is bytes)
//   "60%"    of the device's memory (the GPU the job runs on; for sim, the GPU profile's)
//   "0.5x"   of the job's natural peak: the most bytes its iteration holds without capuchin.
//            A live job knows it once an iteration has been learned; until then no budget
//            applies (the executor serves allocations and moves nothing), which every command
//            that takes one says.
//
// Contract: parse_budget accepts exactly these forms and rejects everything else with a
// message that names the bad text and the three forms; a bare decimal ("0.5") and a bare
// integer under 1024 ("1") are ambiguous between them and rejected. Percentages lie in
// (0, 100], multiples in (0, 1] (a budget above the natural peak saves nothing).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "capuchin/expected.hpp"

namespace capuchin {

struct Budget {
  enum class Kind : std::uint8_t { Bytes, OfDevice, OfPeak };
  Kind kind = Kind::Bytes;
  std::uint64_t bytes = 0;  // Kind::Bytes
  double ratio = 0;         // OfDevice: the fraction (60% -> 0.6); OfPeak: the multiple

  // The bytes this budget means, given what is known (0: unknown). Returns 0 when the
  // reference it needs is unknown, never a guess.
  std::uint64_t resolve(std::uint64_t device_bytes, std::uint64_t natural_peak_bytes) const;
  bool needs_peak() const { return kind == Kind::OfPeak; }
  // "40.0 GiB", "60% of the device", "0.5x the natural peak": for messages and tables.
  std::string describe() const;
};

Expected<Budget> parse_budget(std::string_view text);

// What every --budget option's help says.
inline constexpr const char* kBudgetHelp =
    "a size (40GiB, 500MB; a plain integer is bytes), a share of the device's memory (60%), or a multiple of the "
    "job's natural peak (0.5x)";

}  // namespace capuchin

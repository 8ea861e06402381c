// abi_table_test.cpp: driver_hooks.def against the CUDA headers it was written for.
//
// Each hooked cuGetProcAddress name must have, for every cudaVersion from its first entry on,
// exactly one entry (ranges contiguous, the newest open-ended), and cudaTypedefs.h must declare
// no ABI of a hooked name newer than the newest one we wrap: a header bump that adds one (as
// CUDA 13 added PFN_cuCtxSynchronize_v13000(CUcontext)) fails here until the table has a
// wrapper of that prototype. (That each entry's prototype is exactly the header's is a
// static_assert in driver_hooks.cpp.)
#include <cuda.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "driver_hooks.def"

namespace {

struct Abi {
  std::string name;  // cuGetProcAddress name
  int since, until;
};

std::vector<Abi> hooked_abis() {
#define CAPUCHIN_ROW(id, base, exported, since, until, params, fwd) Abi{"cu" #base, since, until},
  return {CAPUCHIN_DRIVER_HOOKS(CAPUCHIN_ROW)};
#undef CAPUCHIN_ROW
}

// The newest version of each name's PFN_cu<Name>_v<version> typedef in cudaTypedefs.h. The
// per-thread twins (PFN_..._v7000_ptsz) are left out: they share their base ABI's prototype.
std::map<std::string, int> newest_header_abis() {
  std::ifstream in(CAPUCHIN_CUDA_TYPEDEFS);
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  std::map<std::string, int> newest;
  const std::regex pfn(R"(\*\s*PFN_(cu[A-Za-z0-9]+)_v([0-9]+)\s*\))");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), pfn); it != std::sregex_iterator(); ++it) {
    int& v = newest[(*it)[1].str()];
    v = std::max(v, std::stoi((*it)[2].str()));
  }
  return newest;
}

TEST(AbiTable, HeaderIsParsed) {
  const auto header = newest_header_abis();
  ASSERT_GT(header.size(), 300u) << CAPUCHIN_CUDA_TYPEDEFS;
  EXPECT_EQ(header.at("cuMemAlloc"), 3020);
  EXPECT_EQ(header.at("cuCtxSynchronize"), 13000);
  EXPECT_EQ(header.at("cuLaunchKernel"), 4000);  // not the v7000_ptsz twin
}

TEST(AbiTable, NoHookedNameHasANewerAbiInTheHeader) {
  const auto header = newest_header_abis();
  std::map<std::string, int> newest_wrapped;
  for (const Abi& a : hooked_abis()) newest_wrapped[a.name] = std::max(newest_wrapped[a.name], a.since);
  ASSERT_FALSE(newest_wrapped.empty());
  for (const auto& [name, wrapped] : newest_wrapped) {
    const auto h = header.find(name);
    ASSERT_NE(h, header.end()) << name << " is hooked but cudaTypedefs.h has no PFN_" << name << "_v*";
    EXPECT_LE(h->second, wrapped) << "cudaTypedefs.h has PFN_" << name << "_v" << h->second
                                  << ", newer than the newest ABI driver_hooks.def wraps (" << wrapped
                                  << "): add an entry of that prototype";
  }
}

TEST(AbiTable, EachVersionGetsExactlyOneEntry) {
  std::map<std::string, std::vector<Abi>> by_name;
  for (const Abi& a : hooked_abis()) by_name[a.name].push_back(a);
  for (auto& [name, abis] : by_name) {
    std::sort(abis.begin(), abis.end(), [](const Abi& x, const Abi& y) { return x.since < y.since; });
    for (std::size_t i = 0; i < abis.size(); ++i) {
      EXPECT_LT(abis[i].since, abis[i].until) << name;
      const int next = i + 1 < abis.size() ? abis[i + 1].since : CAPUCHIN_ABI_OPEN;
      EXPECT_EQ(abis[i].until, next) << name << ": entry from " << abis[i].since << " must end where the next begins";
    }
  }
  ASSERT_EQ(by_name.at("cuCtxSynchronize").size(), 2u);
}

}  // namespace

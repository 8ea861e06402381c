// word_scan.hpp: finding the words of a launch's parameters that may be device pointers, fast,
// in by-value structs of kilobytes (PyTorch's multi-tensor lists: 28 KB, most of it element
// counts and block tables) as well as in a handful of pointers.
//
// Contract: skip_to_candidates(p, from, count, lo, span) reads words [from, count) of p (8-byte
// words, any alignment) 16 at a time and returns the first word of the first 16-word block
// holding a word w with w - lo < span (unsigned), or, when no whole block does, the first word
// after the last whole block (then the result + 16 > count). Words past the last whole block are
// never read: the caller scans them. No lock, no allocation, no system call (for the launch
// hook). AVX2 where the CPU has it (decided once, at load), else the same test word by word;
// both give the same answer (tests/interpose/word_scan_test.cpp).
#pragma once

#include <cstdint>

namespace capuchin::interpose {

std::uint32_t skip_to_candidates(const char* p, std::uint32_t from, std::uint32_t count, std::uint64_t lo,
                                 std::uint64_t span);

namespace word_scan_detail {  // the two implementations, for tests
bool cpu_has_avx2();
std::uint32_t skip_avx2(const char* p, std::uint32_t from, std::uint32_t count, std::uint64_t lo, std::uint64_t span);
std::uint32_t skip_scalar(const char* p, std::uint32_t from, std::uint32_t count, std::uint64_t lo, std::uint64_t span);
}  // namespace word_scan_detail

}  // namespace capuchin::interpose

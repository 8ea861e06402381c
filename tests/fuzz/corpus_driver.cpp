// Runs a fuzz target without libFuzzer: every file of a corpus directory, then seeded
// mutations of each (truncations, byte flips, insertions, splices), so ctest exercises the
// target on every build. Usage: corpus_driver DIR [MUTATIONS_PER_FILE]. A target may define
// fuzz_target_report(): called after the last input, it prints how far the inputs got and
// returns non-zero when they never reached what the target is for (the driver then fails).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" __attribute__((weak)) int fuzz_target_report();

namespace {

void run(const std::string& s) { LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(s.data()), s.size()); }

std::string mutate(const std::string& in, const std::vector<std::string>& corpus, std::mt19937_64& rng) {
  std::string s = in;
  const char* interesting[] = {"-1", "0", "18446744073709551615", "1e400", "\"\"", "[]", "{}", "null",
                               "\n", "\"op\"", ",", ":", "\xff", "\x1f\x8b", "99999999999999999999"};
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < n; ++k) {
    const std::size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 5) {
      case 0: s.resize(pos); break;
      case 1: if (!s.empty()) s[pos % s.size()] = static_cast<char>(rng()); break;
      case 2: s.insert(pos, interesting[rng() % (sizeof interesting / sizeof *interesting)]); break;
      case 3: if (!s.empty()) s.erase(pos % s.size(), 1 + rng() % 8); break;
      case 4: {
        const std::string& o = corpus[rng() % corpus.size()];
        const std::size_t from = o.empty() ? 0 : rng() % o.size();
        s.insert(pos, o.substr(from, 1 + rng() % 64));
        break;
      }
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [MUTATIONS_PER_FILE]\n", argv[0]);
    return 2;
  }
  const int mutations = argc > 2 ? std::atoi(argv[2]) : 200;
  std::vector<std::string> corpus;
  for (const auto& e : std::filesystem::directory_iterator(argv[1])) {
    if (!e.is_regular_file()) continue;
    std::ifstream f(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    corpus.push_back(ss.str());
  }
  if (corpus.empty()) {
    std::fprintf(stderr, "no corpus files in %s\n", argv[1]);
    return 2;
  }
  std::mt19937_64 rng(20261129);
  std::size_t runs = 0;
  for (const auto& s : corpus) {
    run(s);
    ++runs;
    for (int i = 0; i < mutations; ++i, ++runs) run(mutate(s, corpus, rng));
  }
  std::printf("corpus_driver: %zu inputs (%zu corpus files), no crash\n", runs, corpus.size());
  if (fuzz_target_report != nullptr && fuzz_target_report() != 0) {
    std::fprintf(stderr, "corpus_driver: the inputs never reached what the target tests (see its report above)\n");
    return 1;
  }
  return 0;
}

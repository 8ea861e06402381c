// `capuchin export memory-viz FILE... -o snapshot.pickle [--budget B] [--gpu G]`: the inputs
// (traces and decision logs, told apart by content, plain or gzip) as one PyTorch memory
// snapshot, one device per trace and per job process of the logs (memviz.hpp). The output
// appears whole or not at all: it is written to a temporary file beside it and renamed.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "capuchin/trace_repeat.hpp"
#include "commands.hpp"
#include "memviz.hpp"
#include "trace_load.hpp"

namespace capuchin::cli {
namespace {

using memviz::LoggedRecord;

// A file read whole through zlib (plain files as they are, gzip ones inflated).
Expected<std::string> read_text(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return make_error(fmt::format("{}: cannot open ({})", path, std::strerror(errno)));
  std::string data;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) data.append(buf, static_cast<std::size_t>(n));
  int code = 0;
  const std::string err = n < 0 ? gzerror(f, &code) : "";
  gzclose(f);
  if (n < 0) return make_error(fmt::format("{}: cannot read ({})", path, err));
  return data;
}

// Every record of a decision log, strictly: a line that is not one is an error.
Status read_decision_log(const std::string& file, const std::string& not_trace, std::vector<LoggedRecord>& out) {
  auto data = read_text(file);
  if (!data) return Unexpected{data.error()};
  std::uint64_t line = 0, records = 0;
  for (std::size_t at = 0; at < data->size();) {
    std::size_t nl = data->find('\n', at);
    if (nl == std::string::npos) nl = data->size();
    const std::string_view text = std::string_view(*data).substr(at, nl - at);
    at = nl + 1;
    ++line;
    if (text.empty()) continue;
    auto r = parse_decision_line(text);
    if (!r && records == 0 && not_trace == r.error().message)
      return make_error(fmt::format("{}:{}: neither a capuchin trace nor a decision log: {}", file, line, not_trace));
    if (!r && records == 0)
      return make_error(fmt::format("{}:{}: neither a capuchin trace ({}) nor a decision log ({})", file, line, not_trace, r.error().message));
    if (!r) return make_error(fmt::format("{}:{}: not a decision record: {}", file, line, r.error().message));
    ++records;
    out.push_back({std::move(*r), file, line});
  }
  if (records == 0) return make_error(fmt::format("{}: empty: neither a capuchin trace nor a decision log", file));
  return {};
}

struct Inputs {
  std::vector<std::pair<std::string, trace::Trace>> traces;
  std::vector<LoggedRecord> records;
};

Expected<Inputs> load_inputs(const std::vector<std::string>& files) {
  Inputs in;
  for (const auto& f : files) {
    auto r = trace::TraceReader::open(f);
    if (r) {
      auto t = trace::build_trace(*r);
      if (!t) return make_error(t.error().message());
      mark_learned_iterations(*t, f);
      in.traces.emplace_back(f, std::move(*t));
      continue;
    }
    const auto code = r.error().code;
    if (code == trace::TraceErrc::Io || code == trace::TraceErrc::Decompress || code == trace::TraceErrc::UnsupportedVersion)
      return make_error(r.error().message());
    const std::string why = code == trace::TraceErrc::BrokenJson ? "not JSON" : r.error().reason;
    if (auto st = read_decision_log(f, why, in.records); !st) return Unexpected{st.error()};
  }
  return in;
}

// The output's temporary sibling: created (or refused) before any work, removed unless kept.
class PendingFile {
 public:
  ~PendingFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
  }
  Status open(const std::string& out) {
    struct stat st {};
    if (::stat(out.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return make_error(fmt::format("cannot write {}: it is a directory", out));
    const std::string tmp = fmt::format("{}.tmp.{}", out, ::getpid());
    fd_ = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd_ < 0) return make_error(fmt::format("cannot write {}: {}", out, std::strerror(errno)));
    tmp_ = tmp;
    out_ = out;
    return {};
  }
  Status commit(const std::string& bytes) {
    for (std::size_t at = 0; at < bytes.size();) {
      const ssize_t n = ::write(fd_, bytes.data() + at, bytes.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return make_error(fmt::format("cannot write {}: {}", out_, std::strerror(errno)));
      at += static_cast<std::size_t>(n);
    }
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return make_error(fmt::format("cannot write {}: {}", out_, std::strerror(errno)));
    if (::rename(tmp_.c_str(), out_.c_str()) != 0) return make_error(fmt::format("cannot write {}: {}", out_, std::strerror(errno)));
    tmp_.clear();
    return {};
  }

 private:
  int fd_ = -1;
  std::string tmp_, out_;
};

struct MemvizOpts {
  std::vector<std::string> files;
  std::string out, gpu = "h200", budget;
  unsigned iters = 0;  // 0: each trace as it is
};

Status export_memviz(const MemvizOpts& o) {
  PendingFile file;
  if (auto st = file.open(o.out); !st) return st;
  auto in = load_inputs(o.files);
  if (!in) return Unexpected{in.error()};
  std::vector<memviz::Device> devices;
  std::vector<std::string> lines;
  for (auto& [name, t] : in->traces) {
    if (o.iters > 0) {
      auto r = trace::repeat_last_iteration(t, o.iters);
      if (!r) return make_error(fmt::format("--iters: {}", r.error().message));
      t = std::move(*r);
    }
    auto d = memviz::device_from_trace(t, name, o.gpu, o.budget);
    if (!d) return Unexpected{d.error()};
    if (!d->warning.empty()) fmt::print(stderr, "capuchin export memory-viz: warning: {}\n", d->warning);
    lines.push_back(d->summary);
    devices.push_back(std::move(d->device));
  }
  if (!in->records.empty()) {
    if (!o.budget.empty() && in->traces.empty())
      fmt::print(stderr, "capuchin export memory-viz: note: --budget applies to traces; a decision log shows what was done\n");
    auto logs = memviz::devices_from_log(in->records);
    for (std::size_t i = 0; i < logs.devices.size(); ++i) {
      lines.push_back(logs.summaries[i]);
      devices.push_back(std::move(logs.devices[i]));
    }
  }
  auto bytes = memviz::snapshot_pickle(devices);
  if (!bytes) return Unexpected{bytes.error()};
  if (auto st = file.commit(*bytes); !st) return st;
  fmt::print("wrote {} ({} bytes): open it at https://pytorch.org/memory_viz\n", o.out, bytes->size());
  for (std::size_t i = 0; i < lines.size(); ++i) fmt::print("  device {}: {}\n", i, lines[i]);
  return {};
}

constexpr const char* kFooter = R"(What the snapshot shows:
  A trace is replayed by the simulator on --gpu's profile (times are simulated, never
  measured). Without --budget: the trace's own allocations and frees. With --budget (a size,
  or a fraction of the trace's natural peak, as for `report` and `export perfetto`): what
  the capuchin policy would do at it. It plans from about the 4th iteration: --iters 8
  shows the planned steady state, prefetches included.
    swap-out      a free of the device copy, frame 'capuchin: swapped out to host'
    swap-in       an alloc, 'capuchin: prefetched' or 'capuchin: swapped in on demand'
    drop          a free, 'capuchin: dropped (freed, to be recomputed)'
    recompute     an alloc, 'capuchin: recomputed by <kernel>'
  Each block's frames name its producing kernel and the tensor (trace line, id, size, role,
  iteration). A run that cannot fit the budget ends with an 'oom' entry (and a warning).
  A decision log holds capuchin's actions, not the job's allocations: each job process
  (pid) is a device; a tensor first seen leaving the device is shown allocated from the
  start of that iteration, one on the device after its last record is shown released at
  the end of that iteration; the frames name the log line of each action.
  Devices: the traces first, then the logs' processes; the snapshot's 'capuchin' key says
  what each device shows. Blocks lie in one expandable segment per device, placed best-fit
  (a trace has no addresses: they are made up).)";

}  // namespace

void add_memviz_command(CLI::App& exp, int& exit_code) {
  auto o = std::make_shared<MemvizOpts>();
  CLI::App* mv = exp.add_subcommand(
      "memory-viz", "PyTorch CUDA memory snapshot (pickle) of a trace or decision log, for pytorch.org/memory_viz");
  mv->add_option("FILE", o->files, "recorded trace(s) and/or decision log(s)")->required();
  mv->add_option("-o,--output", o->out, "output snapshot file (e.g. snapshot.pickle)")->required();
  mv->add_option("--gpu", o->gpu, "GPU profile for a trace's simulated timing");
  mv->add_option("--budget", o->budget, "simulate the capuchin policy at this budget (bytes or fraction of the peak)");
  mv->add_option("--iters", o->iters, "a trace's set-up then its last iteration N times (as `sim --iters`): capuchin plans from about the 4th")
      ->check(CLI::Range(1u, 100000u));
  mv->footer(kFooter);
  mv->callback([&exit_code, o] {
    if (auto st = export_memviz(*o); !st) {
      fmt::print(stderr, "capuchin export memory-viz: {}\n", st.error().message);
      exit_code = 1;
      return;
    }
    exit_code = 0;
  });
}

}  // namespace capuchin::cli

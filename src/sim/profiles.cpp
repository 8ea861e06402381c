// GPU profiles (published peak figures and their sources), the math-mode rule, kernel and
// copy durations, and --budget parsing. See include/capuchin/sim.hpp.
//
// Every figure below is a vendor's published peak (datasheet), dense (no 2:4 sparsity).
// The simulator never uses a peak as is: it applies the one Efficiency set of
// include/capuchin/sim.hpp (compute 0.6, HBM 0.8, link 0.87, 4 us launch latency) to every
// profile alike. Link bandwidth is the theoretical rate of the host link each way; 0.87 of
// PCIe 5.0 x16's 63 GB/s is the ~55 GB/s usable that pinned copies reach on H100/H200.
// Copy latencies are assumptions (not published): 10 us per copy over PCIe, 5 us over
// NVLink-C2C.
//
// One profile is no GPU: `simcuda`, the reference device of the tests' device-free driver
// (tests/simcuda/include/simcuda/simcuda.h), so that `capuchin sim --gpu simcuda` predicts
// what a program on simcuda is charged. Its figures are simcuda's rates divided by the
// efficiencies above, so that after them the simulator charges exactly simcuda's rates.
#include <algorithm>
#include <cctype>
#include <cmath>

#include "capuchin/sim.hpp"

#include "capuchin/budget.hpp"
#include "capuchin/units.hpp"

namespace capuchin::sim {
namespace {

constexpr double T = 1e12;  // TFLOP/s
constexpr double G = 1e9;   // GB/s
constexpr std::uint64_t GiB = 1ull << 30;
constexpr double kPcie3 = 15.75 * G, kPcie4 = 31.5 * G, kPcie5 = 63.0 * G;  // x16, each way
// simcuda's cost model (tests/simcuda/include/simcuda/simcuda.h, not included: the core has no
// CUDA headers): SIMCUDA_FLOPS_PER_NS, SIMCUDA_DEVICE_BYTES_PER_NS,
// SIMCUDA_PINNED_BYTES_PER_NS, SIMCUDA_COPY_LATENCY_NS. tests/sim checks they agree.
constexpr double kSimcudaFlops = 10 * T, kSimcudaDeviceBytes = 900 * G, kSimcudaPinnedBytes = 25 * G;
constexpr double kSimcudaCopyLatency = 1.5e-6;
constexpr Efficiency kEff{};

const std::vector<GpuProfile>& table() {
  static const std::vector<GpuProfile> profiles{
      {"p100", "NVIDIA Tesla P100 PCIe 16 GB (HBM2), PCIe 3.0 x16 (Capuchin's era)", 16 * GiB, 9.3 * T, 0,
       18.7 * T /* FP16, no tensor cores, no BF16 */, 732 * G, kPcie3, 10e-6,
       "NVIDIA Tesla P100 PCIe datasheet: 9.3 TFLOPS FP32, 18.7 TFLOPS FP16, 732 GB/s HBM2; PCIe 3.0 x16 8 GT/s "
       "128b/130b = 15.75 GB/s each way"},
      {"titan-v", "NVIDIA TITAN V 12 GB (HBM2), PCIe 3.0 x16 (the GPU of DTR's measurements)", 12 * GiB, 14.9 * T, 0,
       110 * T /* FP16 tensor */, 652.8 * G, kPcie3, 10e-6,
       "NVIDIA TITAN V specifications: 5120 CUDA cores at 1455 MHz boost = 14.9 TFLOPS FP32, 110 TFLOPS tensor "
       "(FP16; no TF32/BF16), 12 GB HBM2 (3 stacks, 3072-bit) at 652.8 GB/s; PCIe 3.0 x16 15.75 GB/s each way"},
      {"v100", "NVIDIA V100 PCIe 32 GB (HBM2), PCIe 3.0 x16", 32 * GiB, 14 * T, 0, 112 * T /* FP16 tensor */, 900 * G,
       kPcie3, 10e-6,
       "NVIDIA V100 datasheet (PCIe): 14 TFLOPS FP32, 112 TFLOPS tensor (FP16; no TF32/BF16), 900 GB/s HBM2; "
       "PCIe 3.0 x16 15.75 GB/s each way"},
      {"a100", "NVIDIA A100 80 GB PCIe (HBM2e), PCIe 4.0 x16", 80 * GiB, 19.5 * T, 156 * T, 312 * T, 1935 * G, kPcie4,
       10e-6,
       "NVIDIA A100 datasheet (80GB PCIe): 19.5 TFLOPS FP32, 156 TFLOPS TF32, 312 TFLOPS BF16 (dense), 1,935 GB/s; "
       "PCIe 4.0 x16 31.5 GB/s each way"},
      {"h100", "NVIDIA H100 SXM 80 GB (HBM3), PCIe 5.0 x16 host link", 80 * GiB, 67 * T, 494.7 * T, 989.4 * T,
       3350 * G, kPcie5, 10e-6,
       "NVIDIA H100 datasheet (SXM): 67 TFLOPS FP32, 989 TFLOPS TF32 and 1,979 BF16 with sparsity (half dense), "
       "3.35 TB/s HBM3; PCIe 5.0 x16 63 GB/s each way"},
      {"h200", "NVIDIA H200 141 GB (HBM3e), PCIe 5.0 x16 host link", 141'000'000'000ull, 67 * T, 495 * T, 989 * T,
       4800 * G, kPcie5, 10e-6,
       "NVIDIA H200 datasheet: 141 GB HBM3e at 4.8 TB/s, 67 TFLOPS FP32, 989 TFLOPS TF32 / 1,979 BF16 with sparsity "
       "(495 / 989 dense); PCIe 5.0 x16 63 GB/s each way (~55 usable)"},
      {"gh200", "NVIDIA GH200 Grace Hopper 96 GB (HBM3), NVLink-C2C to Grace memory", 96 * GiB, 67 * T, 494 * T,
       989 * T, 4000 * G, 450 * G, 5e-6,
       "NVIDIA GH200 Grace Hopper Superchip datasheet: H100 compute (67 TFLOPS FP32, 494 TF32 / 989 BF16 dense), "
       "96 GB HBM3 at 4 TB/s; NVLink-C2C 900 GB/s total = 450 GB/s each way"},
      {"simcuda", "simcuda's reference device (tests/simcuda, no GPU): its virtual-time cost model", 16 * GiB,
       kSimcudaFlops / kEff.compute, 0, 0, kSimcudaDeviceBytes / kEff.memory, kSimcudaPinnedBytes / kEff.link,
       kSimcudaCopyLatency,
       "tests/simcuda/include/simcuda/simcuda.h: 10 TFLOP/s (one rate for every math mode), 900 GB/s device memory, "
       "25 GB/s pinned host<->device, 1.5 us per copy, 16 GiB default capacity. Figures here are those divided by "
       "the efficiencies every profile gets (compute 0.6, HBM 0.8, link 0.87), so the simulator charges exactly "
       "simcuda's rates: a copy 1.5 us + bytes / 25 GB/s. Not compensated (no profile figure for them): the 4 us "
       "launch latency the simulator adds to a roofline kernel (sim_trace_replay runs each kernel for the "
       "simulator's duration on this profile, simcuda's 2 us per launch inside it) and on a d2d copy (simcuda: "
       "1.5 us); pageable copies, 10 GB/s in simcuda, are charged at the pinned 25 GB/s"},
  };
  return profiles;
}

std::string lower(std::string_view s) {
  std::string r(s);
  std::transform(r.begin(), r.end(), r.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return r;
}

bool contains(std::string_view hay, std::string_view needle) { return hay.find(needle) != std::string_view::npos; }

}  // namespace

std::span<const GpuProfile> gpu_profiles() { return table(); }

Expected<GpuProfile> find_gpu_profile(std::string_view name) {
  const std::string n = lower(name);
  for (const auto& p : table())
    if (p.name == n) return p;
  std::string known;
  for (const auto& p : table()) known += (known.empty() ? "" : ", ") + p.name;
  return make_error("unknown GPU profile '" + std::string(name) + "' (known: " + known + ")");
}

// PyTorch's defaults for float32: cuDNN convolutions may use TF32
// (torch.backends.cudnn.allow_tf32 = True), matrix products may not
// (torch.backends.cuda.matmul.allow_tf32 = False since 1.12), so they run at the FP32 peak.
// In a 16-bit trace, convolutions and matrix products run on BF16/FP16 tensor cores.
// Everything else (elementwise, reductions, optimizer) runs at the FP32 peak, and is
// memory-bound in practice anyway.
MathMode kernel_math_mode(std::string_view kernel_name, std::string_view dtype) {
  const std::string n = lower(kernel_name);
  const std::string d = lower(dtype);
  const bool is_conv = contains(n, "conv");
  const bool half = contains(d, "bf16") || contains(d, "bfloat16") || contains(d, "float16") ||
                    contains(d, "half") || contains(d, "fp16");
  if (half) {
    const bool is_matmul = contains(n, "mm") || contains(n, "matmul") || contains(n, "gemm") || contains(n, "linear");
    return (is_conv || is_matmul) ? MathMode::BF16 : MathMode::FP32;
  }
  return is_conv ? MathMode::TF32 : MathMode::FP32;
}

std::string_view to_string(MathMode m) {
  switch (m) {
    case MathMode::FP32: return "fp32";
    case MathMode::TF32: return "tf32";
    case MathMode::BF16: return "bf16";
  }
  return "?";
}

std::vector<double> event_durations(const trace::Trace& t, const GpuProfile& gpu, const Efficiency& eff) {
  std::vector<double> d(t.events.size(), 0.0);
  // Math mode per distinct kernel name, once.
  std::vector<double> peak_by_name(t.names.size());
  for (std::size_t i = 0; i < t.names.size(); ++i) {
    double peak = gpu.fp32_flops;
    switch (kernel_math_mode(t.names[i], t.header.dtype)) {
      case MathMode::TF32: if (gpu.tf32_flops > 0) peak = gpu.tf32_flops; break;
      case MathMode::BF16: if (gpu.bf16_flops > 0) peak = gpu.bf16_flops; break;
      case MathMode::FP32: break;
    }
    peak_by_name[i] = peak * eff.compute;
  }
  const double hbm = gpu.hbm_bytes_per_s * eff.memory;
  const double link = gpu.link_bytes_per_s * eff.link;
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    const trace::Event& e = t.events[i];
    if (e.op == trace::Op::Kernel) {
      if (e.flags & trace::kHasDur) {
        d[i] = static_cast<double>(e.dur_ns) * 1e-9;
      } else {
        const double c = e.flops > 0 && peak_by_name[e.name] > 0 ? e.flops / peak_by_name[e.name] : 0.0;
        const double m = hbm > 0 ? static_cast<double>(e.bytes) / hbm : 0.0;
        d[i] = std::max(c, m) + eff.launch_latency_s;
      }
    } else if (e.op == trace::Op::Copy) {
      if (e.dir == trace::CopyDir::D2D)
        d[i] = eff.launch_latency_s + (hbm > 0 ? 2.0 * static_cast<double>(e.bytes) / hbm : 0.0);
      else
        d[i] = gpu.link_latency_s + (link > 0 ? static_cast<double>(e.bytes) / link : 0.0);
    }
  }
  return d;
}

Expected<std::uint64_t> resolve_budget(std::string_view text, std::uint64_t natural_peak_bytes, const GpuProfile& gpu) {
  auto b = parse_budget(text);
  if (!b) return make_error("--budget: " + b.error().message);
  const std::uint64_t bytes = b->resolve(gpu.memory_bytes, natural_peak_bytes);
  if (bytes == 0) return make_error(fmt::format("--budget '{}' ({}) resolves to 0 bytes", text, b->describe()));
  return bytes;
}

}  // namespace capuchin::sim

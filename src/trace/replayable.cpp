// replayable.cpp: the operators known not to be replayable (see replayable.hpp). Sources:
//   random  - operators that draw from the generator (`nondeterministic_seeded` in ATen's
//             native_functions.yaml): a replay draws other numbers unless it is given the very
//             same generator state, and the interposer sees a new launch shape each time;
//   side-effect - batch normalisation in training updates its running statistics in place,
//             which traces list as reads (the schema of native_batch_norm does not mark them);
//   atomics - operators torch.use_deterministic_algorithms documents as nondeterministic on
//             CUDA (accumulation by atomics): a replay may write other bits.
#include "capuchin/replayable.hpp"

#include <algorithm>
#include <array>

namespace capuchin::trace {

namespace {

struct Known {
  std::string_view op;
  const char* why;
};

// Sorted by name (binary search).
constexpr std::array kKnown = std::to_array<Known>({
    {"_batch_norm_impl_index", "side-effect"},
    {"_ctc_loss_backward", "atomics"},
    {"_embedding_bag", "atomics"},
    {"_embedding_bag_backward", "atomics"},
    {"_fused_dropout", "random"},
    {"_index_put_impl_", "atomics"},
    {"_native_batch_norm_legit", "side-effect"},
    {"_scaled_dot_product_efficient_attention", "random"},
    {"_scaled_dot_product_efficient_attention_backward", "atomics"},
    {"_scaled_dot_product_flash_attention", "random"},
    {"adaptive_avg_pool2d_backward", "atomics"},
    {"adaptive_avg_pool3d_backward", "atomics"},
    {"adaptive_max_pool2d_backward", "atomics"},
    {"alpha_dropout", "random"},
    {"avg_pool3d_backward", "atomics"},
    {"batch_norm", "side-effect"},
    {"bernoulli", "random"},
    {"bernoulli_", "random"},
    {"bincount", "atomics"},
    {"cauchy_", "random"},
    {"convolution_backward", "atomics"},
    {"cudnn_batch_norm", "side-effect"},
    {"cudnn_convolution_backward", "atomics"},
    {"dropout", "random"},
    {"embedding_backward", "atomics"},
    {"embedding_dense_backward", "atomics"},
    {"exponential", "random"},
    {"exponential_", "random"},
    {"feature_alpha_dropout", "random"},
    {"feature_dropout", "random"},
    {"fractional_max_pool2d_backward", "atomics"},
    {"fractional_max_pool3d_backward", "atomics"},
    {"geometric_", "random"},
    {"grid_sampler_2d_backward", "atomics"},
    {"grid_sampler_3d_backward", "atomics"},
    {"histc", "atomics"},
    {"index_add", "atomics"},
    {"index_add_", "atomics"},
    {"index_copy", "atomics"},
    {"index_copy_", "atomics"},
    {"index_put", "atomics"},
    {"index_put_", "atomics"},
    {"instance_norm", "side-effect"},
    {"kthvalue", "atomics"},
    {"log_normal_", "random"},
    {"max_pool3d_with_indices_backward", "atomics"},
    {"median", "atomics"},
    {"miopen_batch_norm", "side-effect"},
    {"multinomial", "random"},
    {"native_batch_norm", "side-effect"},
    {"native_dropout", "random"},
    {"nll_loss2d_forward", "atomics"},
    {"normal", "random"},
    {"normal_", "random"},
    {"put_", "atomics"},
    {"rand", "random"},
    {"rand_like", "random"},
    {"randint", "random"},
    {"randint_like", "random"},
    {"randn", "random"},
    {"randn_like", "random"},
    {"random_", "random"},
    {"randperm", "random"},
    {"reflection_pad1d_backward", "atomics"},
    {"reflection_pad2d_backward", "atomics"},
    {"reflection_pad3d_backward", "atomics"},
    {"replication_pad1d_backward", "atomics"},
    {"replication_pad2d_backward", "atomics"},
    {"replication_pad3d_backward", "atomics"},
    {"rrelu_with_noise", "random"},
    {"scatter_add", "atomics"},
    {"scatter_add_", "atomics"},
    {"scatter_reduce", "atomics"},
    {"scatter_reduce_", "atomics"},
    {"uniform", "random"},
    {"uniform_", "random"},
    {"upsample_bicubic2d_backward", "atomics"},
    {"upsample_bilinear2d_backward", "atomics"},
    {"upsample_linear1d_backward", "atomics"},
    {"upsample_nearest1d_backward", "atomics"},
    {"upsample_nearest2d_backward", "atomics"},
    {"upsample_nearest3d_backward", "atomics"},
    {"upsample_trilinear3d_backward", "atomics"},
});

constexpr bool sorted() {
  for (std::size_t i = 1; i < kKnown.size(); ++i)
    if (!(kKnown[i - 1].op < kKnown[i].op)) return false;
  return true;
}
static_assert(sorted(), "kKnown must stay sorted by name");

}  // namespace

const char* known_not_replayable(std::string_view name) {
  constexpr std::string_view prefix = "aten::";
  if (name.substr(0, prefix.size()) != prefix) return nullptr;
  name.remove_prefix(prefix.size());
  name = name.substr(0, name.find('.'));
  auto it = std::lower_bound(kKnown.begin(), kKnown.end(), name, [](const Known& k, std::string_view n) { return k.op < n; });
  return it != kKnown.end() && it->op == name ? it->why : nullptr;
}

bool replayable(const Trace& t, const Event& e) {
  if (e.op != Op::Kernel) return false;
  if ((e.flags & kHasReplay) != 0) return (e.flags & kReplayable) != 0;
  return e.name >= t.names.size() || known_not_replayable(t.names[e.name]) == nullptr;
}

}  // namespace capuchin::trace

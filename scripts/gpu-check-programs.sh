# shellcheck shell=bash disable=SC2154
# gpu-check-programs.sh (sourced): the CUDA programs scripts/gpu-check.sh needs (tests/gpu,
# bench/gpu; one place, for the carried build and for the check that a build has them all).
# shellcheck disable=SC2034
GPU_PROGRAMS=(gpu_info gpu_capture gpu_capture_static gpu_param_info gpu_graph gpu_executor gpu_infer gpu_cupti gpu_sync13 gpu_checksum
              bench_gpu_launch bench_gpu_bandwidth bench_gpu_calls)

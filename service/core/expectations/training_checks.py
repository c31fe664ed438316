"""Where a training step's kernel expectation was checked: published measured steps, each beside the expected step
the service composes for the same run from the device's kernel tables (tests/core/training/test_peft.py recomputes
every expected figure here and fails when one drifts).

MLPerf Training v5.0, closed division, llama2_70b_lora (mlcommons/training_results_v5.0, results/<system>/
llama2_70b_lora/result_0.txt): Llama 2 70B, LoRA rank 16 on the attention's projections, 8 sequences of 8,192 tokens
a step on 8 GPUs run as 8 data-parallel replicas (TP 1, PP 1, micro-batch 1) with fp8 matmuls. The measured step:
AMD's, the time between two block_stop events over the 48 steps between them (1,920 to 2,304 samples); NVIDIA's,
the log's own train_step_time. Composed without recomputation: AMD's recipe recomputes 21 of the 80 layers, which the
service cannot express (all or none), so the AMD figures are expected a little short.

MLPerf Training v5.0, closed division, llama31_405b (NVIDIA, results/eos-dfw_n<nodes>_ngc25.01_nemo/llama31_405b/
result_0.txt and the configs beside the implementation): Llama 3.1 405B pretraining on 8,192-token sequences, H100
SXM nodes of 8, TP 8 with sequence parallelism, PP 8 interleaved over 8 model chunks, CP 2, micro-batch 1, fp8
(Transformer Engine), the distributed optimizer with the gradient reduction overlapped; 512 GPUs at 288 micro-batches
a step (1,152 sequences), 2,048 at 72 (1,152), 8,192 at 24 (1,536). The measured step is the log's block summary
train_step_time.
"""

from __future__ import annotations

from typing import NamedTuple

MLPERF_LORA = "MLPerf Training v5.0 llama2_70b_lora"
MLPERF_405B = "MLPerf Training v5.0 llama31_405b"


class TrainingCheck(NamedTuple):
    run: str
    device_id: str
    submitter: str
    measured_step_s: float
    expected_step_s: float  # composed from the device's kernel tables, as the service answers it

    @property
    def error(self) -> float:
        return self.expected_step_s / self.measured_step_s - 1


TRAINING_CHECKS = (
    TrainingCheck(MLPERF_LORA, "nvidia-b200", "NVIDIA (1xNVIDIA HGX B200)", 1.5409, 1.286),
    TrainingCheck(MLPERF_LORA, "amd-mi300x", "AMD (8 x MI300X)", (1_745_907_345_791 - 1_745_907_156_406) / 48_000,
                  4.072),
    TrainingCheck(MLPERF_LORA, "amd-mi325x", "AMD (8 x MI325X)", (1_745_913_209_274 - 1_745_913_068_589) / 48_000,
                  3.994),
    TrainingCheck(MLPERF_405B, "nvidia-h100-sxm", "NVIDIA (512 x H100 SXM)", 55.2379, 55.808),
    TrainingCheck(MLPERF_405B, "nvidia-h100-sxm", "NVIDIA (2,048 x H100 SXM)", 14.6365, 14.086),
    TrainingCheck(MLPERF_405B, "nvidia-h100-sxm", "NVIDIA (8,192 x H100 SXM)", 5.2727, 4.814),
)

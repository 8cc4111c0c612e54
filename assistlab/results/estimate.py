"""A rough first guess at how long a comparison (or a workload) takes, before any run has been timed.

Pure arithmetic on what is known once the models are loaded: the prompt's length in tokens, the new tokens,
the number of runs and each model's parameter count. Decoding a token reads every weight once (memory bound)
plus a fixed cost per step for generate()'s own work; reading the prompt is compute bound (2 FLOPs per
parameter per token). The figures below are deliberately round; the first timed runs replace the guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import WARMUP_TOKENS

# What the words on the page say the first estimate comes from.
BASIS = "an estimate from the prompt length, new tokens, repetitions and the sizes of the models"


@dataclass(frozen=True)
class Machine:
    """Round figures for one kind of device: weight bytes read per second, FLOP/s, seconds per generate() step."""

    bytes_per_s: float
    flops: float
    step_s: float
    bytes_per_parameter: int


# A laptop or server CPU in float32; a data-centre GPU in bfloat16. Measured on this project's machines to
# within a factor of about two, which is all a first estimate claims.
MACHINES = {
    "cpu": Machine(bytes_per_s=20e9, flops=100e9, step_s=0.02, bytes_per_parameter=4),
    "cuda": Machine(bytes_per_s=1.5e12, flops=150e12, step_s=0.015, bytes_per_parameter=2),
}


def run_seconds(device_type: str, parameters: int, prompt_tokens: int, new_tokens: int) -> float:
    """One generate() call of a model with `parameters` weights: read the prompt, then write `new_tokens`."""
    machine = MACHINES.get(device_type, MACHINES["cpu"])
    prefill = 2.0 * parameters * max(1, prompt_tokens) / machine.flops
    per_token = machine.step_s + parameters * machine.bytes_per_parameter / machine.bytes_per_s
    return prefill + new_tokens * per_token


def _arm_seconds(device_type: str, target_parameters: int, assistant_parameters: list[int], prompt_tokens: int,
                 new_tokens: int) -> list[float]:
    """One run of each arm: plain, then each assisted arm as plain plus its assistant's own run (0: none)."""
    plain = run_seconds(device_type, target_parameters, prompt_tokens, new_tokens)
    return [plain] + [plain + (run_seconds(device_type, p, prompt_tokens, new_tokens) if p else 0.0)
                      for p in assistant_parameters]


# Characters per token of ordinary English text, for a prompt not yet tokenised (a workload's later prompts).
CHARS_PER_TOKEN = 4


def prompt_tokens_guess(turns) -> int:
    """A workload prompt's length in tokens before its tokenizer has read it: its turns' characters / 4."""
    return max(1, sum(len(turn) for turn in turns) // CHARS_PER_TOKEN)


def suite_seconds(
    device_type: str,
    target_parameters: int,
    assistant_parameters: list[int],
    prompt_tokens: list[int],
    new_tokens: int,
    warmup: int,
    repeats: int,
) -> float:
    """Every run of a workload: each arm's warm-up once (on the first prompt), then `repeats` runs of every arm
    on each prompt (`prompt_tokens`, one length per prompt). A workload makes no drafting-cost runs."""
    if not prompt_tokens:
        return 0.0
    first = _arm_seconds(device_type, target_parameters, assistant_parameters, prompt_tokens[0],
                         min(new_tokens, WARMUP_TOKENS))
    timed = sum(repeats * sum(_arm_seconds(device_type, target_parameters, assistant_parameters, tokens, new_tokens))
                for tokens in prompt_tokens)
    return warmup * sum(first) + timed


def comparison_seconds(
    device_type: str,
    target_parameters: int,
    assistant_parameters: list[int],
    prompt_tokens: int,
    new_tokens: int,
    warmup: int,
    repeats: int,
    max_time_s: float | None = None,
) -> float:
    """Every run of a comparison: plain and each assisted arm (`assistant_parameters`, 0 for an arm without an
    assistant model), warm-up (WARMUP_TOKENS each) and repetitions, then one drafting-cost run per assisted arm.

    An assisted arm is taken to cost what plain does plus its assistant's own runs: a first estimate does not
    guess how much drafting saves. With a time budget (`max_time_s`) the timed part is at most that.
    """
    arms = _arm_seconds(device_type, target_parameters, assistant_parameters, prompt_tokens, new_tokens)
    timed = repeats * sum(arms)
    if max_time_s is not None:
        timed = min(timed, max_time_s)
    warm = _arm_seconds(device_type, target_parameters, assistant_parameters, prompt_tokens,
                        min(new_tokens, WARMUP_TOKENS))
    return warmup * sum(warm) + timed + sum(arms[1:])

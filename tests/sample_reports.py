"""Hand-made reports with just the fields the history reads."""

from __future__ import annotations


def minimal_report(target="org/target", arms=(("org/draft", 1.5, 1.2, 1.7),), *, device="cpu", gpu=None,
                   status="complete", prompt="hello", n=3) -> dict:
    """A report with just the fields the history reads: arms (assistant, median, low, high) against plain."""
    report_arms = [{"name": "plain", "strategy": "plain", "spec": None, "new_tokens": [16] * n}]
    comparison = []
    for i, (assistant, median, low, high, *kind) in enumerate(arms):
        name = f"arm {i}"
        strategy = "assistant" if assistant else "prompt-lookup"
        spec = {"assistant": assistant, "num_assistant_tokens": 5, "prompt_lookup_num_tokens": 10,
                "num_assistant_tokens_schedule": "constant", "assistant_confidence_threshold": None,
                "early_exit_layer": None}
        report_arms.append({"name": name, "strategy": strategy, "spec": spec, "new_tokens": [16] * n})
        speed = {"median": median, "ci_low": low, "ci_high": high, "n": n}
        if kind:  # as stats.median_interval says it: (interval kind, true level)
            speed.update(interval=kind[0], level=kind[1])
        comparison.append({"arm": name, "speedup": speed, "acceptance_rate": 0.5, "outputs_identical": True})
    env = {"device": device, "dtype": "float32", "cpu_model": "Test CPU", "assistlab": "0.1", "transformers": "5.23.0",
           "models": {}}
    if gpu:
        env["gpu_name"] = gpu
    return {"schema": 1, "status": status, "message": "", "counted_repetitions": n,
            "request": {"target": target, "prompt": prompt, "max_new_tokens": 16}, "environment": env,
            "arms": report_arms, "comparison": comparison}

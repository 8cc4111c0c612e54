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


# The load phase of issue 27 as the contract (results/load.py) writes it: a plain and an ngram vLLM arm.
LOAD_PLAIN = "vllm plain"
LOAD_NGRAM = "vllm ngram (k=5, lookup 2-4)"
# (level, plain server tok/s, ngram server tok/s, ngram speedup (median, low, high)); ngram fails at 8.
LOAD_FIGURES = ((1, 20.0, 28.0, (1.40, 1.31, 1.52)), (2, 36.0, 44.0, (1.22, 1.08, 1.30)),
                (4, 60.0, 52.0, (0.87, 0.80, 0.95)), (8, 90.0, None, None))
NGRAM_FAILED = "The server stopped answering at 8 requests at once: connection refused."


def _percentiles(p50: float | None) -> dict:
    if p50 is None:
        return {"p50": None, "p90": None, "p99": None}
    return {"p50": p50, "p90": round(p50 * 1.3, 4), "p99": round(p50 * 1.6, 4)}


def _speedup(figures: tuple | None, rounds: int) -> dict | None:
    if figures is None:
        return None
    median, low, high = figures
    return {"median": median, "ci_low": low, "ci_high": high, "level": 0.9375, "n": rounds,
            "interval": "order-statistic"}


def load_section(plain=LOAD_PLAIN, ngram=LOAD_NGRAM, *, plain_index=0, ngram_index=1, rounds=5,
                 figures=LOAD_FIGURES, failed=NGRAM_FAILED) -> dict:
    """{"load": [...], "load_summary": {...}} for a plain and an ngram vLLM arm at levels 1, 2, 4, 8, the ngram
    arm failing at 8 (`failed`), as the contract's results/load.py writes them."""
    entries = []
    for level, plain_tps, ngram_tps, speed in figures:
        for name, index, tps in ((plain, plain_index, plain_tps), (ngram, ngram_index, ngram_tps)):
            assisted = name != plain
            broken = tps is None
            per_user = None if broken else round(tps / level * 0.95, 3)
            e2e = None if broken else round(32 / per_user, 4)
            entries.append({
                "arm": name, "arm_index": index, "engine": "vllm", "baseline": plain if assisted else None,
                "concurrency": level, "rounds": 0 if broken else rounds,
                "requests": 0 if broken else rounds * level, "failed": failed if broken else None,
                "output_tokens_per_s": tps,
                "output_tokens_per_s_rounds": [] if broken else [tps * f for f in (0.97, 1.0, 1.02, 0.99, 1.01)],
                "per_user_tokens_per_s": per_user,
                "ttft_s": _percentiles(None if broken else 0.05 * level),
                "itl_s": _percentiles(None if broken else round(1 / per_user, 4)),
                "e2e_s": _percentiles(e2e),
                "speedup": _speedup(speed, rounds) if assisted else None,
                "latency_speedup": _speedup(speed and (speed[0] * 0.98, speed[1] * 0.97, speed[2] * 0.99), rounds)
                if assisted else None,
                "acceptance": None if not assisted else {
                    "source": "metrics", "drafted": 0 if broken else 400 * level,
                    "accepted": 0 if broken else 180 * level, "rate": None if broken else 0.45,
                    "per_position": [] if broken else [0.7, 0.5, 0.4, 0.3, 0.2], "per_request_rate": None,
                    "note": "Counted from the server's /metrics: another client of the same server would be counted "
                            "too."},
                "client_cpu_s": {"per_request": 0.002, "total": 0.002 * rounds * level, "share": 0.01},
            })
    levels = [f[0] for f in figures]
    helps = [f[0] for f in figures if f[3] and f[3][1] > 1]
    costs = [f[0] for f in figures if f[3] and f[3][2] < 1]
    stops = next((f[0] for f in figures if not f[3] or f[3][1] <= 1), None)
    sentence = (f"{ngram} helps up to 2 concurrent requests (1.22x at 2) and costs throughput from 4 on "
                f"(0.87x at 4).")
    return {
        "load": entries,
        "load_summary": {
            "levels": levels, "rounds": rounds,
            "arms": [{"arm": ngram, "baseline": plain, "stops_paying_at": stops, "helps_at": helps,
                      "costs_at": costs, "sentence": sentence}],
            "sentence": sentence,
            "notes": [f"{ngram} at 8 requests at once: {failed}"],
            "client": "The client took 1% of the timed rounds' wall time (2 ms of CPU per request), on the same "
                      "cores as the servers.",
        },
    }


def load_report(**kwargs) -> dict:
    """A vLLM comparison (plain and ngram, 1.5x one request at a time) with the load levels of `load_section`."""
    report = minimal_report(arms=((None, 1.5, 1.2, 1.7, "order-statistic", 0.9375),))
    plain, ngram = report["arms"]
    plain.update(name=LOAD_PLAIN, engine="vllm", spec={"engine": "vllm", "method": "plain"})
    ngram.update(name=LOAD_NGRAM, strategy="ngram", engine="vllm",
                 spec={"engine": "vllm", "method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 2,
                       "prompt_lookup_max": 4})
    report["comparison"][0]["arm"] = LOAD_NGRAM
    report["request"].update(concurrency=[1, 2, 4, 8], load_rounds=5, engines=["vllm"])
    return {**report, **load_section(**kwargs)}

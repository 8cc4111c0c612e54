"""The stopping rules after each repetition: the default stops once the answer is clear, with a complete stopping
block; an explicit count still runs exactly that many. Tiny models, fake latencies and a fake clock."""

import pytest

from assistlab.config import CLEAR_MAX_REPEATS, WARMUP_TOKENS, BenchRequest
from assistlab.engines.transformers import timing
from assistlab.engines.transformers.arms import ArmSpec
from assistlab.measure import runner, stopping
from assistlab.results import likely, sequential
from assistlab.results import report as report_mod
from assistlab.views import answers, charts
from fake_runs import FakeRuns

PROMPT = "write me a long essay on deep learning"


@pytest.fixture
def fake_runs(monkeypatch, allowed_models):
    def install(slow: dict[int, float], noise: float = 0.01, **more) -> FakeRuns:
        fake = FakeRuns(slow, noise, **more)
        monkeypatch.setattr(timing, "timed_generate", fake.timed_generate)
        monkeypatch.setattr(timing, "probe_arm", lambda *a, **k: {"error": "not probed in this test"})
        return fake

    return install


def compare(store, fake, arms, **kwargs):
    request = BenchRequest(target="target", arms=arms, prompt=PROMPT, max_new_tokens=4, warmup=0, **kwargs)
    events = list(runner.run_benchmark(request, store, clock=fake.clock))
    return events, events[-1].report.to_dict()


TWO_ARMS = (ArmSpec("prompt-lookup", prompt_lookup_num_tokens=2), ArmSpec("prompt-lookup", prompt_lookup_num_tokens=3))


def test_the_default_stops_as_soon_as_the_answer_is_clear(store, fake_runs):
    fake = fake_runs({2: 1.85, 3: 1.4})  # both clearly slower (0.54x and 0.71x)
    events, data = compare(store, fake, TWO_ARMS)
    stop = data["stopping"]
    fewest = sequential.fewest_for_verdict(0.025)  # two arms share 95%: 97.5% each
    assert (stop["rule"], stop["ended_by"], stop["reached"], stop["repetitions"]) == ("clear", "clear", True, fewest)
    assert data["counted_repetitions"] == fewest == 7 and fake.calls == 3 * fewest
    assert (stop["level"], stop["arm_level"], stop["band"]) == (0.95, 0.975, 0.03)
    assert stop["max_repetitions"] == CLEAR_MAX_REPEATS and "Bonferroni" in stop["method"]
    assert list(stop["arms"]) == [a["name"] for a in data["arms"][1:]]
    for arm in stop["arms"].values():
        assert arm["repetitions"] == fewest and arm["settled"] == sequential.SLOWER
        assert len(arm["looks"]) == fewest and arm["looks"][fewest - 2] == [None, None]
        assert arm["looks"][-1][1] < 1.0  # the last look's interval lies below 1x: the verdict, checkable afterwards
    assert data["message"] == (f"Complete. Stopped after {fewest} repetitions: the answer was clear. " + "; ".join(
        f"{name}: Slower, 95% sure, assuming nothing" for name in stop["arms"]) + ".")
    assert all(c["sequence"]["settled"] == "slower" for c in data["comparison"])
    assert "95% sure at every look" in charts.headline(data)
    # Before the end, the page said what the stop waited for and worded the answer as provisional.
    waiting = [e for e in events if e.kind == "status" and e.step.startswith("waiting for")]
    # One short progress line: what the stop waits for; the answers so far are the headline's.
    assert len(waiting) == fewest - 1
    assert waiting[0].step == "waiting for the sure answer for 2 arms"  # the headline names them
    assert not any("Likely" in e.step or "so far" in e.step for e in waiting)
    assert any(" · waiting for " in e.step for e in events if e.step.startswith("Repetition"))
    # The likely answer came at the first planned look, said with its assumption, before the sure one.
    assert stop["likely"] == {name: sequential.SLOWER for name in stop["arms"]}
    assert stop["likely_at"] == {name: likely.LOOKS[0] for name in stop["arms"]} and likely.LOOKS[0] < fewest
    assert "normal" in stop["likely_assumption"]
    timing = data["timing"]
    assert timing["load_s"] <= timing["first_repetition_s"] <= timing["likely_s"] <= timing["answer_s"]
    assert timing["first_answer_s"] == timing["likely_s"] < timing["answer_s"]  # the likely answers came first
    assert timing["warmup_s"] >= 0


def test_the_headline_says_the_likely_answer_first_then_the_sure_one(store, fake_runs):
    """While a 'clear' run goes on, the headline leads with each arm's likely answer as soon as it is in, said
    with its assumption and 'confirming'; the sure answer replaces it when it comes; the report records when
    every arm had its first answer."""
    fake = fake_runs({2: 1.85, 3: 1.4})  # both clearly slower
    request = BenchRequest(target="target", arms=TWO_ARMS, prompt=PROMPT, max_new_tokens=4, warmup=0)
    seen = {}  # repetitions -> (lead, lines, first_answer_s) as the page drew them after that repetition
    for event in runner.run_benchmark(request, store, clock=fake.clock):
        if event.kind == "status" and event.step.startswith("waiting for"):
            data = event.report.to_dict()
            seen[data["counted_repetitions"]] = (answers.lead_sentence(data), answers.headline_lines(data),
                                                 data["timing"].get("first_answer_s"))
    final = event.report.to_dict()
    names = list(final["stopping"]["arms"])
    first, fewest = likely.LOOKS[0], sequential.fewest_for_verdict(0.025)
    for n in range(1, first):  # before the first planned look: no answer of either kind
        lead, lines, at = seen[n]
        assert lead == "So far: " + report_mod.TOO_FEW_FOR_EVERY_LOOK and at is None
        assert not any("Likely" in line for line in lines)
    for n in range(first, fewest):  # the likely answer first, its assumption said, then confirmed
        lead, lines, at = seen[n]
        assert lead.startswith("So far: " + answers.LIKELY_NOTHING_HELPED)
        assert lead.endswith(f"Confirming without that assumption (the sure answer needs at least {fewest} "
                             "repetitions).")
        for name in names:
            line = next(line for line in lines if line.startswith(f"{name}: "))
            assert line.startswith(f"{name}: Likely slower ({first} repetitions, assuming roughly normal noise): 0.")
            assert line.endswith("× the speed of plain; confirming without that assumption.")
        assert at is not None
    # The sure answer, assuming nothing, replaced it.
    assert answers.lead_sentence(final) == report_mod.NOTHING_HELPED
    assert not any("Likely" in line or "confirming" in line for line in answers.headline_lines(final))
    assert any(line.startswith(f"First answer {final['timing']['first_answer_s']:.0f} s after the start")
               for line in answers.headline_lines(final))


def _running(likely_answers: dict, sure: dict | None = None) -> dict:
    """A 'clear' run under way after 4 repetitions: each arm's likely answer (or None) and sure one (or None)."""
    sure = sure or {}
    arms = [{"name": "plain", "strategy": "plain", "latencies_s": [1.0] * 4}]
    comparison = []
    for name, median in (("universal", 0.2), ("prompt lookup", 0.97)):
        arms.append({"name": name, "strategy": "assisted", "latencies_s": [1.0 / median] * 4})
        comparison.append({"arm": name, "speedup": {"median": median, "n": 4, "interval": "range"},
                           "sequence": {"median": median, "ci_low": None, "ci_high": None, "n": 4,
                                        "interval": "none", "settled": sure.get(name), "family_level": 0.95}})
    return {"status": "running", "arms": arms, "comparison": comparison,
            "stopping": {"rule": "clear", "ended_by": None, "likely": likely_answers,
                         "likely_at": {name: 4 for name, v in likely_answers.items() if v},
                         "arms": {name: {"settled": sure.get(name)} for name in likely_answers}}}


def test_the_lead_says_what_is_likely_so_far_and_who_is_still_open():
    data = _running({"universal": "slower", "prompt lookup": None})
    assert answers.lead_sentence(data) == (
        "So far: universal is likely slower (0.20× the speed of plain), assuming roughly normal noise; prompt "
        "lookup not yet clear. Confirming without that assumption (the sure answer needs at least 7 repetitions).")
    # Once the other arm's sure answer is in, the lead holds both, the likely one still said as likely.
    data = _running({"universal": "slower", "prompt lookup": None}, sure={"prompt lookup": "slower"})
    assert answers.lead_sentence(data).startswith("So far: " + answers.LIKELY_NOTHING_HELPED + " Confirming")
    # Under a fixed count the likely answer is never the headline's.
    fixed = _running({"universal": "slower", "prompt lookup": "slower"})
    fixed["stopping"]["rule"] = "fixed"
    assert "likely" not in (answers.lead_sentence(fixed) or "")


def test_a_provisional_answer_is_worded_as_such():
    entry = {"arm": "prompt lookup", "speedup": {"median": 0.54},
             "sequence": {"median": 0.54, "ci_low": 0.52, "ci_high": 0.56, "level": 0.975, "family_level": 0.95,
                          "arms_sharing": 2, "n": 7, "interval": sequential.TIME_UNIFORM, "settled": "slower",
                          "band": 0.03}}
    from assistlab.results import report as report_mod

    text = report_mod.provisional_sentence(entry)
    assert text.startswith("So far prompt lookup is slower than plain, 95% sure at every look")
    assert text.endswith("more repetitions can only sharpen this.")
    assert report_mod.provisional({"status": "running", "stopping": {"ended_by": None}})
    assert not report_mod.provisional({"status": "running", "stopping": {"ended_by": "clear"}})  # probes run


def test_no_practical_difference_ends_the_runs_too(store, fake_runs):
    fake = fake_runs({2: 1.0}, noise=0.001)
    _, data = compare(store, fake, TWO_ARMS[:1])
    stop = data["stopping"]
    assert (stop["ended_by"], stop["repetitions"]) == ("clear", 6)
    assert stop["arms"][data["arms"][1]["name"]]["settled"] == sequential.SAME
    assert "no practical difference" in charts.headline(data)


def test_an_explicit_count_still_runs_exactly_that_many(store, fake_runs):
    fake = fake_runs({2: 1.85, 3: 1.4})
    _, data = compare(store, fake, TWO_ARMS, repeats=9)
    stop = data["stopping"]
    assert (stop["rule"], stop["ended_by"], stop["repetitions"], data["counted_repetitions"]) == (
        "fixed", "repetitions", 9, 9)
    assert stop["level"] is None and all(c["sequence"] is None for c in data["comparison"])
    assert fake.calls == 27 and data["message"] == "Complete."


def test_the_budget_ends_an_unclear_comparison(store, fake_runs):
    fake = fake_runs({2: 1.02}, noise=0.05)  # 2% slower in 5% noise: not clear within 8 repetitions
    _, data = compare(store, fake, TWO_ARMS[:1], stop_rule="clear", repeats=8)
    stop = data["stopping"]
    assert (stop["rule"], stop["ended_by"], stop["reached"], stop["repetitions"]) == ("clear", "repetitions", False, 8)
    open_arm = next(iter(stop["arms"]))
    said = f"No clear answer: 8 repetitions, the most allowed, ran, before the answer was clear for {open_arm}."
    assert data["message"] == f"Complete. {said}"
    # The report's answer says the same, and never that the runs go on (issue 36 item 2).
    assert data["answer"].startswith(said) and "go on" not in data["answer"]


def _report_with(request: BenchRequest, ratios: list[float]) -> "report_mod.Report":
    """A report of plain (1 s a run) and one assisted arm whose n-th run takes 1 / ratios[n] s."""
    from assistlab.engines.base import ArmInfo

    report = report_mod.Report(request={}, environment={}, arms=[ArmInfo("plain", "plain"), ArmInfo("pl", "pl")])
    report.stopping = stopping.record(request, report)
    for rep, ratio in enumerate(ratios):
        for arm, latency in ((0, 1.0), (1, 1.0 / ratio)):
            report.runs.append(report_mod.RunRecord(arm, rep, latency, 4, None, [], [], [], [], [], ""))
    return report


def test_the_decision_alone():
    """after_repetition on hand-made runs: before the floor it goes on and says for whom; at the floor a clearly
    slower arm ends the runs as clear; a budget about to be overrun past the floor ends them; a fixed count
    ends at its count whatever the runs say."""
    request = BenchRequest(target="t", arms=TWO_ARMS[:1]).resolved("cpu")
    assert request.stopping_rule == "clear" and request.repeats == CLEAR_MAX_REPEATS
    floor = sequential.fewest_for_verdict(0.05)  # one assisted arm: all of the 5%
    slower = [0.5 + 0.01 * (i % 3) for i in range(floor)]
    for n in range(1, floor):
        decision = stopping.after_repetition(request, _report_with(request, slower[:n]), n, 1.0 * n)
        assert (decision.stop, decision.waiting) == (False, "waiting for the sure answer for pl")
    report = _report_with(request, slower)
    decision = stopping.after_repetition(request, report, floor, 1.0 * floor)
    assert decision.stop and (report.stopping["ended_by"], report.stopping["reached"]) == ("clear", True)
    # As fast as plain, give or take: no answer at the floor, and the budget ends the runs before an overrun.
    budgeted = BenchRequest(target="t", arms=TWO_ARMS[:1], max_time_s=10.0).resolved("cpu")
    even = [1.0 + 0.05 * (-1) ** i for i in range(floor)]
    report = _report_with(budgeted, even)
    assert not stopping.after_repetition(budgeted, report, floor, 6.0).stop  # 6 s + one more of ~1 s fits
    assert stopping.after_repetition(budgeted, report, floor, 9.5).stop and report.stopping["ended_by"] == (
        "time budget")
    fixed = BenchRequest(target="t", arms=TWO_ARMS[:1], repeats=3).resolved("cpu")
    report = _report_with(fixed, slower[:3])
    assert stopping.after_repetition(fixed, report, 3, 3.0).stop and report.stopping["ended_by"] == "repetitions"


def test_the_command_line_says_how_the_clear_rule_ended():
    from assistlab import cli as cli_mod

    block = {"rule": "clear", "level": 0.95, "max_time_s": 600.0, "max_repetitions": 30, "reached": True,
             "repetitions": 7, "elapsed_s": 12.3, "ended_by": "clear"}
    assert cli_mod.stopping_sentence(block) == (
        "until the answer was clear, 95% sure at every look (the answer was clear); 7 in 12.3 s of a 600 s budget.")
    likely_block = {**block, "likely": {"universal": "slower", "prompt lookup": "slower"},
                    "likely_at": {"universal": 4, "prompt lookup": 4},
                    "arms": {"universal": {"settled": None}, "prompt lookup": {"settled": "slower"}}}
    assert stopping.answer_words(likely_block) == (
        "universal: Likely slower (4 repetitions, assuming roughly normal noise); "
        "prompt lookup: Slower, 95% sure, assuming nothing")  # the sure answer, once in, is the one said
    assert stopping.answer_words(block) == ""  # a report kept from before the likely answer has none


def test_a_budget_too_short_for_any_answer_is_extended_to_the_floor(store, fake_runs):
    """A budget that ends before the fewest repetitions an answer needs could only end without one: the runs go
    on to that floor, and the progress line says so with the time it will take."""
    fake = fake_runs({2: 1.85, 3: 1.4})
    fewest = sequential.fewest_for_verdict(0.025)
    events, data = compare(store, fake, TWO_ARMS, max_time_s=2.0)  # about one repetition's time
    stop = data["stopping"]
    assert (stop["ended_by"], stop["repetitions"]) == ("clear", fewest)
    assert stop["budget_extended_to_s"] > 2.0
    said = [e.step for e in events if e.kind == "status" and "budget extended" in e.step]
    assert said and said[0].endswith(f"(the 2 s budget extended to the {fewest} repetitions an answer needs)")


def test_the_rule_likely_stops_at_the_likely_answer_and_says_its_assumption(store, fake_runs):
    fake = fake_runs({2: 1.85, 3: 1.4})  # both clearly slower: the first planned look settles
    events, data = compare(store, fake, TWO_ARMS, stop_rule="likely")
    stop = data["stopping"]
    first = likely.LOOKS[0]
    assert (stop["rule"], stop["ended_by"], stop["reached"], stop["repetitions"]) == ("likely", "likely", True, first)
    assert data["counted_repetitions"] == first < sequential.fewest_for_verdict(0.025) and fake.calls == 3 * first
    assert stop["likely"] == {name: sequential.SLOWER for name in stop["arms"]}
    assert all(arm["settled"] is None for arm in stop["arms"].values())  # the sure answer was not in yet
    assert "roughly normal" in stop["assumption"] and stop["band"] == 0.03
    words = "Likely slower (4 repetitions, assuming roughly normal noise)"
    assert data["message"] == f"Complete after {first} repetitions. " + "; ".join(
        f"{name}: {words}" for name in stop["arms"]) + "."
    lines = answers.headline_lines(data)
    # A slower arm is said as its speedup below 1×, as everywhere (issue 36).
    assert all(any(line.startswith(f"{name}: {words}: 0.") and "× the speed of plain" in line for line in lines)
               for name in stop["arms"])
    assert not any("no clear difference" in line or "too few" in line for line in lines)
    assert answers.lead_sentence(data) == answers.LIKELY_NOTHING_HELPED
    assert data["timing"]["likely_s"] <= data["timing"]["answer_s"]
    from assistlab import cli as cli_mod

    assert cli_mod.stopping_sentence(stop).startswith("until the likely answer, assuming roughly normal noise (every")
    waiting = [e.step for e in events if e.kind == "status" and e.step.startswith("waiting for the likely answer")]
    assert len(waiting) == first - 1


def test_an_arm_too_skewed_for_the_likely_answer_waits_for_the_sure_one(store, fake_runs):
    """One run of an arm as fast as plain takes 10x at the 6th repetition: from then on its sample is too skewed
    for an interval that assumes normal noise, so it gets no likely answer and the rule 'likely' goes on to the
    sure answer, here to the most repetitions allowed."""
    fake = fake_runs({2: 1.85, 3: 1.0}, noise=0.1, outliers={3: {6: 10.0}})
    events, data = compare(store, fake, TWO_ARMS, stop_rule="likely", repeats=10)
    stop = data["stopping"]
    clear, skewed = data["arms"][1]["name"], data["arms"][2]["name"]
    assert stop["arms"][skewed]["likely_skewed"] is True and stop["likely"][skewed] is None
    assert stop["likely"][clear] == sequential.SLOWER and not stop["arms"][clear]["likely_skewed"]
    assert (stop["ended_by"], stop["reached"], stop["repetitions"]) == ("repetitions", False, 10)
    # The one sentence of a run that ended without an answer (as for the rule 'clear'), the likely answers so far.
    assert f"No clear answer: 10 repetitions, the most allowed, ran, before the answer was clear for {skewed}." in (
        data["message"])
    assert f"So far: {clear}: " in data["message"] and data["answer"].startswith("No clear answer")
    said = [e.step for e in events if e.kind == "status" and "too skewed to assume normal noise" in e.step]
    assert said and said[0] == (f"waiting for the likely answer for {skewed} (the sure one for {skewed}: too skewed "
                                "to assume normal noise)")


def test_without_an_answer_the_rule_likely_says_so(store, fake_runs):
    fake = fake_runs({2: 1.0}, noise=0.05)  # as fast as plain in 5% noise: no answer within 5 repetitions
    _, data = compare(store, fake, TWO_ARMS[:1], stop_rule="likely", repeats=5)
    stop = data["stopping"]
    assert (stop["ended_by"], stop["reached"]) == ("repetitions", False)
    assert data["message"].startswith("Complete. No clear answer: 5 repetitions, the most allowed, ran, before the "
                                      "answer was clear for")


def test_the_warm_up_is_a_few_tokens_and_the_counted_runs_are_whole(store, fake_runs):
    fake = fake_runs({2: 1.85})
    events = list(runner.run_benchmark(BenchRequest(target="target", arms=TWO_ARMS[:1], prompt=PROMPT,
                                                    max_new_tokens=40, warmup=1, repeats=3), store, clock=fake.clock))
    assert fake.asked == [WARMUP_TOKENS] * 2 + [40] * 6  # two arms warm up, then three whole repetitions
    timing_block = events[-1].report.to_dict()["timing"]
    assert timing_block["warmup_s"] >= 0

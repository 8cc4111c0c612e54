"""--concurrency, --load-rounds and --load-block-rounds on the command line: parsed into the request, refused in one sentence naming
the field, and the load table with its summary sentence under the usual table."""

import pytest
from commandline import cli

from assistlab.cli.parser import build_parser, request_from_args
from assistlab.cli.tables import format_table, load_lines
from assistlab.engines.base import ArmInfo, RequestRecord
from assistlab.results.load import LoadRecord, LoadRound
from assistlab.results.report import Report, RunRecord

VLLM = ["--engines", "transformers,vllm", "--vllm-method", "ngram"]


def test_the_flags_become_the_requests_levels_and_rounds():
    request = request_from_args(build_parser().parse_args(["bench", *VLLM, "--concurrency", "8, 1,4",
                                                           "--load-rounds", "3"]))
    assert request.concurrency == (1, 4, 8) and request.load_rounds == 3
    assert request.to_dict()["concurrency"] == [1, 4, 8]
    plain = request_from_args(build_parser().parse_args(["bench", *VLLM]))
    assert plain.concurrency == () and plain.load_rounds == 5 and plain.load_block_rounds is None
    blocks = request_from_args(build_parser().parse_args(["bench", *VLLM, "--concurrency", "1", "--load-rounds", "6",
                                                          "--load-block-rounds", "2"]))
    assert blocks.load_block_rounds == 2 and blocks.to_dict()["load_block_rounds"] == 2


@pytest.mark.parametrize(
    "args,words",
    [
        (["bench", "--concurrency", "1,2"], "concurrency: load levels time a serving engine's arms"),
        (["bench", *VLLM, "--concurrency", "0,2"], "concurrency"),
        (["bench", *VLLM, "--concurrency", "1,2,3,4,5,6,7,8,9"], "concurrency"),
        (["bench", *VLLM, "--concurrency", "1,lots"], "concurrency"),
        (["bench", *VLLM, "--concurrency", "1", "--load-rounds", "0"], "load_rounds must be between"),
        (["bench", *VLLM, "--concurrency", "1", "--load-rounds", "3", "--load-block-rounds", "4"],
         "load_block_rounds must be between 1 and 3"),
    ],
)
def test_bad_levels_are_one_line_naming_the_field(args, words):
    result = cli(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error:") and words in lines[-1], result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def loaded_report() -> dict:
    arms = [ArmInfo("vllm plain", "plain", engine="vllm"), ArmInfo("vllm ngram", "ngram", engine="vllm")]
    report = Report(request={"concurrency": [1, 4], "max_new_tokens": 8, "warmup": 1, "do_sample": False},
                    environment={"device": "cpu", "dtype": "float32", "cpu_threads": 2}, arms=arms, status="complete")
    for arm in range(2):
        report.runs.append(RunRecord(arm, 0, 1.0 - arm / 2, 8, 0.1, [0.1], [8], [], [], [1] * 8, "text"))
    record = LoadRecord(levels=(1, 4), rounds_asked=5, arms=[0, 1], done=[1, 4])
    for r in range(5):
        for arm, wall in ((0, 1.0 + r / 50), (1, 0.5 + r / 40)):
            requests = [RequestRecord(i, 0.0, wall, 0.05, [0.1], 8, 0.001) for i in range(1)]
            record.rounds.append(LoadRound(arm, 1, r, wall, requests))
    record.failures[(1, 4)] = "its server answered 503."
    for r in range(5):
        record.rounds.append(LoadRound(0, 4, r, 2.0, [RequestRecord(i, 0.0, 2.0, 0.2, [0.1], 8, 0.001)
                                                      for i in range(4)]))
    report.load = record
    return report.to_dict()


def test_the_load_table_follows_the_usual_one_with_the_summary_sentence():
    data = loaded_report()
    lines = load_lines(data)
    assert lines[0].startswith("[") and "Under load: 5 rounds per level after one warm-up" in lines[0]
    header = lines[1]
    for column in ("arm", "level", "server tok/s", "per-user tok/s", "TTFT p50 s", "E2E p50 s", "speedup"):
        assert column in header
    ngram_1 = next(line for line in lines if line.startswith("  vllm ngram |     1 |"))
    assert ngram_1.endswith("1.89× (1.80–2.00×, 93.7%)")  # the speedup with its interval and level
    assert any("vllm ngram" in line and line.rstrip().endswith("failed") for line in lines)
    assert "  vllm ngram at 4: its server answered 503." not in lines  # the sentence says it already
    assert any(line.startswith("  vllm ngram helps up to 1 concurrent request") for line in lines)
    table = format_table(data)
    assert table.index("Under load") > table.index(" median s ")


def test_no_levels_no_load_table():
    data = loaded_report()
    data.pop("load"), data.pop("load_summary")
    assert load_lines(data) == [] and "Under load" not in format_table(data)

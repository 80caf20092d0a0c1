"""The sequence-length mix, seeded drawing, prompts and trace identifiers."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from benchrun.loadgen.workload import (
    MixBucket,
    MixError,
    draw_buckets,
    format_mix,
    make_prompt,
    mix_from_workload,
    new_trace_context,
    parse_mix,
    split_evenly,
    worker_rng,
)


def test_parse_mix_forms():
    assert parse_mix("512/128@0.7,1024/256@0.3") == [MixBucket(512, 128, 0.7), MixBucket(1024, 256, 0.3)]
    assert parse_mix("[{512/128@0.7},{1024/256@0.3}]") == parse_mix("512/128@0.7, 1024/256@0.3")
    assert parse_mix("64/16") == [MixBucket(64, 16, 1.0)]
    assert format_mix(parse_mix("512/128@0.7,1024/256@0.3")) == "512/128@0.7,1024/256@0.3"


@pytest.mark.parametrize(
    "text, match",
    [
        ("512/128@0.7", "sum to 0.7"),
        ("512x128", "not IN/OUT@WEIGHT"),
        ("0/128@1", "non-positive"),
        ("1/2@0.5,3/4", "needs a weight"),
        ("1/2@0.5,1/2@0.5", "repeat"),
        ("", "empty"),
    ],
)
def test_parse_mix_errors(text, match):
    with pytest.raises(MixError, match=match):
        parse_mix(text)


def test_mix_from_workload():
    wl = [{"inputTokens": 512, "outputTokens": 128, "weight": 0.7}, {"inputTokens": 1024, "outputTokens": 256, "weight": 0.3}]
    assert [b.label for b in mix_from_workload(wl)] == ["512/128", "1024/256"]
    with pytest.raises(MixError, match=r"sequenceLengthMix\[0\]"):
        mix_from_workload([{"inputTokens": "x", "outputTokens": 1}])


def test_draws_are_joint_weighted_and_reproducible():
    mix = parse_mix("10/1@0.7,20/2@0.3")
    a = draw_buckets(mix, 20000, worker_rng(7, 0, 0, 0))
    b = draw_buckets(mix, 20000, worker_rng(7, 0, 0, 0))
    c = draw_buckets(mix, 20000, worker_rng(8, 0, 0, 0))
    assert a == b and a != c
    share = Counter(a)[0] / len(a)
    assert abs(share - 0.7) < 0.02  # 20000 draws: sd 0.0032


def test_prompt_has_requested_word_count():
    rng = worker_rng(1, 0, 0, 0)
    for n in (1, 7, 512):
        assert len(make_prompt(n, rng).split()) == n


def test_traceparent_is_w3c():
    trace_id, tp = new_trace_context()
    assert re.fullmatch(r"[0-9a-f]{32}", trace_id)
    assert re.fullmatch(rf"00-{trace_id}-[0-9a-f]{{16}}-01", tp)
    assert new_trace_context()[0] != trace_id


def test_split_evenly():
    assert split_evenly(10, 3) == [4, 3, 3]
    assert split_evenly(1, 2) == [1, 0]
    assert sum(split_evenly(33, 4)) == 33

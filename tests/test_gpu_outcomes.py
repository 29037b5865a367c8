"""Lesson 03's quoted GPU outcomes: each quote says it is quoted and where it comes from, and torch's
own words for it are still in the installed torch wherever a torch file is named."""

import pytest

from ddp_lib.demos import gpu_outcomes
from ddp_lib.demos.gpu_outcomes import QUOTES, Quote


@pytest.mark.parametrize("key", sorted(QUOTES))
def test_each_quote_is_labelled_and_names_its_source(key):
    text = gpu_outcomes.quote(key)
    assert text.startswith("Not run here: no GPU.")
    assert "quoted, not computed" in text
    assert f"Source: {QUOTES[key].source}." in text
    assert all(line in text for line in QUOTES[key].lines)


@pytest.mark.parametrize("key", sorted(k for k, q in QUOTES.items() if q.torch_file))
def test_torchs_words_for_each_checkable_quote_are_in_the_installed_torch(key):
    quote = QUOTES[key]
    assert quote.fixed_words, "a quote that names a torch file names the words to look for"
    quoted = " ".join(" ".join(quote.lines).split())  # a message quoted over two lines reads as one
    if "Error:" in quoted:  # a quoted message holds the fixed words it is checked by
        assert all(" ".join(words.split()) in quoted for words in quote.fixed_words)
    assert gpu_outcomes.words_in_torch(quote)
    assert gpu_outcomes.quote(key).endswith("are in the installed torch: yes")


def test_the_check_notices_words_torch_does_not_have():
    invented = Quote(("ValueError: no such message",), "nowhere", "distributed/distributed_c10d.py",
                     ("this sentence is in no torch file at all 7f3a",))
    assert not gpu_outcomes.words_in_torch(invented)

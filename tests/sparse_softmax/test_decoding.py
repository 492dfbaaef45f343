"""Top-k (sparse-softmax) decoding: fairseq's SequenceGenerator on a hand-built model, and
``fairseq-generate --task translation_sparse_decoding`` end to end."""

import math
import re

import pytest
import torch
from fairseq import search
from fairseq.data import Dictionary
from fairseq.sequence_generator import SequenceGenerator

from relu_former.errors import OptionError
from relu_former.sparse_softmax.decoding import (
    TopKRenormalizedSearch,
    check_sparse_softmax_k,
    use_sparse_decoding,
)

from helpers import FairseqRun


def toy_dictionary():
    d = Dictionary()
    for word in ["a", "b"] + [f"c{i}" for i in range(10)]:
        d.add_symbol(word)
    return d


class TableModel(torch.nn.Module):
    """A decoder-only 'model' whose next-token distribution depends on the last token only.

    From the start: a 0.6, b 0.4. After a: ten continuations c0..c9 of nearly equal
    probability (c0 largest, 0.11). After b: end of sentence 0.9. After any c: end of sentence.
    Full-softmax beam 2 prefers 'b' (score (log .4 + log .9) / 2 = -0.51 against
    (log .6 + log .11) / 3 = -0.91); with the top 2 renormalised, 'a c0' scores
    (log .6 + log(1 / 1.98)) / 3 = -0.40 and wins. Greedy decoding picks a, c0 either way.
    """

    def __init__(self, d: Dictionary):
        super().__init__()
        table = torch.full((len(d), len(d)), 1e-9)
        a, b, eos = d.index("a"), d.index("b"), d.eos()
        table[eos, a], table[eos, b] = 0.6, 0.4
        for i in range(10):
            table[a, d.index(f"c{i}")] = 1.0 - 0.02 * i
            table[d.index(f"c{i}"), eos] = 1.0
        table[b, eos], table[b, a] = 0.9, 0.1
        self.register_buffer("logits", (table / table.sum(-1, keepdim=True)).log())

    def forward(self, tokens):
        return self.logits[tokens[:, -1]].unsqueeze(1).clone(), None

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return torch.log_softmax(net_output[0], dim=-1)


def decode(k, beam, sampling=False, seed=0):
    d = toy_dictionary()
    strategy = search.Sampling(d) if sampling else None
    generator = SequenceGenerator([TableModel(d)], d, beam_size=beam, max_len_b=6,
                                  search_strategy=strategy)
    use_sparse_decoding(generator, k)
    sample = {"net_input": {"src_tokens": torch.tensor([[d.index("a"), d.eos()]]),
                            "src_lengths": torch.tensor([2])}}
    torch.manual_seed(seed)
    best = generator.generate([generator.model.single_model], sample)[0][0]
    return d.string(best["tokens"]), best["positional_scores"]


def test_top_k_changes_beam_search_but_not_greedy_decoding():
    assert decode(0, beam=2)[0] == "b"
    tokens, scores = decode(2, beam=2)
    assert tokens == "a c0"
    torch.testing.assert_close(
        scores, torch.tensor([math.log(0.6), math.log(1 / 1.98), 0.0]), rtol=0, atol=1e-5
    )
    greedy_full, greedy_scores_full = decode(0, beam=1)
    greedy_top2, greedy_scores_top2 = decode(2, beam=1)
    assert greedy_full == greedy_top2 == "a c0"
    assert (greedy_scores_top2 > greedy_scores_full + 1e-3).any()  # only the scores move


def test_top_one_sampling_is_greedy():
    seen_full = {decode(0, beam=1, sampling=True, seed=s)[0] for s in range(12)}
    seen_top1 = {decode(1, beam=1, sampling=True, seed=s)[0] for s in range(12)}
    assert len(seen_full) > 1  # plain sampling explores
    assert seen_top1 == {"a c0"}


@pytest.mark.parametrize("beam", [2, 3, 5])
def test_top_one_beam_search_is_greedy_for_any_beam(beam):
    """k = 1 is in the documented range [0, V]: with any beam it decodes the greedy
    hypothesis (the only one with a finite score), with the greedy scores."""
    tokens, scores = decode(1, beam=beam)
    greedy, greedy_scores = decode(1, beam=1)
    assert tokens == greedy == "a c0"
    torch.testing.assert_close(scores, greedy_scores, rtol=0, atol=0)
    torch.testing.assert_close(scores, torch.zeros(3), rtol=0, atol=1e-6)  # log 1 each step


def test_wrapper_forwards_the_search_interface():
    d = toy_dictionary()
    inner = search.LengthConstrainedBeamSearch(d, 1, 0, 1, 0)
    generator = SequenceGenerator([TableModel(d)], d, beam_size=2, search_strategy=inner)
    use_sparse_decoding(generator, 3)
    use_sparse_decoding(generator, 3)  # wrapping twice does not nest
    assert isinstance(generator.search, TopKRenormalizedSearch)
    assert generator.search.inner is inner and generator.search.k == 3
    assert generator.search.needs_src_lengths
    generator.search.set_src_lengths(torch.tensor([4]))
    assert inner.src_lengths.tolist() == [4]


def test_bad_sparse_softmax_k_names_the_flag():
    with pytest.raises(OptionError, match="--sparse-softmax-k must be an integer >= 0"):
        check_sparse_softmax_k(-1, 100)
    with pytest.raises(ValueError, match="--sparse-softmax-k 101 is larger than the target"):
        check_sparse_softmax_k(101, 100)
    check_sparse_softmax_k(0, 100)
    with pytest.raises(ValueError, match="has no search strategy"):
        use_sparse_decoding(object(), 5)


def hypotheses(stdout):
    found = re.findall(r"^H-(\d+)\t(\S+)\t(.*)$", stdout, flags=re.M)
    return {int(i): (float(score), text) for i, score, text in found}


@pytest.fixture(scope="module")
def trained(toy_data_bin, tmp_path_factory):
    """A transformer trained with sparse_softmax_cross_entropy (the e2e training check)."""
    run = FairseqRun(data_bin=toy_data_bin, work=tmp_path_factory.mktemp("sparse_gen"))
    proc = run.train("--criterion", "sparse_softmax_cross_entropy", "--sparse-softmax-k", "5",
                     "--label-smoothing", "0.1", arch="transformer")
    final = re.findall(r"\| train \| epoch .*", proc.stdout + proc.stderr)[-1]
    assert "| sparse_nll_loss " in final and "| outside_topk " in final
    return run


GEN_ARGS = ("--max-len-a", "0", "--max-len-b", "12")


@pytest.mark.slow
def test_fairseq_generate_with_and_without_top_k(trained: FairseqRun):
    plain = hypotheses(trained.generate("--beam", "1", *GEN_ARGS).stdout)
    top = hypotheses(trained.generate("--beam", "1", "--task", "translation_sparse_decoding",
                                      "--sparse-softmax-k", "2", *GEN_ARGS).stdout)
    assert plain.keys() == top.keys() and len(plain) > 10
    assert all(plain[i][1] == top[i][1] for i in plain)  # argmax decoding: same words
    assert all(top[i][0] >= plain[i][0] - 1e-4 for i in plain)  # renormalised: higher scores
    assert any(top[i][0] > plain[i][0] + 1e-3 for i in plain)
    # beam search keeping the top 5 at beam 5 (the paper's setting), and top-k sampling
    trained.generate("--beam", "5", "--task", "translation_sparse_decoding",
                     "--sparse-softmax-k", "5", *GEN_ARGS)
    trained.generate("--beam", "1", "--sampling", "--seed", "3", "--task",
                     "translation_sparse_decoding", "--sparse-softmax-k", "3", *GEN_ARGS)


@pytest.mark.slow
def test_fairseq_generate_refuses_negative_top_k_in_one_line(trained: FairseqRun):
    proc = trained.generate("--task", "translation_sparse_decoding", "--sparse-softmax-k",
                            "-1", check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("fairseq-generate: error: --sparse-softmax-k must be an integer >= 0")

"""Transpooler / Pyramidion: schedule parsing, encoder invariances, beam search, CLI runs."""

from __future__ import annotations

import argparse
import random
import re
from pathlib import Path

import pytest
import torch
from fairseq.data import Dictionary
from fairseq.models.transformer import TransformerConfig, TransformerEncoder
from fairseq.sequence_generator import SequenceGenerator

from relu_former.errors import OptionError
from relu_former.pyramidion.model import (
    PyramidionEncoder,
    PyramidionModel,
    SourceLengthCheck,
    parse_pooling_schedule,
    pyramidion_base,
    transpooler_4x,
)
from relu_former.relu_attention.model import ReLUFormerEncoder

from helpers import FairseqRun, preprocess

# ---------------------------------------------------------------- --pooling-schedule


@pytest.mark.parametrize("spec,layers,expect", [
    ("1:4096,2:2048", 3, {1: 4096, 2: 2048}),
    ("last:64", 2, {2: 64}),
    ("-2:64,-1:8", 3, {2: 64, 3: 8}),
    ("8192,4096,4096", 3, {1: 8192, 2: 4096}),
    ("100,100,50", 3, {1: 100, 3: 50}),
    ("none", 3, {}),
    (" Off ", 3, {}),
    (None, 3, {}),
])
def test_schedule_forms(spec, layers, expect):
    assert parse_pooling_schedule(spec, layers) == expect


@pytest.mark.parametrize("spec,message", [
    ("1:2048,2:4096", "lengthens"),
    ("2048,4096,1024", "lengthens"),
    ("1:64,2:64", "lengthens"),
    ("1:0", "must be positive"),
    ("0,0,0", "must be positive"),
    ("1:-5", "must be positive"),
    ("1:1.5", "not an integer"),
    ("1:2k", "not an integer"),
    ("4096,2048.0,1024", "not an integer"),
    ("4:64", "does not exist"),
    ("0:64", "does not exist"),
    ("1:64,1:32", "twice"),
    ("1:64,32", "mixes"),
    ("64,32", "one length per layer"),
    ("1:64,", "empty entry"),
    ("", "is empty; write"),
    ("  ", "is empty; write"),
])
def test_bad_schedules_name_the_flag(spec, message):
    with pytest.raises(OptionError, match=message) as err:
        parse_pooling_schedule(spec, 3)
    assert err.value.flag == "--pooling-schedule"
    assert str(err.value).startswith("--pooling-schedule")


def test_negative_layers_parse_on_the_command_line_with_the_equals_form():
    """argparse takes ``-1:16`` after a space for an option; ``=-1:16`` reaches the model."""
    from fairseq import options

    def parse(*flags):
        parser = options.get_training_parser()
        return options.parse_args_and_arch(
            parser, ["data", "--arch", "pyramidion_base", "--user-dir", "relu_former", *flags])

    args = parse("--pooling-schedule=-1:16")
    assert parse_pooling_schedule(args.pooling_schedule, args.encoder_layers) == {3: 16}
    with pytest.raises(SystemExit):  # argparse: "argument --pooling-schedule: expected one"
        parse("--pooling-schedule", "-1:16")


def test_the_papers_comparison_presets():
    """vanilla_full_attention_8k is the paper's #3 (full attention, no pooling, 2 + 2 layers);
    transpooler_4x its table-4 Transpooler (4 layers, pooling once, 4x shorter)."""
    from fairseq import options

    def parse(*flags):
        return options.parse_args_and_arch(options.get_training_parser(),
                                           ["data", "--user-dir", "relu_former", *flags])

    vanilla = parse("--arch", "vanilla_full_attention_8k", "--max-source-positions", "8192")
    assert (vanilla.encoder_layers, vanilla.decoder_layers) == (2, 2)
    assert vanilla.pooling_schedule == "none" and vanilla.attention_block_size == 0
    assert vanilla.attention_activation == "softmax"
    assert parse_pooling_schedule(vanilla.pooling_schedule, vanilla.encoder_layers) == {}
    pooled = parse("--arch", "transpooler_4x", "--max-source-positions", "8192")
    assert (pooled.encoder_layers, pooled.decoder_layers) == (4, 4)
    assert pooled.attention_block_size == 512
    assert parse_pooling_schedule(pooled.pooling_schedule, pooled.encoder_layers) == {4: 2048}
    short = parse("--arch", "transpooler_4x", "--max-source-positions", "256")
    assert parse_pooling_schedule(short.pooling_schedule, short.encoder_layers) == {4: 64}
    # a model built from it pools a full-length input to a quarter
    dictionary = toy_dictionary()
    args = argparse.Namespace(max_source_positions=64, encoder_embed_dim=16,
                              decoder_embed_dim=16, encoder_ffn_embed_dim=32,
                              decoder_ffn_embed_dim=32, encoder_attention_heads=2,
                              decoder_attention_heads=2, dropout=0.0)
    transpooler_4x(args)
    task = argparse.Namespace(source_dictionary=dictionary, target_dictionary=dictionary)
    model = PyramidionModel.build_model(args, task).eval()
    tokens = torch.randint(dictionary.nspecial, len(dictionary), (2, 64))
    out = model.encoder(tokens, src_lengths=torch.tensor([64, 64]))
    assert out["encoder_out"][0].shape[0] == 16  # T x B x C: 64 -> 16


def test_a_schedule_that_cannot_pool_below_max_source_positions_is_refused():
    """pyramidion_base keeps min(k, n) states: with inputs of at most 1024 tokens its
    4096/2048 schedule would pool nothing, silently; the model refuses to be built."""
    dictionary = toy_dictionary()
    for schedule in ("2:64,3:32", "last:64", "64,64,64"):
        with pytest.raises(OptionError, match=r"--max-source-positions is 32: no input") as err:
            build_model(dictionary, max_source_positions=32, pooling_schedule=schedule)
        assert err.value.flag == "--pooling-schedule"
    build_model(dictionary, max_source_positions=32, pooling_schedule="2:64,3:31")
    build_model(dictionary, max_source_positions=32, pooling_schedule="none")
    args = argparse.Namespace(max_source_positions=1024)
    pyramidion_base(args)
    task = argparse.Namespace(source_dictionary=dictionary, target_dictionary=dictionary)
    with pytest.raises(OptionError, match=r"'2:4096,3:2048' pools to 2048 states at the least"):
        PyramidionModel.build_model(args, task)


# ---------------------------------------------------------------- in-process encoder / model


def toy_dictionary(words: int = 20) -> Dictionary:
    dictionary = Dictionary()
    for i in range(words):
        dictionary.add_symbol(f"w{i}")
    return dictionary


def tiny_args(**overrides) -> argparse.Namespace:
    values = dict(
        encoder_layers=3, decoder_layers=1, encoder_embed_dim=16, decoder_embed_dim=16,
        encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32, encoder_attention_heads=2,
        decoder_attention_heads=2, dropout=0.0, max_source_positions=64,
        max_target_positions=64, pooling_schedule="1:12,2:5", attention_block_size=4,
    )
    values.update(overrides)
    args = argparse.Namespace(**values)
    pyramidion_base(args)
    return args


def build_encoder(dictionary: Dictionary, **overrides) -> PyramidionEncoder:
    torch.manual_seed(0)
    args = tiny_args(**overrides)
    embed = torch.nn.Embedding(len(dictionary), 16, dictionary.pad())
    cfg = TransformerConfig.from_namespace(args)
    return PyramidionEncoder(cfg, dictionary, embed).double().eval()


def build_model(dictionary: Dictionary, **overrides) -> PyramidionModel:
    torch.manual_seed(0)
    task = argparse.Namespace(source_dictionary=dictionary, target_dictionary=dictionary)
    return PyramidionModel.build_model(tiny_args(**overrides), task).double().eval()


def token_batch(dictionary: Dictionary, lengths, left_pad: bool, seed: int = 0) -> torch.Tensor:
    """Sentences of random words ending in EOS, padded to the longest."""
    rng = random.Random(seed)
    total = max(lengths)
    rows = []
    for n in lengths:
        words = [dictionary.index(f"w{rng.randrange(20)}") for _ in range(n - 1)]
        sentence = words + [dictionary.eos()]
        pad = [dictionary.pad()] * (total - n)
        rows.append(pad + sentence if left_pad else sentence + pad)
    return torch.tensor(rows)


def test_encoder_pools_on_schedule_and_masks_padding():
    dictionary = toy_dictionary()
    encoder = build_encoder(dictionary)
    lengths = [30, 9, 3]
    tokens = token_batch(dictionary, lengths, left_pad=False)
    out = encoder(tokens, torch.tensor(lengths))
    states, mask = out["encoder_out"][0], out["encoder_padding_mask"][0]
    assert states.shape == (5, 3, 16) and mask.shape == (3, 5)
    # a pooled slot is real when it merged a real token: min(length, k) real slots
    assert (~mask).sum(dim=1).tolist() == [5, 5, 3]
    assert torch.isfinite(states).all()


def test_left_and_right_padding_give_the_same_pooled_states():
    dictionary = toy_dictionary()
    encoder = build_encoder(dictionary)
    lengths = [23, 14, 5, 2]
    right = encoder(token_batch(dictionary, lengths, left_pad=False), None)
    left = encoder(token_batch(dictionary, lengths, left_pad=True), None)
    assert torch.equal(right["encoder_padding_mask"][0], left["encoder_padding_mask"][0])
    torch.testing.assert_close(right["encoder_out"][0], left["encoder_out"][0],
                               rtol=1e-12, atol=1e-12)


def test_pooling_off_is_the_relu_former_encoder_and_fairseqs():
    """The vanilla baseline is exactly the encoder it extends; blocks only change attention."""
    dictionary = toy_dictionary()
    ours = build_encoder(dictionary, pooling_schedule="none", attention_block_size=0)
    cfg = TransformerConfig.from_namespace(tiny_args(pooling_schedule="none"))
    tokens = token_batch(dictionary, [17, 6], left_pad=False)
    expect = None
    for plain in (ReLUFormerEncoder(cfg, dictionary, torch.nn.Embedding(len(dictionary), 16, 1)),
                  TransformerEncoder(cfg, dictionary, torch.nn.Embedding(len(dictionary), 16, 1))):
        plain.load_state_dict(ours.state_dict(), strict=True)
        plain = plain.double().eval()
        expect = plain(tokens, None)["encoder_out"][0]
        torch.testing.assert_close(ours(tokens, None)["encoder_out"][0], expect,
                                   rtol=1e-10, atol=1e-10)
    # blocks at least as long as the input are full attention; shorter ones are not
    wide = build_encoder(dictionary, pooling_schedule="none", attention_block_size=32)
    torch.testing.assert_close(wide(tokens, None)["encoder_out"][0], expect,
                               rtol=1e-10, atol=1e-10)
    narrow = build_encoder(dictionary, pooling_schedule="none", attention_block_size=4)
    assert not torch.allclose(narrow(tokens, None)["encoder_out"][0][:, 0], expect[:, 0])


@pytest.mark.parametrize("activation", ["relu", "softmax"])
def test_combines_with_relu_attention(activation):
    """ReLU attention (3A's module) runs inside blocks and after pooling, padding-invariant."""
    dictionary = toy_dictionary()
    encoder = build_encoder(dictionary, attention_activation=activation)
    attention = type(encoder.layers[0].self_attn).__name__
    assert attention == "ActivationMultiheadAttention"
    assert encoder.layers[0].self_attn.activation == activation
    lengths = [21, 8]
    right = encoder(token_batch(dictionary, lengths, left_pad=False), None)
    left = encoder(token_batch(dictionary, lengths, left_pad=True), None)
    torch.testing.assert_close(right["encoder_out"][0], left["encoder_out"][0],
                               rtol=1e-12, atol=1e-12)


def test_too_long_input_names_the_flags():
    dictionary = toy_dictionary()
    encoder = build_encoder(dictionary, max_source_positions=16)
    with pytest.raises(ValueError, match="--max-source-positions 16.*--truncate-source"):
        encoder(token_batch(dictionary, [17], left_pad=False), None)


class _Split:
    """A loaded split as the check sees it: its source sizes."""

    def __init__(self, sizes):
        self.src_sizes = sizes


def test_source_length_check_runs_again_on_a_reloaded_split_with_a_reused_id():
    """The check remembers the split it checked, not its id(): a split loaded again can get
    the id of the freed one, and must still be checked."""
    task = argparse.Namespace(datasets={"train": _Split([5, 9])})
    check = SourceLengthCheck(argparse.Namespace(train_subset="train"), task)
    check(10)
    old_id = id(task.datasets["train"])
    for _ in range(1000):  # CPython hands a freed object's memory to the next one of its size
        task.datasets["train"] = _Split([5, 30])
        if id(task.datasets["train"]) == old_id:
            break
    with pytest.raises(OptionError, match="has a source of 30 tokens, longer than "
                                          "--max-source-positions 10"):
        check(10)
    check(30)  # a checked split is not checked again; a longer limit is fine


def test_a_layer_that_never_pools_the_training_data_is_said_once(caplog):
    """Layer 1 keeps all 21 tokens of the longest source; layer 2 pools. One warning per
    model, however often the split is loaded."""
    task = argparse.Namespace(datasets={"train": _Split([5, 21])})
    args = argparse.Namespace(train_subset="train", pooling_schedule="1:512,2:16")
    check = SourceLengthCheck(args, task, {1: 512, 2: 16})
    with caplog.at_level("WARNING", logger="relu_former.pyramidion.model"):
        check(1024)
        task.datasets["train"] = _Split([5, 21])
        check(1024)
    assert [r.getMessage() for r in caplog.records] == [
        "--pooling-schedule '1:512,2:16': the longest source of split 'train' has 21 tokens, "
        "so layer 1 (to 512) never pools: only layer 2 (to 16) pools. Lengths below 21 pool; "
        "write 'none' to train without pooling on purpose"]
    caplog.clear()
    quiet = SourceLengthCheck(args, argparse.Namespace(datasets={"train": _Split([5, 600])}),
                              {1: 512, 2: 16})
    quiet(1024)
    assert not caplog.records


def test_layerdrop_with_pooling_is_refused():
    with pytest.raises(ValueError, match="--encoder-layerdrop"):
        build_encoder(toy_dictionary(), encoder_layerdrop=0.2)


def beam_search(model, dictionary, tokens, beam: int = 3):
    generator = SequenceGenerator([model], dictionary, beam_size=beam, max_len_a=0,
                                  max_len_b=6)
    lengths = tokens.ne(dictionary.pad()).sum(dim=1)
    sample = {"net_input": {"src_tokens": tokens, "src_lengths": lengths}}
    with torch.no_grad():
        hypos = generator.generate([model], sample)
    return [[(h["tokens"].tolist(), float(h["score"])) for h in sent] for sent in hypos]


def test_beam_search_over_pooled_states_matches_one_sentence_at_a_time():
    """Beam search reorders the pooled states and mask: a batch decodes like its members."""
    dictionary = toy_dictionary()
    model = build_model(dictionary)
    lengths = [26, 11, 4]
    batch = beam_search(model, dictionary, token_batch(dictionary, lengths, left_pad=True))
    left_right = beam_search(model, dictionary, token_batch(dictionary, lengths, left_pad=False))
    for i, n in enumerate(lengths):
        alone = beam_search(model, dictionary, token_batch(dictionary, lengths, False)[i:i + 1, :n])
        for got, want, other in zip(batch[i], alone[0], left_right[i]):
            assert got[0] == want[0] == other[0]
            assert got[1] == pytest.approx(want[1], abs=1e-9)
            assert got[1] == pytest.approx(other[1], abs=1e-9)


def test_cross_attention_is_returned_over_the_source_tokens():
    """The decoder's attention (what --print-alignment reads) covers the source as given:
    one column per source position, rows summing to 1, nothing on padding, and a left-padded
    batch gives the right-padded one's columns, shifted by its padding."""
    dictionary = toy_dictionary()
    model = build_model(dictionary)
    lengths = [26, 11, 4]
    previous = token_batch(dictionary, [5, 5, 5], left_pad=False, seed=1)
    attention = {}
    for left in (False, True):
        tokens = token_batch(dictionary, lengths, left_pad=left)
        with torch.no_grad():
            _, extra = model(tokens, torch.tensor(lengths), previous)
        attn = extra["attn"][0]
        assert attn.shape == (3, 5, 26)
        torch.testing.assert_close(attn.sum(dim=2), torch.ones(3, 5, dtype=attn.dtype))
        assert (attn.masked_select(tokens.eq(dictionary.pad()).unsqueeze(1)) == 0).all()
        attention[left] = attn
    for i, n in enumerate(lengths):
        torch.testing.assert_close(attention[True][i, :, 26 - n:], attention[False][i, :, :n],
                                   rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- command line (slow)


def write_long_documents(folder: Path, seed: int = 0) -> Path:
    """Documents of 60-200 words; the 'summary' is the translation of their first 6 words."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, size in {"train": 48, "valid": 6, "test": 6}.items():
        sources, targets = [], []
        for _ in range(size):
            words = [rng.randrange(40) for _ in range(rng.randint(60, 200))]
            sources.append(" ".join(f"w{i}" for i in words))
            targets.append(" ".join(f"v{i}" for i in words[:6]))
        (folder / f"{split}.de").write_text("\n".join(sources) + "\n")
        (folder / f"{split}.en").write_text("\n".join(targets) + "\n")
    return folder


@pytest.fixture(scope="module")
def long_data_bin(tmp_path_factory) -> Path:
    raw = write_long_documents(tmp_path_factory.mktemp("long_raw"))
    return preprocess(raw, tmp_path_factory.mktemp("long_bin"))


# (fairseq 0.12 builds no batch at all from a split of fewer sentences than
# --required-batch-size-multiple that fits in one batch, hence the 1)
SHRINK = ["--encoder-layers", "2", "--max-source-positions", "256", "--max-tokens", "1200",
          "--required-batch-size-multiple", "1"]
SHORT_GENERATION = ["--max-len-a", "0", "--max-len-b", "8", "--max-source-positions", "256",
                    "--required-batch-size-multiple", "1"]
# fairseq 0.12's translation task pads sources on the left by default; its boolean flag
# `--left-pad-source` is a store_false switch, so passing it pads on the right.
RIGHT_PAD = "--left-pad-source"


def hypotheses(stdout: str) -> dict:
    return dict(re.findall(r"^H-(\d+)\t\S+\t(.*)$", stdout, flags=re.M))


@pytest.mark.slow
def test_pyramidion_relu_blockwise_trains_and_beam_decodes_left_padded(long_data_bin, tmp_path):
    run = FairseqRun(data_bin=long_data_bin, work=tmp_path)
    run.train(*SHRINK, "--pooling-schedule", "1:64,2:24", "--attention-block-size", "32",
              "--attention-activation", "relu", arch="pyramidion_base")
    out = run.generate(*SHORT_GENERATION, "--beam", "3")
    assert len(hypotheses(out.stdout)) == 6


@pytest.mark.slow
def test_transpooler_sparse_softmax_trains_and_beam_decodes_right_padded(long_data_bin,
                                                                         tmp_path):
    run = FairseqRun(data_bin=long_data_bin, work=tmp_path)
    proc = run.train(*SHRINK, "--pooling-schedule", "last:16", "--pooling-scorer", "power",
                     "--criterion", "sparse_softmax_cross_entropy", "--sparse-softmax-k", "10",
                     RIGHT_PAD, arch="transpooler_base")
    assert "SparseSoftmaxCrossEntropyCriterion" in proc.stdout + proc.stderr
    out = run.generate(*SHORT_GENERATION, "--beam", "4", RIGHT_PAD)
    assert len(hypotheses(out.stdout)) == 6


@pytest.mark.slow
def test_training_sources_longer_than_max_positions_fail_clearly(long_data_bin):
    """fairseq-train would silently skip them; the model refuses, naming the flags.

    fairseq asks the model for max_positions() right after loading the training split (the
    trainer's get_train_iterator); that is the call checked here, on a real task and split.
    """
    from fairseq import options, tasks

    def model_and_task(*flags):
        parser = options.get_training_parser()
        args = options.parse_args_and_arch(parser, [
            str(long_data_bin), "--arch", "transpooler_base", "--pooling-schedule", "last:16",
            "--encoder-layers", "1", "--decoder-layers", "1", *flags,
        ])
        task = tasks.setup_task(args)
        model = task.build_model(args)
        model.max_positions()  # nothing loaded yet: nothing to check
        task.load_dataset(args.train_subset, epoch=1, combine=True)
        return model, task  # the model holds only a weak reference to its task

    model, task = model_and_task("--max-source-positions", "100")
    with pytest.raises(ValueError, match=r"'train' has a source of \d+ tokens, longer than "
                                         r"--max-source-positions 100: pass --truncate-source"):
        model.max_positions()
    model, task = model_and_task("--max-source-positions", "100", "--truncate-source")
    assert model.max_positions()[0] == 100
    model, task = model_and_task("--max-source-positions", "256")
    assert model.max_positions()[0] == 256


@pytest.mark.slow
@pytest.mark.parametrize("flags,message", [
    (["--max-source-positions", "1024"],
     "--pooling-schedule: '2:4096,3:2048' pools to 2048 states at the least, but "
     "--max-source-positions is 1024: no input is long enough to be pooled"),
])
def test_schedules_that_would_not_pool_stop_fairseq_train_in_one_line(fairseq_run, flags,
                                                                      message):
    """pyramidion_base below its schedule used to train without pooling, and '' meant none."""
    proc = fairseq_run.train("--encoder-layers", "3", *flags, arch="pyramidion_base",
                             check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"fairseq-train: error: {message}"), last


@pytest.mark.slow
def test_print_alignment_names_source_words_of_a_pooling_model(fairseq_run):
    """The pooled encoder output is shorter than the source; alignments still index the
    source's words (fairseq-generate used to stop with an IndexError part-way)."""
    fairseq_run.train("--pooling-schedule", "last:4", arch="pyramidion")
    out = fairseq_run.generate("--print-alignment").stdout
    sources = dict(re.findall(r"^S-(\d+)\t(.*)$", out, flags=re.M))
    found = hypotheses(out)
    alignments = dict(re.findall(r"^A-(\d+)\t(.*)$", out, flags=re.M))
    assert len(sources) == len(found) == len(alignments) == 20
    assert max(len(line.split()) for line in sources.values()) > 4  # so the encoder pooled
    for ident, pairs in alignments.items():
        for pair in pairs.split():
            source, target = map(int, pair.split("-"))
            assert 0 <= source < len(sources[ident].split())
            assert 0 <= target < len(found[ident].split())


@pytest.mark.slow
def test_a_schedule_longer_than_every_training_source_says_so_at_train_start(fairseq_run,
                                                                              toy_raw_corpus):
    """--max-source-positions (1024) lets 1:512,2:256 pool, but no training source is longer
    than 256: one warning line names the flag, the longest source and what never pools."""
    longest = 1 + max(len(line.split())
                      for line in (toy_raw_corpus / "train.de").read_text().splitlines())
    proc = fairseq_run.train("--encoder-layers", "2", "--pooling-schedule", "1:512,2:256",
                             arch="pyramidion")
    log = proc.stdout + proc.stderr
    lines = [line for line in log.splitlines() if "WARNING" in line and "pool" in line]
    assert len(lines) == 1, log[-3000:]
    assert lines[0].endswith(
        f"--pooling-schedule '1:512,2:256': the longest source of split 'train' has {longest} "
        "tokens, so layer 1 (to 512), layer 2 (to 256) never pool: the model trains without "
        f"pooling, as the unpooled baseline. Lengths below {longest} pool; write 'none' to "
        "train without pooling on purpose"), lines[0]

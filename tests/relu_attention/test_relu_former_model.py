"""The relu_former model: architectures, flags, incremental decoding, the CLI end to end."""

import re
import sys

import pytest
import torch
import torch.nn.functional as F
from fairseq import checkpoint_utils, options, tasks
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

import relu_former.plugin  # noqa: F401  (registers the plugin)
from relu_former.relu_attention.activations import ACTIVATIONS
from relu_former.relu_attention.attention import ActivationMultiheadAttention
from relu_former.relu_attention.config import FFN_ACTIVATIONS

from helpers import TINY_MODEL_ARGS, USER_DIR, fairseq_command, run_command

FFN_FOR = {"relu": "stock", "softmax": "softmax", "sparsemax": "softmax_ln",
           "entmax15": "stock", "rela": "softmax_ln"}


def parse(data, *flags, arch="relu_former_iwslt_de_en"):
    parser = options.get_training_parser()
    return options.parse_args_and_arch(
        parser, [str(data), "--user-dir", USER_DIR, "--arch", arch, "--cpu", *flags])


def build(data, *flags):
    args = parse(data, *TINY_MODEL_ARGS, "--dropout", "0", *flags)
    task = tasks.setup_task(args)
    return args, task, task.build_model(args)


def attention_modules(model):
    return {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Module)
            and name.endswith(("self_attn", "encoder_attn"))}


@pytest.mark.parametrize("arch, sizes", [
    ("relu_former_iwslt_de_en", (6, 6, 512, 1024, 4)),
    ("relu_former_wmt_en_de", (6, 6, 512, 2048, 8)),
    ("relu_former_wmt_en_de_big", (6, 6, 1024, 4096, 16)),
    ("relu_former_doc", (6, 6, 512, 2048, 8)),
])
def test_architectures_are_sized_as_the_paper(arch, sizes, toy_data_bin):
    args = parse(toy_data_bin, arch=arch)
    got = (args.encoder_layers, args.decoder_layers, args.encoder_embed_dim,
           args.encoder_ffn_embed_dim, args.encoder_attention_heads)
    assert got == sizes
    assert (args.decoder_embed_dim, args.decoder_ffn_embed_dim,
            args.decoder_attention_heads) == sizes[2:]
    assert args.attention_activation == "relu" and args.relu_gamma == 1.0
    if arch == "relu_former_doc":
        assert args.max_source_positions >= 2048 and args.max_target_positions >= 2048
    # the doc arch tiles (the default backend); a key chunk size would be ignored there
    assert args.attention_key_chunk_size == 0 and args.attention_backend == "auto"


def test_per_kind_activations_and_stock_options(toy_data_bin):
    _, _, model = build(toy_data_bin, "--encoder-attention-activation", "softmax",
                        "--cross-attention-activation", "sparsemax", "--relu-gamma", "2",
                        "--relu-learn-gamma", "--encoder-normalize-before",
                        "--share-all-embeddings", "--attention-key-chunk-size", "8",
                        "--attention-backend", "reference")
    modules = attention_modules(model)
    assert len(modules) == 3 and all(isinstance(m, ActivationMultiheadAttention)
                                     for m in modules.values())
    assert modules["encoder.layers.0.self_attn"].activation == "softmax"
    assert modules["decoder.layers.0.self_attn"].activation == "relu"
    assert modules["decoder.layers.0.encoder_attn"].activation == "sparsemax"
    relu = modules["decoder.layers.0.self_attn"]
    torch.testing.assert_close(relu.gamma, torch.full((2,), 2.0))
    assert relu.attention_key_chunk_size == 8 and relu.attention_backend == "reference"
    assert model.encoder.layers[0].normalize_before
    assert model.encoder.embed_tokens is model.decoder.embed_tokens


def sample(task, bsz=3, src_len=7, tgt_len=6):
    generator = torch.Generator().manual_seed(0)
    vocab = task.source_dictionary
    low, high = vocab.nspecial, len(vocab)
    src = torch.randint(low, high, (bsz, src_len), generator=generator)
    src[1, :2] = vocab.pad()  # fairseq pads sources on the left
    src[:, -1] = vocab.eos()
    target = torch.randint(low, high, (bsz, tgt_len), generator=generator)
    target[2, -2:] = vocab.pad()
    prev = torch.cat([torch.full((bsz, 1), vocab.eos()), target[:, :-1]], 1)
    prev[2, -1:] = vocab.pad()
    lengths = src.ne(vocab.pad()).sum(1)
    return {"net_input": {"src_tokens": src, "src_lengths": lengths,
                          "prev_output_tokens": prev},
            "target": target, "ntokens": int(target.ne(vocab.pad()).sum()), "id": None}


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_incremental_decoding_equals_full_forward(activation, toy_data_bin):
    _, task, model = build(toy_data_bin, "--attention-activation", activation,
                           "--ffn-activation", FFN_FOR[activation], "--decoder-layers", "2")
    # float64: in float32 the two orders of summation parted by 4e-5 once (ReLA, a random
    # initialisation), a flaky comparison
    model.double().eval()
    net_input = sample(task)["net_input"]
    prev = net_input["prev_output_tokens"][:2]  # rows without target padding
    src = {"src_tokens": net_input["src_tokens"][:2], "src_lengths": net_input["src_lengths"][:2]}
    with torch.no_grad():
        encoder_out = model.encoder(**src)
        full, _ = model.decoder(prev, encoder_out=encoder_out)
        state = {}
        steps = [model.decoder(prev[:, :t + 1], encoder_out=encoder_out,
                               incremental_state=state)[0] for t in range(prev.size(1))]
    assert full.dtype == torch.float64
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-10, atol=1e-10)


def test_criterion_adds_the_regularisers_in_a_training_step(toy_data_bin):
    args, task, model = build(toy_data_bin, "--criterion",
                              "regularized_label_smoothed_cross_entropy",
                              "--attention-activation", "relu", "--label-smoothing", "0.1",
                              "--attention-norm-loss-weight", "0.3",
                              "--attention-entropy-loss-weight", "0.2")
    criterion = task.build_criterion(args)
    model.train()
    batch = sample(task)
    loss, sample_size, log = criterion(model, batch)
    base, _, _ = LabelSmoothedCrossEntropyCriterion.forward(criterion, model, batch)
    expected = base + 0.3 * log["attn_norm_loss"] + 0.2 * log["attn_entropy_loss"]
    torch.testing.assert_close(loss, expected)
    assert log["attn_reg_rows"] == log["attn_rows"] > 0  # every attention is relu here
    loss.backward()
    assert model.encoder.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0


# flag -> a value it refuses; the message names the value and the flag
UNKNOWN_CHOICES = {"--attention-activation": "gelu", "--cross-attention-activation": "tanh",
                   "--ffn-activation": "gelu", "--attention-backend": "cuda",
                   "--relu-attention-scaling": "rms"}
ARGPARSE_CHOICES = {"--attention-entropy-margin-side": "sideways",
                    "--attention-norm-row-sum": "values"}
OUT_OF_RANGE = [  # (flag, value, the rule the message states after the flag)
    ("--relu-gamma", "0", "must be a finite number > 0"),
    ("--relu-gamma", "1e-30", "must be >= 0.001"), ("--relu-gamma", "abc", "must be a number"),
    ("--relu-gamma", "nan", "must be a finite number > 0"),
    ("--relu-gamma", "inf", "must be a finite number > 0"),
    ("--attention-key-chunk-size", "-4", "must be an integer >= 0"),
    ("--attention-key-chunk-size", "2.5", "must be an integer"),
]
BAD_FLAGS = (
    [(flag, value, f"'{value}' is unknown for {flag}") for flag, value in UNKNOWN_CHOICES.items()]
    + [(flag, value, f"argument {flag}: invalid choice: '{value}'")
       for flag, value in ARGPARSE_CHOICES.items()]
    + [(flag, value, f"{flag} {rule}") for flag, value, rule in OUT_OF_RANGE])


@pytest.mark.parametrize("flag, value, message", BAD_FLAGS)
def test_bad_flags_give_a_clear_error(flag, value, message, toy_data_bin, capsys):
    with pytest.raises(SystemExit):
        parse(toy_data_bin, "--criterion", "regularized_label_smoothed_cross_entropy", flag,
              value)
    assert message in capsys.readouterr().err


def test_new_flags_reach_every_relu_attention(toy_data_bin):
    _, _, model = build(toy_data_bin, "--relu-attention-scaling", "layernorm",
                        "--cross-attention-activation", "softmax")
    modules = attention_modules(model)
    assert modules["encoder.layers.0.self_attn"].relu_attention_scaling == "layernorm"
    assert modules["encoder.layers.0.self_attn"].relu_output_norm is not None
    assert modules["decoder.layers.0.encoder_attn"].activation == "softmax"
    assert modules["decoder.layers.0.encoder_attn"].relu_output_norm is None
    args, _, model = build(toy_data_bin)
    assert args.relu_attention_scaling == "factor"
    assert all(m.relu_attention_scaling == "factor" for m in attention_modules(model).values())


@pytest.mark.parametrize("flags, cross", [
    ([], "relu"),  # the default: the paper's full-ReLU model, ReLU in all three attentions
    (["--attention-activation", "relu"], "relu"),
    (["--cross-attention-activation", "softmax"], "softmax"),  # our hybrid, one flag away
    (["--attention-activation", "sparsemax"], "sparsemax"),
])
def test_default_is_relu_in_every_attention_and_the_hybrid_one_flag_away(flags, cross,
                                                                         toy_data_bin):
    _, _, model = build(toy_data_bin, *flags)
    modules = attention_modules(model)
    selfs = {modules[name].activation for name in modules if name.endswith("self_attn")}
    assert selfs == {"sparsemax" if "sparsemax" in flags else "relu"}
    assert modules["decoder.layers.0.encoder_attn"].activation == cross


# One real fairseq-train per kind of check (a combination found after parsing); each flag's own
# values are refused in-process by test_bad_flags_give_a_clear_error above.
@pytest.mark.slow
@pytest.mark.parametrize("flags, message", [
    (["--relu-learn-gamma", "--relu-attention-scaling", "none"],
     "fairseq-train: error: --relu-learn-gamma learns the gamma"),
])
def test_bad_ablation_flags_stop_before_training(flags, message, fairseq_run):
    proc = fairseq_run.train("--criterion", "regularized_label_smoothed_cross_entropy", *flags,
                             arch="relu_former_iwslt_de_en", check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert message in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "num_updates" not in proc.stdout + proc.stderr  # not a single update ran
    assert not (fairseq_run.work / "checkpoints" / "checkpoint_last.pt").exists()


# The ablations of the paper's Table 5 that change the model or the criterion; learned gamma
# and key chunks are covered by the relu case of test_train_and_generate_end_to_end. Each
# criterion-only reading rides along with a model variant, and the LayerNorm variant runs with
# softmax cross-attention (ReLU in self-attention only), to keep the CLI runs few.
ABLATION_RUNS = {
    "no_factor": ["--relu-attention-scaling", "none", "--attention-entropy-margin-side",
                  "above"],
    "layernorm_self_relu_only": ["--relu-attention-scaling", "layernorm",
                                 "--attention-norm-row-sum", "weights",
                                 "--cross-attention-activation", "softmax",
                                 "--attention-entropy-loss-weight", "0"],
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(ABLATION_RUNS))
def test_ablation_variants_train_decode_and_reload(variant, fairseq_run):
    flags = ABLATION_RUNS[variant]
    proc = fairseq_run.train("--criterion", "regularized_label_smoothed_cross_entropy",
                             "--label-smoothing", "0.1", "--attention-activation", "relu",
                             *flags, arch="relu_former_iwslt_de_en")
    log = proc.stdout + proc.stderr
    losses = [float(x) for x in re.findall(r"train_inner .* loss=([\d.]+)", log)]
    first, last = first_and_last(losses)
    assert last < first, losses
    assert re.search(r"attn_norm_loss[= ][\d.]+", log)
    fairseq_run.generate()
    path = str(fairseq_run.work / "checkpoints" / "checkpoint_last.pt")
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([path])
    modules = attention_modules(models[0])
    self_attn = modules["encoder.layers.0.self_attn"]
    cross = modules["decoder.layers.0.encoder_attn"]
    if variant == "no_factor":
        assert self_attn.relu_attention_scaling == cross.relu_attention_scaling == "none"
    if variant == "layernorm_self_relu_only":
        assert self_attn.relu_attention_scaling == "layernorm"
        assert self_attn.relu_output_norm is not None and cross.relu_output_norm is None
        assert self_attn.activation == "relu" and cross.activation == "softmax"
    models[0].eval()
    out, _ = models[0](**sample(task)["net_input"])
    assert torch.isfinite(out).all()


def test_missing_entmax_names_the_flag(toy_data_bin, monkeypatch):
    monkeypatch.setitem(sys.modules, "entmax", None)  # `import entmax` raises ImportError
    with pytest.raises(ImportError, match="--attention-activation.*needs the 'entmax' package"):
        build(toy_data_bin, "--attention-activation", "entmax15")


def first_and_last(values):
    return values[0], values[-1]


# self-attention activation -> (cross-attention activation, FFN memory): every attention
# activation and every FFN memory is trained by one of these runs (the test below checks it)
END_TO_END_RUNS = {"relu": ("relu", "stock"), "sparsemax": ("entmax15", "softmax"),
                   "rela": ("softmax", "softmax_ln")}


def test_end_to_end_runs_cover_every_activation():
    covered = {a for self_act, (cross, _) in END_TO_END_RUNS.items() for a in (self_act, cross)}
    assert covered == set(ACTIVATIONS)
    assert {ffn for _, ffn in END_TO_END_RUNS.values()} == set(FFN_ACTIVATIONS)


@pytest.mark.slow
@pytest.mark.parametrize("activation", list(END_TO_END_RUNS))
def test_train_and_generate_end_to_end(activation, fairseq_run, monkeypatch):
    cross, ffn = END_TO_END_RUNS[activation]
    extra = ["--relu-learn-gamma", "--attention-key-chunk-size", "4",
             "--attention-backend", "reference"] if activation == "relu" else []
    proc = fairseq_run.train(
        "--criterion", "regularized_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--attention-activation", activation, "--cross-attention-activation", cross,
        "--ffn-activation", ffn, *extra, arch="relu_former_iwslt_de_en")
    log = proc.stdout + proc.stderr
    for figure in ("attn_entropy", "attn_zero_share", "attn_row_sum"):
        assert re.search(rf"{figure}[= ][\d.]+", log), log[-2000:]
    if activation == "relu":
        assert re.search(r"attn_norm_loss[= ][\d.]+", log)
    losses = [float(x) for x in re.findall(r"train_inner .* loss=([\d.]+)", log)]
    first, last = first_and_last(losses)
    assert last < first, losses  # it trains
    fairseq_run.generate()

    # after the checkpoint is reloaded every attention uses the activation, in training
    # mode too, and nothing calls the stock fused softmax kernel
    path = str(fairseq_run.work / "checkpoints" / "checkpoint_last.pt")
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([path])
    modules = attention_modules(models[0])
    assert len(modules) == 3 and all(isinstance(m, ActivationMultiheadAttention)
                                     for m in modules.values())
    assert {name: m.activation for name, m in modules.items()} == {
        "encoder.layers.0.self_attn": activation, "decoder.layers.0.self_attn": activation,
        "decoder.layers.0.encoder_attn": cross}
    monkeypatch.setattr(F, "multi_head_attention_forward",
                        lambda *a, **k: pytest.fail("fused softmax path taken"))
    for mode in (models[0].train, models[0].eval):
        mode()
        out, _ = models[0](**sample(task)["net_input"])
        assert torch.isfinite(out).all()
    if activation == "relu":
        assert all(m.relu_learn_gamma and m.attention_key_chunk_size == 4 for m in modules.values())
        interactive_smoke_test(fairseq_run)


def interactive_smoke_test(fairseq_run):
    proc = run_command(
        [fairseq_command("fairseq-interactive"), fairseq_run.data_bin, "--user-dir", USER_DIR,
         "--path", fairseq_run.work / "checkpoints" / "checkpoint_last.pt",
         "--source-lang", "de", "--target-lang", "en", "--beam", "2", "--cpu"],
        input="w1 w2 w3\nw4 w5\n")
    assert len(re.findall(r"^H-\d+\t", proc.stdout, flags=re.M)) == 2, proc.stdout[-2000:]


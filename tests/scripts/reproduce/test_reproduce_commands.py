"""Every training command a toy table would run parses with fairseq's own parser (the
plugin's architectures and flags), every generate command with the generation parser, and
every attention measurement with the analysis script's: a misspelt flag or a wrong choice
fails here, not 40 minutes into a table."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from scripts.reproduce import patient_train, timed_generate
from scripts.reproduce.cell_plan import foreign_parents, plan
from scripts.reproduce.kinds import kind_module, stopping_loss
from scripts.reproduce.run_options import RunOptions
from scripts.reproduce.spec import split_parent
from scripts.reproduce.tables import TABLES
from tests.scripts.reproduce.fairseq_epoch import fairseq_epoch
from tests.scripts.reproduce.settings_args import data_folder

FAIRSEQ_TABLES = sorted(name for name, spec in TABLES.items()
                        if spec.kind in ("translation", "summarization"))


@pytest.fixture(scope="module")
def parsers():
    from fairseq import options

    import relu_former.plugin  # noqa: F401  (registers the plugin's archs, however run)

    return options


@pytest.mark.parametrize("name", FAIRSEQ_TABLES)
def test_every_toy_command_parses(name, parsers, tmp_path, monkeypatch):
    from scripts.analysis import analyze_attention
    from scripts.reproduce.kinds import translation

    # the fake data has no training split to count an epoch's batches in
    monkeypatch.setattr(translation, "epoch_updates", lambda *_: 285)
    (tmp_path / "bin" / "sentences").mkdir(parents=True)  # the attention analysis reads it
    data = {"folder": str(tmp_path), "description": "fake"}
    options = RunOptions(scale="toy", seeds=1, work=tmp_path)
    own = TABLES[name]
    # the other tables' cells that rows start from (Table 6's: Table 4's sentence models) or
    # are (Table 5's softmax and ReLUFormer: Table 4's)
    parents = {(f"{table}:{cell.row.key}", cell.seed): cell
               for table, rows in foreign_parents(own.rows, own.settings("toy")).items()
               for cell in plan(TABLES[table], replace(options, rows=rows), data)}
    cells = plan(own, options, data, parents=parents)
    assert cells
    measured = 0
    for cell in cells:
        spec = own
        if cell.row.same_as:  # another table's model: its commands are that table's
            assert cell.parent.row.flags == cell.row.flags
            spec, cell = TABLES[split_parent(cell.row.same_as)[0]], cell.parent
        kind = kind_module(spec.kind)
        settings = spec.settings("toy")
        parent = cell.parent.folder if cell.parent else None
        for step in kind.steps(spec, cell.row, 1, "toy", settings, data, cell.folder, parent):
            if step.argv is None:
                continue
            program, args = Path(step.argv[0]).name, step.argv[1:]
            if step.trains:  # fairseq-train, through the launcher that keeps --patience's count
                assert step.argv[:3] == [sys.executable, "-m", patient_train.MODULE]
                program, args = "fairseq-train", patient_train.train_args(step.argv)
            elif step.argv[1:3] == ["-m", timed_generate.MODULE]:  # it times on the CPU clock
                program, args = "fairseq-generate", step.argv[3:]
                assert step.timed  # with the call's other steps paused
            if args[:2] == ["-m", "scripts.analysis.analyze_attention"]:
                # measured on the decoded model, on the validation split
                parsed = analyze_attention.parse_args(args[2:])
                assert parsed.path == [str(cell.folder / "checkpoint_best.pt")]
                assert parsed.gen_subset == "valid" and parsed.json == (
                    cell.folder / translation.ATTENTION)
                measured += 1
                continue
            if program == "fairseq-train":
                parser = parsers.get_training_parser()
            elif program == "fairseq-generate":
                parser = parsers.get_generation_parser()
            else:
                continue
            parsed = parsers.parse_args_and_arch(parser, input_args=args)
            assert parsed.seed == 1
            if program != "fairseq-train":
                # a plateau run decodes its best validated model
                best = "patience" in settings
                assert parsed.path.endswith("checkpoint_best.pt" if best else "_last.pt")
                continue
            # the table's depths reach fairseq (the decoder's may differ from the encoder's)
            assert parsed.encoder_layers == settings["layers"]
            assert parsed.decoder_layers == settings.get("decoder_layers", settings["layers"])
            if parent is not None:
                assert parsed.finetune_from_model == str(parent / "checkpoint_last.pt")
            if "patience" in settings:  # to a plateau: validated every half epoch
                assert (parsed.patience, parsed.max_epoch, parsed.max_update) == (
                    settings["patience"], settings["max_epoch"], 0)
                assert parsed.validate_interval_updates == parsed.save_interval_updates == 142
                # the loss the table stops on (the nll, or each row's own criterion's)
                assert parsed.best_checkpoint_metric == stopping_loss(spec)
    # a table that asks for attention figures measures each model it trains and decodes
    asks = "attention_sentences" in own.settings("toy")
    assert measured == sum(asks and not cell.row.same_as and not cell.row.hidden
                           for cell in cells)



def test_translation_plateau_flags_validate_twice_a_fairseq_epoch(tmp_path, table4_data):
    """The translation kind's training command carries the plateau flags at half the epoch
    fairseq's own translation task batches on real tiny data (the summaries share these
    flags with their own language pair)."""
    from scripts.reproduce.kinds import translation

    spec = TABLES["relu_former_table4"]
    settings = {**spec.settings("tiny"), "locale_dir": str(table4_data / "locale")}
    data = data_folder(table4_data)  # Table 4's tiny data, built once
    train = translation.steps(spec, spec.rows[0], 1, "tiny", settings,
                              {"folder": str(data)}, tmp_path / "cell", None)[0]
    args, updates = fairseq_epoch(train.argv)
    assert args.validate_interval_updates == args.save_interval_updates == 2  # 4 an epoch
    assert updates // settings["validations_per_epoch"] == 2
    flags = translation.plateau_flags(settings, updates)
    start = train.argv.index("--max-epoch")
    assert train.argv[start:start + len(flags)] == flags
    # and the sentence data's pair and limits are the defaults the summaries override
    epoch = translation.epoch_updates(Path(args.data), args.max_tokens, 256)
    assert translation.plateau_flags(settings, epoch) == flags


def test_plateau_flags_validate_evenly_where_the_epoch_is_odd(parsers, monkeypatch):
    """fairseq's own validate_and_save, driven over 3 epochs of 5 updates under the plateau
    flags for that epoch, validates every 2 updates and nowhere else: no second validation at
    an epoch's end a few updates after the last (the patience and the trend window count
    validations)."""
    from types import SimpleNamespace

    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import train

    from scripts.reproduce.kinds import translation

    settings = {"max_epoch": 3, "patience": 100, "validations_per_epoch": 2}
    args = parsers.parse_args_and_arch(parsers.get_training_parser(), input_args=[
        "data-bin", "--arch", "transformer", *translation.plateau_flags(settings, 5)])
    cfg = convert_namespace_to_omegaconf(args)
    validated, saved = [], []
    trainer = SimpleNamespace(updates=0, get_num_updates=lambda: trainer.updates,
                              cumulative_training_time=lambda: 0.0)
    monkeypatch.setattr(train, "validate", lambda *_: validated.append(trainer.updates) or [1.0])
    monkeypatch.setattr(train.checkpoint_utils, "save_checkpoint",
                        lambda *_: saved.append(trainer.updates))
    monkeypatch.setattr(train.should_stop_early, "best", None, raising=False)
    for epoch in (1, 2, 3):
        for step in range(1, 6):
            trainer.updates += 1
            train.validate_and_save(cfg, trainer, None, SimpleNamespace(epoch=epoch),
                                    ["valid"], end_of_epoch=step == 5)
    assert validated == saved == [2, 4, 6, 8, 10, 12, 14]

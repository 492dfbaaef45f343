"""A run's record: fairseq-train's json log folded into it, a finished log reused."""

from __future__ import annotations

from scripts.common.run_record import Run, parse_log_line, trained_before


def test_fairseq_log_lines_fold_into_a_run():
    run = Run("relu", "ReLUFormer", "relu_former_iwslt_de_en", [])
    lines = [
        "2026-11-29 08:00:41 | INFO | fairseq_cli.train | num. shared model params: 1,234,567 "
        "(num. trained: 1,234,567)",
        '2026-11-29 08:01:09 | INFO | train_inner | {"epoch": 1, "loss": "12.2", '
        '"nll_loss": "11.9", "attn_zero_share": "0.49", "wps": "1375", "num_updates": "20"}',
        '2026-11-29 08:01:31 | INFO | train_inner | {"epoch": 1, "loss": "11.3", '
        '"nll_loss": "10.8", "wps": "1448.4", "num_updates": "40"}',
        '2026-11-29 08:01:51 | INFO | valid | {"epoch": 1, "valid_loss": "10.5", '
        '"valid_nll_loss": "10.1", "valid_num_updates": "40"}',
        "2026-11-29 08:01:51 | INFO | fairseq_cli.train | done training in 65.2 seconds",
    ]
    tags = [parse_log_line(line, run) for line in lines]
    assert tags == [None, "train_inner", "train_inner", "valid", None]
    assert run.params == 1234567
    assert run.losses == [(20, 11.9), (40, 10.8)]
    assert run.wps == [1375.0, 1448.4] and run.updates == 40
    assert run.valid_nll == 10.1 and run.train_seconds == 65.2


def test_resume_reuses_only_finished_trainings(tmp_path):
    run = Run("softmax", "Transformer", "relu_former_iwslt_de_en", [])
    folder = tmp_path / "softmax"
    folder.mkdir()
    (folder / "checkpoint_last.pt").write_bytes(b"")
    log = ('2026-11-29 08:01:09 | INFO | train_inner | {"nll_loss": "9.5", "wps": "900", '
           '"num_updates": "10"}\n')
    (folder / "train.log").write_text(log)
    assert not trained_before(run, tmp_path)  # no "done training": interrupted
    assert run.losses == []
    (folder / "train.log").write_text(log + "x | fairseq_cli.train | done training in 3.5 "
                                      "seconds\n")
    assert trained_before(run, tmp_path)
    assert run.losses == [(10, 9.5)] and run.train_seconds == 3.5 and run.updates == 10

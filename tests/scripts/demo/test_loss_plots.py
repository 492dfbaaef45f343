"""The demo's loss figure: one panel per task, legends outside the axes."""

from __future__ import annotations

import pytest

from scripts.demo.loss_plots import task_loss_panels

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_one_panel_per_task_with_curves_and_legends_below_the_axes(tmp_path, monkeypatch):
    from scripts.common import plotting

    figures = []
    saved = plotting.save_figure

    def keep(fig, path, dpi=120):
        figures.append(fig)
        fig.canvas.draw()  # lay out before the figure is closed
        boxes.append([(ax.get_window_extent(), ax.get_legend().get_window_extent())
                      for ax in fig.axes])
        return saved(fig, path, dpi)

    boxes: list = []
    monkeypatch.setattr("scripts.demo.loss_plots.save_figure", keep)
    path = task_loss_panels(
        tmp_path / "loss.png",
        {"Translation": {"softmax": ([1, 2], [9.0, 7.0]), "relu": ([1, 2], [9.5, 7.5])},
         "Summarization": {"vanilla": ([1, 2], [9.0, 8.0])}, "Empty": {}},
        "curves", references={"Summarization": ("unigram", 7.4)})
    assert path.read_bytes()[:8] == PNG_MAGIC
    (fig,) = figures
    assert [ax.get_title() for ax in fig.axes] == ["Translation", "Summarization"]
    translation, summary = fig.axes
    assert [line.get_label() for line in translation.get_lines()] == ["softmax", "relu"]
    assert [line.get_label() for line in summary.get_lines()] == ["vanilla", "unigram"]
    assert summary.get_lines()[1].get_ydata()[0] == 7.4
    for axes_box, legend_box in boxes[0]:
        assert legend_box.y1 <= axes_box.y0  # the legend lies wholly below its panel


def test_no_curves_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no training curves"):
        task_loss_panels(tmp_path / "x.png", {"Translation": {}}, "t")
    assert not (tmp_path / "x.png").exists()

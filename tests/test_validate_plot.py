"""validate --plot: predicted and measured bars per metric, the measured ones with their
range over the replays, written as a self-contained HTML file."""
from gpuprobe.validate.verdict import COMPARED
from gpuprobe.validate.plot import PANELS, figure, write_plot


def _out():
    rows = [{"layout": x, "metric": m, "predicted": 0.02 * (i + 1), "measured": 0.025 * (i + 1),
             "rel_error": -0.2} for i, x in enumerate(("monolithic", "intra")) for m in COMPARED]
    ranges = {"monolithic": {m: [0.02, 0.03] for m in COMPARED}, "intra": {m: None for m in COMPARED}}
    return {"rows": rows, "measured_range": ranges, "best_measured": "intra", "best_predicted": "intra",
            "summary": {"monolithic": {"median_abs_rel_error_p50": 0.2},
                        "intra": {"median_abs_rel_error_p50": None}}}


def test_each_panel_has_predicted_and_measured_with_replay_ranges():
    fig = figure(_out())
    assert len(fig.data) == 2 * len(PANELS)
    ttft = fig.data[1]  # the first panel's measured bars, in ms
    assert list(ttft.x) == ["monolithic", "intra"] and ttft.y[0] == 25.0
    assert abs(ttft.error_y.array[0] - 5.0) < 1e-9 and abs(ttft.error_y.arrayminus[0] - 5.0) < 1e-9
    assert ttft.error_y.array[1] == 0.0           # intra: one replay, no range to draw
    assert "monolithic 20%" in fig.layout.title.text


def test_write_plot_makes_a_standalone_html(tmp_path):
    path = tmp_path / "v.html"
    write_plot(_out(), str(path))
    text = path.read_text()
    assert "<html>" in text and "predicted" in text and "plotly" in text.lower()


def test_a_panel_spanning_ten_times_goes_log():
    out = _out()
    for r in out["rows"]:
        if r["metric"] == "tbt_p99_s" and r["layout"] == "monolithic":
            r["predicted"] = r["measured"] = 1.5  # 1.5 s against 0.05 s
    fig = figure(out)
    axes = {PANELS[i][0]: fig.layout[f"yaxis{'' if i == 0 else i + 1}"].type for i in range(len(PANELS))}
    assert axes["tbt_p99_s"] == "log" and axes["ttft_p50_s"] != "log"


def test_cli_writes_the_plot_and_prints_the_replay_spread(tmp_path, monkeypatch, capsys):
    import argparse

    import gpuprobe.validate.run as validate
    import gpuprobe.workloads.loading as loading
    from gpuprobe.cli.commands import validate as cmd

    out = _out()
    for s in out["summary"].values():
        s.update(slo_attainment_predicted=1.0, slo_attainment_measured=1.0)
    monkeypatch.setattr(validate, "run_validate", lambda wl, opts, progress=True: out)
    monkeypatch.setattr(loading, "load_named_workload", lambda store, name: None)
    p = argparse.ArgumentParser()
    cmd.add_arguments(p)
    args = p.parse_args(["--workload", "x", "--no-store", "--plot", str(tmp_path / "v.html")])
    args.store = None
    assert cmd.run(args) == 0
    assert (tmp_path / "v.html").stat().st_size > 0
    table = capsys.readouterr().out
    mono_ttft = next(ln for ln in table.splitlines() if ln.startswith("monolithic  ttft_p50_s"))
    assert mono_ttft.split()[-1] == "40%"  # (0.03 - 0.02) / 0.025


def test_a_plot_that_cannot_be_written_keeps_the_printed_results(tmp_path, monkeypatch, capsys):
    import argparse

    import pytest

    import gpuprobe.validate.run as validate
    import gpuprobe.workloads.loading as loading
    from gpuprobe.cli.commands import validate as cmd
    from gpuprobe.errors import UserError

    monkeypatch.setattr(validate, "run_validate", lambda wl, opts, progress=True: _out())
    monkeypatch.setattr(loading, "load_named_workload", lambda store, name: None)
    p = argparse.ArgumentParser()
    cmd.add_arguments(p)
    args = p.parse_args(["--workload", "x", "--no-store", "--json", "--plot",
                         str(tmp_path / "taken.html")])
    (tmp_path / "taken.html").mkdir()  # a directory where the file should go, made after the check
    args.store = None
    with pytest.raises(UserError, match="--plot: cannot write"):
        cmd.run(args)
    assert '"best_measured": "intra"' in capsys.readouterr().out  # the JSON went out first


def test_plot_path_must_name_an_html_file(tmp_path, capsys):
    import argparse

    import pytest

    from gpuprobe.cli.commands import validate as cmd

    p = argparse.ArgumentParser()
    cmd.add_arguments(p)
    with pytest.raises(SystemExit) as exc:
        p.parse_args(["--workload", "x", "--plot", str(tmp_path / "v.png")])
    assert exc.value.code == 2
    assert "ending in .html" in capsys.readouterr().err

"""`gpuprobe plan`: writes each engine's files for a stored recommendation, runs nothing, and
refuses an unknown id or a recommendation without a model in one line (exit 2)."""
from __future__ import annotations

import json
import subprocess

import pytest

from gpuprobe.cli.main import main
from gpuprobe.store import Store

PARAMS = {"monolithic": {"chunked_prefill": True, "max_num_batched_tokens": 512,
                         "max_num_seqs": 128},
          "intra": {"prefill_share": 0.3},
          "cross": {"num_prefill": 2, "num_decode": 3, "link": "nvlink"}}


def _store(tmp_path) -> tuple[str, dict]:
    db = str(tmp_path / "s.db")
    with Store.open(db) as store:
        ids = {layout: store.insert_recommendation({
            "workload": "azure-conv", "layout": layout, "params": p,
            "prefill_share": p.get("prefill_share"),
            "profile": json.dumps({"name": "h200", "meta": {"model": "meta-llama/Llama-3.1-8B"}})})
            for layout, p in PARAMS.items()}
        ids["nomodel"] = store.insert_recommendation({"workload": "w", "layout": "intra",
                                                      "params": {"prefill_share": 0.5}})
    return db, ids


@pytest.mark.parametrize("engine", ["vllm", "sglang", "dynamo", "gpuprobe"])
@pytest.mark.parametrize("layout", sorted(PARAMS))
def test_plan_writes_files_and_runs_nothing(tmp_path, engine, layout, capsys):
    db, ids = _store(tmp_path)
    out = tmp_path / "plan"
    rc = main(["--store", db, "plan", "--recommendation", str(ids[layout]), "--engine", engine,
               "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0 and "nothing was run" in printed
    names = {p.name for p in out.iterdir()}
    assert {"launch.sh", "README.md", "plan.json"} <= names
    plan = json.loads((out / "plan.json").read_text())
    assert plan["recommendation"] == ids[layout] and plan["deployment"]["layout"] == layout
    assert plan["deployment"]["devices"] == {"monolithic": 1, "intra": 1, "cross": 5}[layout]
    # the profile's model reaches every engine command that names one
    argv = [a for p in plan["processes"] for a in p["argv"]]
    if engine != "gpuprobe":
        assert "meta-llama/Llama-3.1-8B" in argv
    # launch.sh is valid shell (parsed, not run)
    subprocess.run(["bash", "-n", str(out / "launch.sh")], check=True)
    if engine == "dynamo" and layout != "intra":
        assert "dynamo_graph.yaml" in names
    if layout == "cross" and engine == "vllm":  # 2P3D: one server a side, its DP the workers
        dp = {p["name"].split()[0]: p["argv"][p["argv"].index("--data-parallel-size") + 1]
              for p in plan["processes"] if "--data-parallel-size" in p["argv"]}
        assert dp == {"prefill": "2", "decode": "3"}
    elif layout == "cross" and engine != "gpuprobe":  # a process per worker
        assert sum(" prefill " in f" {p['name']} " for p in plan["processes"]) == 2
        assert sum(" decode " in f" {p['name']} " for p in plan["processes"]) == 3
    if engine == "gpuprobe":
        assert {"serve.sh", "switch_curl.sh"} <= names
        assert f"recommendation {ids[layout]}" in (out / "switch_curl.sh").read_text()


def test_plan_refuses_unknown_id_and_missing_model(tmp_path, capsys):
    db, ids = _store(tmp_path)
    rc = main(["--store", db, "plan", "--recommendation", "77", "--engine", "vllm",
               "--out", str(tmp_path / "p")])
    err = capsys.readouterr().err
    assert rc == 2 and "--recommendation 77: no such recommendation" in err
    assert err.count("\n") == 1 and not (tmp_path / "p").exists()
    rc = main(["--store", db, "plan", "--recommendation", str(ids["nomodel"]), "--engine",
               "sglang", "--out", str(tmp_path / "p")])
    err = capsys.readouterr().err
    assert rc == 2 and "give --model NAME" in err and not (tmp_path / "p").exists()
    rc = main(["--store", db, "plan", "--recommendation", str(ids["nomodel"]), "--engine",
               "sglang", "--model", "Qwen/Qwen3-0.6B", "--out", str(tmp_path / "p")])
    assert rc == 0 and "--mem-fraction-static" in (tmp_path / "p" / "launch.sh").read_text()


def test_plan_refuses_unreadable_params_and_a_file_as_out(tmp_path, capsys):
    db, ids = _store(tmp_path)
    with Store.open(db) as store:
        bad = store.insert_recommendation({"workload": "w", "layout": "intra",
                                           "params": {"prefill_share": 1.5}})
    rc = main(["--store", db, "plan", "--recommendation", str(bad), "--engine", "vllm",
               "--model", "m", "--out", str(tmp_path / "p")])
    err = capsys.readouterr().err
    assert rc == 2 and "prefill_share must be between 0 and 1" in err and err.count("\n") == 1
    (tmp_path / "afile").write_text("x")
    rc = main(["--store", db, "plan", "--recommendation", str(ids["intra"]), "--engine", "vllm",
               "--out", str(tmp_path / "afile")])
    err = capsys.readouterr().err
    assert rc == 2 and "--out" in err and "cannot write there" in err and err.count("\n") == 1

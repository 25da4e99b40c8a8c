"""repredict's user errors: one line naming the file or flag, exit 2 (its result on a real
dump is checked against the live run in test_validate.py)."""
import pickle

from gpuprobe.validate.repredict import main


def test_a_file_that_is_not_a_dump_is_named(tmp_path, capsys):
    junk = tmp_path / "junk.pkl"
    junk.write_bytes(b"not a pickle")
    assert main([str(junk)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "junk.pkl" in err[0] and "not a readable validate dump" in err[0]
    other = tmp_path / "other.pkl"
    other.write_bytes(pickle.dumps({"rows": []}))
    assert main([str(other)]) == 2
    assert "other.pkl: not a validate dump" in capsys.readouterr().err


def test_passes_and_replays_must_be_positive(capsys):
    assert main(["--passes", "0", "x.pkl"]) == 2
    assert "--passes must be at least 1" in capsys.readouterr().err
    assert main(["--sim-seeds", "0", "x.pkl"]) == 2
    assert "--sim-seeds must be at least 1" in capsys.readouterr().err

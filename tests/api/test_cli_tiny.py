"""``gepard tiny`` refuses a --stop-after its size cannot count to, before writing anything."""

import subprocess
import sys

import pytest

from api.cli import main
from engine.tiny import TinyArgumentError, check_stop_after, write_tiny_checkpoint


def test_stop_after_past_the_tiny_limit_is_one_line_exit_2_and_no_directory(tmp_path, capsys):
    out = tmp_path / "ckpt"
    assert main(["tiny", str(out), "--stop-after", "60"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "gepard tiny: error: --stop-after 60: the tiny size stops after at most 56 frames (0 means never stop)"
    assert not out.exists()


def test_the_console_script_prints_no_traceback(tmp_path):
    out = tmp_path / "ckpt"
    proc = subprocess.run([sys.executable, "-c", "import sys; from api.cli import main; sys.exit(main())",
                           "tiny", str(out), "--stop-after", "60"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "at most 56 frames" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("stop_after, ok", [(56, True), (0, True), (None, True), (57, False), (-1, False)])
def test_the_check_accepts_exactly_the_counter_range(stop_after, ok):
    if ok:
        assert check_stop_after("tiny", stop_after) == (24 if stop_after is None else stop_after)
    else:
        with pytest.raises(TinyArgumentError, match="at most 56 frames"):
            check_stop_after("tiny", stop_after)
    assert check_stop_after("full", 336) == 336


def test_the_writer_leaves_an_existing_directory_alone_when_refusing(tmp_path):
    out = tmp_path / "existing"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(TinyArgumentError):
        write_tiny_checkpoint(out, stop_after=99, with_codec=False)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_an_out_dir_that_cannot_be_made_is_one_line_exit_2(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("mine")
    for out in (a_file, a_file / "ckpt", "/proc/no-such-process/tiny"):
        assert main(["tiny", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"gepard tiny: error: cannot write {out}: [Errno ") and err.count("\n") == 1, err
    assert a_file.read_text() == "mine"

"""The demo's clock: a stage's CPU time counts the processes under the demo, ended ones and
live ones (the reference server stays up across stages), and the table shows plan and actual."""
import subprocess
import sys

from gpuprobe.demo.clock import Clock

BURN = ("import sys, time\n"
        "t = time.process_time()\n"
        "while time.process_time() - t < 0.3: pass\n"
        "print('burnt', flush=True)\n"
        "if sys.argv[1] == 'stay': time.sleep(60)\n")


def test_a_stage_counts_the_cpu_of_ended_and_live_children():
    clock = Clock({"ended": 5.0, "live": 7.0})
    with clock.stage("ended"):
        subprocess.run([sys.executable, "-c", BURN, "end"], check=True, capture_output=True)
    live = None
    try:
        with clock.stage("live"):
            live = subprocess.Popen([sys.executable, "-c", BURN, "stay"], stdout=subprocess.PIPE, text=True)
            assert live.stdout.readline().strip() == "burnt"  # its CPU is spent, it still runs
    finally:
        if live is not None:
            live.kill()
            live.wait()
    (k1, _, cpu_ended), (k2, _, cpu_live) = clock.rows
    assert (k1, k2) == ("ended", "live")
    assert cpu_ended >= 0.28 and cpu_live >= 0.28, clock.rows
    lines = clock.table()
    assert lines[1].split()[:2] == ["ended", "5"] and lines[2].split()[:2] == ["live", "7"]
    assert lines[3].split()[:2] == ["total", "12"]
    assert "about 0.2 min" in clock.plan_lines()[0] and "live 7 s" in clock.plan_lines()[0]

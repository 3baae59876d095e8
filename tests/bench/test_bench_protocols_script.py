"""``benchmarks/bench_broker_protocols.py`` as a user meets it: ``--help`` names the protocols
and gives an example; a bad flag is one clear error, before any process starts."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "bench_broker_protocols.py")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=60)


def test_help_names_every_protocol_and_gives_an_example():
    r = run("--help")
    assert r.returncode == 0, r.stderr
    assert "--protocol {own,remoting,grpc,all}" in r.stdout
    assert "examples:" in r.stdout and "bench_broker_protocols.py --protocol all" in r.stdout


def test_a_bad_flag_is_one_clear_error():
    r = run("--protocol", "kafka")
    assert r.returncode == 2 and "invalid choice: 'kafka'" in r.stderr and "Traceback" not in r.stderr
    r = run("--messages", "0")
    assert r.returncode == 2 and "'0' must be positive" in r.stderr and "Traceback" not in r.stderr


def test_the_tables_ratios_compare_with_own_of_the_same_body_size():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import bench_broker_protocols as b
    finally:
        sys.path.pop(0)

    def row(protocol, size, rate, master_us):
        send = {"rate": rate, "p50": 1.0, "p99": 2.0, "broker_us": 3 * master_us, "master_us": master_us,
                "client_us": 70.0, "master_busy": 0.5, "client_busy": 0.05, "failed": 0, "stored": 10}
        return {"protocol": protocol, "size": size, "send": send, "consume": {"rate": rate, "got": 10},
                "fixed": {"p50": 1.0, "p99": 2.0, "failed": 0}}

    rows = b.table([row("own", 128, 3000, 200), row("own", 1024, 2000, 100), row("remoting", 128, 2400, 250),
                    row("remoting", 1024, 1000, 200)])
    # send/s vs own, CPU master, its vs own (own's over this one's), busy master / client
    assert [(r[3], r[11], r[12], r[14]) for r in rows] == [
        ("1.00", "200", "1.00", "50% / 5%"), ("1.00", "100", "1.00", "50% / 5%"),
        ("0.80", "250", "0.80", "50% / 5%"), ("0.50", "200", "0.50", "50% / 5%")]


def test_bench_broker_hands_protocol_runs_to_this_script():
    other = os.path.join(ROOT, "benchmarks", "bench_broker.py")
    r = subprocess.run([sys.executable, other, "--protocol", "kafka"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "invalid choice: 'kafka'" in r.stderr and "Traceback" not in r.stderr


def test_the_grpc_floor_script_refuses_a_bad_count():
    floor = os.path.join(ROOT, "benchmarks", "bench_grpc_floor.py")
    r = subprocess.run([sys.executable, floor, "--calls", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--calls must be at least 1" in r.stderr and "Traceback" not in r.stderr

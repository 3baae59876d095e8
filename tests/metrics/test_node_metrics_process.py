"""``dledger node --metrics-port`` as a real process: the endpoint answers with the node's metrics
(polled, every wait bounded) and ``/ready`` and ``/health`` beside them, its log lines name
group, node and term, SIGTERM still exits 0;
a metrics port in use, out of range or not a number is one error line and a non-zero exit."""

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from metrics.helpers import scrape, value
from transport.tcp_helpers import free_ports

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
TIMEOUT = 60


def env():
    e = {k: v for k, v in os.environ.items() if k != "DLEDGER_SECRET"}
    e["PYTHONPATH"] = str(SRC)
    return e


def dledger(*args, timeout=TIMEOUT, **kw):
    return subprocess.run([sys.executable, "-m", "dledger.cli", *args], capture_output=True, env=env(),
                          timeout=timeout, **kw)


def wait_for(predicate, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = predicate()
        except (OSError, KeyError):
            result = None
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


@pytest.mark.parametrize("via_file", [False, True])
def test_a_node_process_serves_its_metrics_and_logs_with_its_context(tmp_path, via_file):
    node_port, metrics_port = free_ports(2)
    peers = f"n0-127.0.0.1:{node_port}"
    if via_file:
        cfg = tmp_path / "node.toml"
        cfg.write_text(f'metrics_port = {metrics_port}\nmetrics_host = "127.0.0.1"\n'
                       f'group = "g"\nid = "n0"\npeers = "{peers}"\nstore_dir = "{tmp_path / "stores"}"\n')
        args = ["--config", str(cfg)]
    else:
        args = ["--group", "g", "--id", "n0", "--peers", peers, "--store-dir", str(tmp_path / "stores"),
                "--metrics-port", str(metrics_port), "--metrics-host", "127.0.0.1"]
    proc = subprocess.Popen([sys.executable, "-m", "dledger.cli", "node", *args], env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        wait_for(lambda: value(scrape(url, timeout=5), "dledger_role", group="g", node="n0", role="leader") == 1)
        r = dledger("append", "--peers", peers, "--group", "g", "--timeout", "20", "ab", "cde")
        assert r.returncode == 0, r.stderr
        s = wait_for(lambda: (lambda s: s if value(s, "dledger_committed_index", group="g", node="n0") == 1
                              else None)(scrape(url, timeout=5)))
        assert value(s, "dledger_appended_entries_total", group="g", node="n0") == 2
        assert value(s, "dledger_appended_bytes_total", group="g", node="n0") == 5
        assert value(s, "dledger_append_entry_latency_seconds_count", group="g", node="n0") == 2
        assert value(s, "dledger_term", group="g", node="n0") == 0
        base = f"http://127.0.0.1:{metrics_port}"
        with urllib.request.urlopen(f"{base}/ready", timeout=5) as resp:
            assert resp.status == 200 and resp.read() == b"ready: g/n0 LEADER in term 0, 0 behind\n"
        with urllib.request.urlopen(f"{base}/health", timeout=5) as resp:
            assert resp.status == 200 and resp.read() == b"live\n"
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{base}/", timeout=5)
        assert missing.value.code == 404
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(TIMEOUT) == 0
        err = proc.stderr.read().decode()
        assert "Traceback" not in err
        assert f"INFO dledger.node metrics on http://127.0.0.1:{metrics_port}/metrics, health on /health and " \
               f"/ready" in err
        assert "INFO dledger.core.rejoin [g/n0 term 0] n0: recovered" in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(TIMEOUT)


def test_a_metrics_port_in_use_is_one_line_and_exit_1(tmp_path):
    node_port, metrics_port = free_ports(2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", metrics_port))
        taken.listen()
        r = dledger("node", "--group", "g", "--id", "n0", "--peers", f"n0-127.0.0.1:{node_port}",
                    "--store-dir", str(tmp_path / "stores"), "--metrics-port", str(metrics_port),
                    "--metrics-host", "127.0.0.1", "--log-level", "WARNING")
    err = r.stderr.decode()
    assert r.returncode == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"cannot serve metrics on 127.0.0.1:{metrics_port}" in err and "in use" in err
    assert not (tmp_path / "stores").exists()            # refused before any node started


@pytest.mark.parametrize("port, words", [("70000", "70000 is out of range (0-65535)"), ("-1", "not a port number"),
                                         ("http", "not a port number")])
def test_a_bad_metrics_port_flag_is_one_line_and_exit_2(tmp_path, port, words):
    r = dledger("node", "--group", "g", "--id", "n0", "--peers", f"n0-127.0.0.1:{free_ports(1)[0]}",
                "--store-dir", str(tmp_path), f"--metrics-port={port}")
    err = r.stderr.decode()
    assert r.returncode == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "--metrics-port" in err and words in err


@pytest.mark.parametrize("setting", ['"9100"', "65536", "true"])
def test_a_bad_metrics_port_in_the_file_is_one_line_naming_the_key(tmp_path, setting):
    cfg = tmp_path / "node.toml"
    cfg.write_text(f'metrics_port = {setting}\ngroup = "g"\nid = "n0"\npeers = "n0-127.0.0.1:1"\n')
    r = dledger("node", "--config", str(cfg), "--store-dir", str(tmp_path / "stores"))
    err = r.stderr.decode()
    assert r.returncode == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{cfg}: metrics_port" in err


@pytest.mark.parametrize("args, words", [(["--ready-max-lag", "-5"], "--ready-max-lag: not a number of entries"),
                                         (["--ready-max-lag", "many"], "--ready-max-lag: not a number of entries")])
def test_a_bad_ready_max_lag_is_one_line_and_exit_2(tmp_path, args, words):
    r = dledger("node", "--group", "g", "--id", "n0", "--peers", f"n0-127.0.0.1:{free_ports(1)[0]}",
                "--store-dir", str(tmp_path), "--metrics-port", "0", *args)
    err = r.stderr.decode()
    assert r.returncode == 2 and err.count("\n") == 1 and words in err, err

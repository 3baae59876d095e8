"""The broker per client protocol: the project's msgpack wire, RocketMQ remoting, gRPC v2.

    python benchmarks/bench_broker_protocols.py [--protocol own|remoting|grpc|all] [--processes K]
                                                [--threads T] [--messages N] [--rate R]
                                                [--rate-seconds S] [--profile DIR] [--quick]

Three ``dledger broker`` processes on loopback (small segments from a TOML config, page_cache,
3 replicas), each serving all three protocols (``--broker-port``, ``--remoting-port`` with a
``dledger namesrv``, ``--grpc-port``), started once: with ``all`` the protocols run one after
another against the same group, so they compare on the same machine state. The load comes from
real clients as subprocesses: PyPI ``rocketmq`` 0.4.4 for remoting and
``rocketmq-python-client`` 5.1.2 for gRPC, each in its own virtualenv under ``.client-venvs/``
(made on first use by ``tests/helpers/client_venvs.py``), and the project's ``BrokerClient``
for ``own``. For each protocol and body size (128 B, 1 KiB) it prints:

- send: K processes of T threads, each thread sending N messages with the client's blocking
  send as fast as it answers (every process warms up first and all start together); messages
  answered OK per second over the whole load, and the send latency p50/p99 under that load;
- fixed rate: one thread sending at R messages/s for S seconds; send latency p50/p99;
- consume: one process reading back what the send step wrote (BrokerClient ``pull`` over the
  4 queues for own, a ``PullConsumer`` for remoting, a ``SimpleConsumer`` receive + ack for
  gRPC); messages/s from the first message to the last;
- the ratio of each rate to ``own``'s of the same body size;
- the CPU time per message of the send step: the three brokers together (``/proc``), the
  master alone (the busiest broker: the protocol is served there) with own's figure over it
  (what the protocol costs the master, whatever the client costs), and the producer processes
  together (their own ``getrusage``): the clients share the machine;
- how busy the master and the busiest producer process were over the send step (CPU time over
  wall time; 100 % = one core): a producer process near 100 % would be the bottleneck, not the
  broker (then raise ``--processes``).

The load average is printed before and after: compare figures only within one run.
``--profile DIR`` runs each broker under cProfile in every thread (``_profiled_broker.py``) and
prints the busiest one's top functions; its rates mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(HERE))

from _common import command, machine, print_table  # noqa: E402

from dledger.broker.client import BrokerClient  # noqa: E402
from dledger.transport.loopback import free_ports  # noqa: E402

PROTOCOLS = ("own", "remoting", "grpc")
SIZES = (128, 1024)
IDS = ("n0", "n1", "n2")
CONFIG = """mapped_file_size_for_entry_data = 16777216
mapped_file_size_for_entry_index = 4194304
heart_beat_time_interval_ms = 500
bootstrap = true
"""
CLIENT = HERE / "_protocol_client.py"
EXAMPLE = """examples:
  python benchmarks/bench_broker_protocols.py --protocol all
  python benchmarks/bench_broker_protocols.py --protocol remoting --processes 2 --threads 4 --messages 500
  python benchmarks/bench_broker_protocols.py --protocol all --quick
"""


class Group:
    """Three broker processes serving every protocol, and a name server."""

    def __init__(self, base: Path, profile: Path | None = None) -> None:
        self.base = base
        self.profile = profile
        ports = free_ports(13)
        self.namesrv = f"127.0.0.1:{ports[0]}"
        self.peers = ";".join(f"{i}-127.0.0.1:{p}" for i, p in zip(IDS, ports[1:4]))
        self.brokers = ";".join(f"{i}-127.0.0.1:{p}" for i, p in zip(IDS, ports[4:7]))
        self.remoting = dict(zip(IDS, ports[7:10]))
        self.grpc = dict(zip(IDS, ports[10:13]))
        self.procs: dict[str, subprocess.Popen] = {}
        (base / "broker.toml").write_text(CONFIG)

    def _spawn(self, name: str, argv: list[str]) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        run = ["-m", "dledger.cli"]
        if self.profile is not None and name in IDS:
            run = [str(HERE / "_profiled_broker.py"), str(self.profile / f"{name}.prof")]
        with open(self.base / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen([sys.executable, *run, *argv], env=env,
                                                stdout=log, stderr=subprocess.STDOUT)

    def start(self) -> "Group":
        self._spawn("namesrv", ["namesrv", "--port", self.namesrv.rpartition(":")[2], "--log-level", "WARNING"])
        endpoints = ";".join(f"{i}-127.0.0.1:{p}" for i, p in self.grpc.items())
        for i in IDS:
            self._spawn(i, ["broker", "--config", str(self.base / "broker.toml"), "--group", "bench", "--id", i,
                            "--peers", self.peers, "--brokers", self.brokers, "--store-dir", str(self.base),
                            "--broker-port", self.brokers.split(";")[IDS.index(i)].rpartition(":")[2],
                            "--remoting-port", str(self.remoting[i]), "--namesrv", self.namesrv,
                            "--grpc-port", str(self.grpc[i]), "--grpc-endpoints", endpoints,
                            "--log-level", "WARNING"])
        deadline = time.monotonic() + 90
        with BrokerClient(self.brokers, send_deadline=90) as c:    # until a master takes a message
            while not c.send("BenchWarmUp", 0, b"x").ok:
                if time.monotonic() > deadline:
                    raise SystemExit(f"no master within 90 s; logs in {self.base}")
        return self

    def address(self, protocol: str) -> str:
        return {"own": self.brokers, "remoting": self.namesrv, "grpc": f"127.0.0.1:{self.grpc['n0']}"}[protocol]

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user + system, all threads) each broker has used so far (``/proc``)."""
        out = {}
        for i in IDS:
            try:
                with open(f"/proc/{self.procs[i].pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                out[i] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            except (OSError, ValueError, IndexError):
                out[i] = float("nan")
        return out

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


def client_command(protocol: str, home: Path) -> tuple[str, dict]:
    if protocol == "own":
        return sys.executable, {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    from helpers.client_venvs import client_env, client_python
    return client_python(protocol), client_env(home)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def produce(group: Group, protocol: str, topic: str, size: int, processes: int, threads: int, count: int,
            rate: float | None = None) -> dict:
    """K client processes warm up, then send together; the summed outcome."""
    python, env = client_command(protocol, group.base / "home")
    argv = [python, str(CLIENT), "produce", protocol, group.address(protocol), topic, str(size), str(count),
            str(threads)] + ([str(rate)] if rate else [])
    procs = [subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(processes)]
    try:
        warm = 0
        for p in procs:
            line = p.stdout.readline()
            if not line.startswith("{"):
                raise SystemExit(f"{protocol} producer did not start: {p.stderr.read()[-2000:]}")
            warm += json.loads(line)["warm_ok"]
        cpu0 = group.cpu_seconds()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in procs:
            line = p.stdout.readline()
            if not line.startswith("{"):
                raise SystemExit(f"{protocol} producer failed: {p.stderr.read()[-2000:]}")
            results.append(json.loads(line))
            p.wait(60)
        cpu1 = group.cpu_seconds()
        brokers_cpu = {i: cpu1[i] - cpu0[i] for i in IDS}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    ok = sum(r["ok"] for r in results)
    for reason in sorted({e for r in results for e in r["errors"]}):
        print(f"  {protocol} {size} B: a send failed: {reason}", file=sys.stderr)
    seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
    lat = [x for r in results for x in r["lat_ms"]]
    master = max(IDS, key=lambda i: brokers_cpu[i])       # the protocol's serving and the puts are its
    per_msg = 1e6 / max(1, ok)
    return {"ok": ok, "failed": sum(r["failed"] for r in results), "rate": ok / seconds, "p50": pct(lat, 0.5),
            "p99": pct(lat, 0.99), "stored": ok + warm, "broker_us": sum(brokers_cpu.values()) * per_msg,
            "master_us": brokers_cpu[master] * per_msg, "master_busy": brokers_cpu[master] / seconds,
            "client_us": sum(r["cpu_s"] for r in results) * per_msg,
            "client_busy": max(r["cpu_s"] / max(1e-9, r["end"] - r["start"]) for r in results)}


def consume(group: Group, protocol: str, topic: str, expect: int) -> dict:
    python, env = client_command(protocol, group.base / "home")
    r = subprocess.run([python, str(CLIENT), "consume", protocol, group.address(protocol), topic, f"GID-{topic}",
                        str(expect)], env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not lines:
        raise SystemExit(f"{protocol} consumer failed: {r.stderr[-2000:]}")
    res = json.loads(lines[-1])
    seconds = (res["end"] - res["start"]) if res["start"] else float("nan")
    return {"got": res["got"], "rate": res["got"] / seconds if seconds > 0 else float("nan")}


def run(args: argparse.Namespace) -> list[dict]:
    base = Path(tempfile.mkdtemp(prefix="dledger-bench-protocols-"))
    (base / "home").mkdir()
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    group = Group(base, args.profile)
    rows = []
    try:
        group.start()
        for protocol in (PROTOCOLS if args.protocol == "all" else (args.protocol,)):
            for size in SIZES:
                topic = f"Bench{protocol.capitalize()}{size}"
                sent = produce(group, protocol, topic, size, args.processes, args.threads, args.messages)
                print(f"  {protocol} {size} B: sent {sent['ok']:,} ({sent['rate']:,.0f}/s); master busy "
                      f"{sent['master_busy']:.0%} of a core, busiest producer process {sent['client_busy']:.0%}",
                      file=sys.stderr)
                got = consume(group, protocol, topic, sent["stored"])
                fixed = produce(group, protocol, topic + "Rate", size, 1, 1, int(args.rate * args.rate_seconds),
                                rate=args.rate)
                rows.append({"protocol": protocol, "size": size, "send": sent, "consume": got, "fixed": fixed})
    finally:
        group.stop()
        shutil.rmtree(base, ignore_errors=True)
    return rows


def table(rows: list[dict]) -> list[list]:
    own = {(r["size"], k): r[k]["rate"] for r in rows if r["protocol"] == "own" for k in ("send", "consume")}
    own_master = {r["size"]: r["send"]["master_us"] for r in rows if r["protocol"] == "own"}

    def ratio(r, k):
        base = own.get((r["size"], k))
        return f"{r[k]['rate'] / base:.2f}" if base else "-"

    def cheap(r):            # own's master CPU per message over this one's: 1.00 costs the master as own does
        base = own_master.get(r["size"])
        return f"{base / r['send']['master_us']:.2f}" if base and r["send"]["master_us"] > 0 else "-"

    return [[r["protocol"], f"{r['size']} B", f"{r['send']['rate']:,.0f}", ratio(r, "send"),
             f"{r['send']['p50']:.1f}", f"{r['send']['p99']:.1f}", f"{r['fixed']['p50']:.1f}",
             f"{r['fixed']['p99']:.1f}", f"{r['consume']['rate']:,.0f}", ratio(r, "consume"),
             f"{r['send']['broker_us']:.0f}", f"{r['send']['master_us']:.0f}", cheap(r),
             f"{r['send']['client_us']:.0f}", f"{r['send']['master_busy']:.0%} / {r['send']['client_busy']:.0%}",
             f"{r['send']['failed'] + r['fixed']['failed']}", f"{r['consume']['got']}/{r['send']['stored']}"]
            for r in rows]


def positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be positive")
        return value
    return parse


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLE)
    ap.add_argument("--protocol", choices=PROTOCOLS + ("all",), default="all",
                    help="own (msgpack, BrokerClient), remoting (RocketMQ 4.x client), grpc (RocketMQ 5.x "
                         "client), or all of them one after another (default)")
    ap.add_argument("--processes", type=positive(int), default=4, help="producer processes (default 4)")
    ap.add_argument("--threads", type=positive(int), default=2, help="sending threads per process (default 2)")
    ap.add_argument("--messages", type=positive(int), default=1000, help="messages per thread (default 1000)")
    ap.add_argument("--rate", type=positive(float), default=200.0,
                    help="messages/s of the fixed-rate step (default 200)")
    ap.add_argument("--rate-seconds", type=positive(float), default=5.0,
                    help="seconds of the fixed-rate step (default 5)")
    ap.add_argument("--profile", type=Path, metavar="DIR",
                    help="run each broker under cProfile (every thread, CPU time) and write DIR/<node>.prof; "
                         "the busiest node's top functions are printed (slows the brokers several times)")
    ap.add_argument("--quick", action="store_true",
                    help="a short run: 2 processes x 2 threads x 100 messages, 2 s at the rate")
    args = ap.parse_args(argv)
    if args.quick:
        args.processes, args.threads, args.messages, args.rate_seconds = 2, 2, 100, 2.0
    print(f"machine: {machine()}\ncommand: {command()}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.profile is not None:
        print(f"profiling the brokers (cProfile, every thread) into {args.profile}: rates are not comparable")
    rows = run(args)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print_table(f"3 broker processes, real clients: {args.processes} processes x {args.threads} threads x "
                f"{args.messages} messages (send), one thread at {args.rate:g}/s for {args.rate_seconds:g} s "
                f"(fixed rate), one consumer; rates in messages/s, latencies in ms, CPU in us per message sent "
                f"(the send step; brokers: the three together)",
                ["protocol", "body", "send/s", "vs own", "send p50", "send p99", f"p50 @{args.rate:g}/s",
                 f"p99 @{args.rate:g}/s", "consume/s", "vs own", "CPU brokers", "CPU master", "vs own",
                 "CPU clients", "busy master / client", "not OK", "consumed"],
                table(rows))
    print("\nCPU master: the busiest broker's CPU per message sent (the protocol is served there); its 'vs "
          "own' is own's figure over this one's (1.00: the protocol costs the master what the project's wire "
          "does). busy: the master's CPU time over the send step's wall time (1.0 = one core), and the "
          "busiest producer process's: near 100 % a client process, not the broker, sets the pace.")
    if args.profile is not None:
        show_profile(args.profile)


def show_profile(folder: Path, top: int = 30) -> None:
    """The top functions (own time) of the node whose profile holds the most CPU time."""
    import pstats

    found = [(pstats.Stats(str(p)), p) for p in sorted(folder.glob("*.prof"))]
    if not found:
        print(f"no profile was written in {folder}")
        return
    stats, path = max(found, key=lambda sp: sp[0].total_tt)
    print(f"\nprofiles in {folder}; the busiest, {path.name} ({stats.total_tt:.1f} s of CPU), by own time:")
    stats.sort_stats("tottime").print_stats(top)


if __name__ == "__main__":
    main()

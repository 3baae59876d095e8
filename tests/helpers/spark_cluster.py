"""Real Spark engines on loopback for the tests: a standalone master and worker, and a Spark
Connect server, started from the scripts of the pyspark package and stopped by PID.

``SparkEngines(base_dir)`` starts, as a cluster operator would:
- ``bin/spark-class org.apache.spark.deploy.master.Master`` and ``...deploy.worker.Worker``
  (1 core, 1 GiB) on 127.0.0.1 (the pip package has no ``start-master.sh``);
- ``sbin/start-connect-server.sh --master local[1]`` (its PID from ``SPARK_PID_DIR``).

Every daemon and every client gets the same ``SPARK_CONF_DIR``: quiet logs, the JVM flags of
embedded sessions (``LOCAL_JVM_OPTIONS``: quicker JVMs on a small machine), no web UIs, one
attempt per task, and
``spark.sql.execution.pyspark.python`` pointing at ``node_python``: this interpreter behind a
wrapper that hides ``dledger``, ``msgpack`` and ``zlib_ng`` (as on a node where only PySpark
and pyarrow are installed). So the executors, and the Connect server's Python workers, run
dledger only from what the session ships to them.

``client_env()`` is the environment of a user's command: no ``PYSPARK_PYTHON``, no
``SPARK_LOCAL_IP``, nothing but the cluster's conf directory.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from dledger.spark.session import LOCAL_JVM_OPTIONS as JVM_FLAGS
from dledger.transport.loopback import free_ports

CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""
#: Packages of the driver's environment that the nodes do not have (see the module docstring).
HIDDEN = ("dledger", "msgpack", "zlib_ng")
HIDDEN_MODULES = ("pyspark_dledger", "pyspark_dledger_messages")


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _tail(path: str, n: int = 15) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)"


class SparkEngines:
    def __init__(self, base_dir: str, startup_timeout: float = 180.0) -> None:
        self.base = base_dir
        self.timeout = startup_timeout
        self.home = spark_home()
        self.conf_dir = os.path.join(base_dir, "conf")
        self.log_dir = os.path.join(base_dir, "logs")
        self.pid_dir = os.path.join(base_dir, "pids")
        self.work_dir = os.path.join(base_dir, "work")
        for d in (self.conf_dir, self.log_dir, self.pid_dir, self.work_dir):
            os.makedirs(d, exist_ok=True)
        (self.master_port, self.master_ui, self.worker_port, self.worker_ui,
         self.connect_port) = free_ports(5)
        self.node_python = self._write_node_python()
        self._write_conf()
        self.procs: dict[str, subprocess.Popen] = {}
        self.pids: dict[str, int] = {}

    @property
    def standalone(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def connect(self) -> str:
        return f"sc://127.0.0.1:{self.connect_port}"

    def _write_node_python(self) -> str:
        bare = os.path.join(self.base, "node-site")
        for name in HIDDEN:
            os.makedirs(os.path.join(bare, name), exist_ok=True)
            with open(os.path.join(bare, name, "__init__.py"), "w") as f:
                f.write(f"raise ImportError('{name} is not installed on this node')\n")
        for name in HIDDEN_MODULES:
            with open(os.path.join(bare, name + ".py"), "w") as f:
                f.write('"""not installed on this node"""\n')
        path = os.path.join(self.base, "node-python")
        with open(path, "w") as f:
            f.write("#!/bin/sh\n"
                    f'PYTHONPATH="{bare}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
        os.chmod(path, 0o755)
        return path

    def _write_conf(self) -> None:
        with open(os.path.join(self.conf_dir, "log4j2.properties"), "w") as f:
            f.write(LOG4J)
        settings = {
            "spark.driver.extraJavaOptions": JVM_FLAGS,
            "spark.executor.extraJavaOptions": JVM_FLAGS,
            "spark.ui.enabled": "false",
            "spark.task.maxFailures": "1",
            "spark.sql.execution.pyspark.python": self.node_python,
        }
        with open(os.path.join(self.conf_dir, "spark-defaults.conf"), "w") as f:
            f.writelines(f"{k} {v}\n" for k, v in settings.items())

    def _daemon_env(self) -> dict:
        env = dict(os.environ)
        env.update(SPARK_HOME=self.home, SPARK_CONF_DIR=self.conf_dir, SPARK_LOG_DIR=self.log_dir,
                   SPARK_PID_DIR=self.pid_dir, SPARK_WORKER_DIR=self.work_dir,
                   SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_JAVA_OPTS=JVM_FLAGS,
                   SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
                   # the Connect server's Python workers run on the node's Python too
                   PYSPARK_PYTHON=self.node_python)
        return env

    def client_env(self) -> dict:
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP",
                            "SPARK_HOME")}
        env["SPARK_CONF_DIR"] = self.conf_dir
        if env.get("PYTHONPATH"):  # the commands may run in another directory
            env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p)
                                                for p in env["PYTHONPATH"].split(os.pathsep))
        return env

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(os.path.join(self.log_dir, f"{name}.log"), "wb")
        with log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=self._daemon_env(),
                                    start_new_session=True)
        self.procs[name] = proc
        self.pids[name] = proc.pid

    def _exited(self, name: str) -> bool:
        """Whether the daemon is gone (the Connect server is not our child: its PID is
        probed)."""
        if name in self.procs:
            return self.procs[name].poll() is not None
        return name in self.pids and not _alive(self.pids[name])

    def _wait(self, name: str, ready, deadline: float) -> None:
        """Polls ``ready`` until it holds, the daemon exits, or ``deadline``."""
        while not ready():
            if self._exited(name):
                raise RuntimeError(f"spark {name} exited while starting:\n{self._log_tail(name)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"spark {name} not ready after {self.timeout:.0f} s:\n"
                                   f"{self._log_tail(name)}")
            time.sleep(0.2)

    def _log_tail(self, name: str) -> str:
        if name == "connect":
            logs = glob.glob(os.path.join(self.log_dir, f"*{CONNECT_CLASS}*.out"))
            return _tail(logs[0]) if logs else "(no log)"
        return _tail(os.path.join(self.log_dir, f"{name}.log"))

    def _worker_registered(self) -> bool:
        """The master's status page (``/json``) counts one alive worker."""
        url = f"http://127.0.0.1:{self.master_ui}/json/"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return json.load(resp).get("aliveworkers", 0) >= 1
        except (OSError, ValueError):
            return False

    def start(self) -> SparkEngines:
        """Starts the three daemons (the Connect server beside the master), returns when the
        worker has registered and the Connect server listens; on failure stops what started."""
        deadline = time.monotonic() + self.timeout
        spark_class = os.path.join(self.home, "bin", "spark-class")
        try:
            self._spawn("master", [spark_class, "org.apache.spark.deploy.master.Master",
                                   "--host", "127.0.0.1", "--port", str(self.master_port),
                                   "--webui-port", str(self.master_ui)])
            self._start_connect()
            self._wait("master", lambda: _port_open(self.master_port), deadline)
            self._spawn("worker", [spark_class, "org.apache.spark.deploy.worker.Worker",
                                   "--host", "127.0.0.1", "--port", str(self.worker_port),
                                   "--webui-port", str(self.worker_ui), "--cores", "1",
                                   "--memory", "1g", "--work-dir", self.work_dir,
                                   self.standalone])
            self._wait("connect", lambda: _port_open(self.connect_port), deadline)
            self._wait("worker", self._worker_registered, deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_connect(self) -> None:
        script = os.path.join(self.home, "sbin", "start-connect-server.sh")
        subprocess.run(
            [script, "--master", "local[1]",
             "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
             "--conf", f"spark.connect.grpc.binding.port={self.connect_port}"],
            env=self._daemon_env(), check=True, stdout=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL, timeout=60)
        pid_files = glob.glob(os.path.join(self.pid_dir, f"*{CONNECT_CLASS}*.pid"))
        if len(pid_files) != 1:
            raise RuntimeError(f"no PID file for the Connect server in {self.pid_dir}")
        with open(pid_files[0]) as f:
            self.pids["connect"] = int(f.read().strip())

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM to every daemon by PID (worker first: it stops its executors), SIGKILL to
        whatever is left after ``grace`` seconds."""
        order = [n for n in ("worker", "connect", "master") if n in self.pids]
        for name in order:
            try:
                os.kill(self.pids[name], signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        for name in order:
            while not self._exited(name) and time.monotonic() < deadline:
                time.sleep(0.1)
            if not self._exited(name):
                try:
                    os.kill(self.pids[name], signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if name in self.procs:
                self.procs[name].wait()
        self.pids.clear()
        self.procs.clear()

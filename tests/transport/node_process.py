"""One dledger node in its own OS process, for the multi-process TCP test.

``python node_process.py GROUP SELF_ID PEERS STORE_BASE_DIR`` starts ``DLedgerServer(config)``
(the default TCP transport; the secret, if any, comes from ``DLEDGER_SECRET``), prints
``ready``, then answers one JSON line per command read from stdin:
``leader SECONDS`` -> the leader id it knows; ``append TEXT`` -> code and index;
``committed INDEX SECONDS`` -> whether its commit index reached INDEX in time;
``get INDEX`` -> the body; ``quit`` -> shuts down and exits.
"""

import json
import sys
import threading

from dledger import DLedgerConfig, DLedgerServer


def main() -> None:
    group, self_id, peers, base_dir = sys.argv[1:5]
    config = DLedgerConfig(group=group, self_id=self_id, peers=peers, store_base_dir=base_dir,
                           mapped_file_size_for_entry_data=1 << 22, mapped_file_size_for_entry_index=32 * 65536)
    server = DLedgerServer(config).startup()
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, _sep, arg = line.strip().partition(" ")
        if cmd == "leader":
            out = server.wait_for_leader(float(arg))
        elif cmd == "append":
            r = server.append(arg.encode()).result(30)
            out = {"code": int(r.code), "index": r.index}
        elif cmd == "committed":
            index, seconds = arg.split()
            reached = threading.Event()

            def check(_ready=None, index=int(index)):
                if server.node.committed_index >= index:
                    reached.set()

            def install():
                server.driver.ready_listeners.append(check)
                check()

            server.runtime.run_sync(install)
            out = reached.wait(float(seconds))
        elif cmd == "get":
            out = server.get(int(arg)).body.decode()
        elif cmd == "quit":
            server.shutdown()
            print(json.dumps("bye"), flush=True)
            return
        else:
            out = f"unknown command {cmd!r}"
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

"""Decoders of what several threads read at once (a start's stream directories) are built at
import: msgspec 0.22 builds a Struct type's decoding info on its first decode, and two threads
doing that first decode at the same time crashed the process (SIGSEGV) about one start in ten
with a small GIL switch interval. Each run is a fresh interpreter, so every first decode is a
real first decode."""

import subprocess
import sys

_RACE = r"""
import sys, threading
from jetlog.api.models import decode_stored_config
from jetlog.datadir import _MARKER
from jetlog.stream import preload

# What a stream directory holds (stream.json) and the data directory's FORMAT marker.
cfg = (
    b'{"name":"S","subjects":["s.x"],"retention":"limits","max_consumers":-1,"max_msgs":-1,'
    b'"max_bytes":-1,"max_age":0,"max_msgs_per_subject":-1,"max_msg_size":-1,"discard":"old",'
    b'"storage":"file","num_replicas":1,"duplicate_window":1000000000,"compression":"none",'
    b'"allow_direct":false,"mirror_direct":false,"sealed":false,"deny_delete":false,'
    b'"deny_purge":false,"allow_rollup_hdrs":false,"consumer_limits":{},"allow_msg_ttl":false,'
    b'"metadata":{"_nats.req.level":"0"}}'
)
meta = b'{"config":' + cfg + b',"created":1795850835593307767}'
marker = b'{"format":1,"jetlog":"0.1.0"}'
sys.setswitchinterval(1e-6)  # hand the GIL over as often as possible
start = threading.Barrier(8)

def first_decodes():
    start.wait()
    assert decode_stored_config(cfg).name == "S"
    assert bytes(preload._META.decode(meta).config) == cfg
    assert _MARKER.decode(marker).format == 1

threads = [threading.Thread(target=first_decodes) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("ok")
"""


def test_first_decodes_in_many_threads_at_once_do_not_crash() -> None:
    for _ in range(12):
        p = subprocess.run([sys.executable, "-c", _RACE], capture_output=True, timeout=60)
        assert p.returncode == 0 and p.stdout == b"ok\n", (p.returncode, p.stderr.decode()[-2000:])

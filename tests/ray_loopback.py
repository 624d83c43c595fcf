"""Ray for the tests, kept on the loopback.

Ray probes the network when it starts, even with its dashboard and usage
statistics off: a UDP socket towards a public resolver to learn its own address
(from the driver and from its runtime-environment agent), and cloud-metadata
requests from its dashboard process, which no setting disables. These settings
turn both to the loopback: its address is 127.0.0.1, and the metadata requests
go to a closed local port through a proxy. Checked with strace in a network
namespace that has only the loopback: no connect() beyond 127.0.0.0/8 and ::1.
They must be in the environment before Ray is imported (it reads the first then),
so a test module that uses Ray imports this module first.
"""

from __future__ import annotations

import os

LOOPBACK_ONLY = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "http_proxy": "http://127.0.0.1:9",
    "no_proxy": "127.0.0.1,localhost,::1",
}
os.environ.update(LOOPBACK_ONLY)

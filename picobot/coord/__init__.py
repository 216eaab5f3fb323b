"""Coordination through Redis, below everything that needs it: leases and the names of the kernel's keys.

    keys.py   every Redis key, prefix and channel name of the kernel (capabilities keep theirs)
    lease.py  Lease (SET NX PX, a bounded wait to take it, token-checked renew and release)
              and KeptLease (renewed by a thread)

It imports only redis and the standard library.
"""

from picobot.coord import keys
from picobot.coord.lease import KeptLease, Lease, held

__all__ = ["KeptLease", "Lease", "held", "keys"]

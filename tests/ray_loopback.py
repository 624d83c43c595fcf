"""Ray for the tests, kept on the loopback: ``ert.distributed.LOOPBACK_ENVIRONMENT``
(why and how it was checked: its comment) must be in the environment before Ray
is imported, so a test module that uses Ray imports this module first.
Importing eagerrt.distributed does not import Ray.
"""

from __future__ import annotations

import os

from eagerrt.distributed import LOOPBACK_ENVIRONMENT

os.environ.update(LOOPBACK_ENVIRONMENT)

"""delay.py's candidate with the delay in decode1, verify1 and decode16 (m <= 16) only."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("_okc_ab_delay_small", Path(__file__).with_name("delay.py"))
_delay = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_delay)
_delay.DELAYED_M = {1, 8, 16}
prepare, kernel_fn = _delay.prepare, _delay.kernel_fn

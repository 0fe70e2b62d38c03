"""delay.py's candidate with the delay in decode32, verify16 and verify32 (m >= 32) only."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("_okc_ab_delay_large", Path(__file__).with_name("delay.py"))
_delay = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_delay)
_delay.DELAYED_M = {32, 128, 256}
prepare, kernel_fn = _delay.prepare, _delay.kernel_fn

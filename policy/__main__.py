"""Entry point the engine runs (``python -m pulumi.policy <engine> policy/`` executes this file).

``runpy`` puts only this directory on ``sys.path``; the pack's modules are imported as the package
``policy``, as the project's tests import them, so the checkout root goes first.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from policy.pack import serve

serve()

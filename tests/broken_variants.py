"""Deliberately broken components that law tests in several folders must catch (a helper at
tests/, so every folder imports it alike)."""

from __future__ import annotations

import codecspec as cs
from codecspec.decode.depth import DepthDecoder


class OffsetShiftedVerifier(DepthDecoder):
    """Deliberately broken: verifies against head(z + b_1), the draft stream's view."""

    def _verify(self, call, tree, n, tokens, heads, g):
        shifted = call.hidden[:n] + self.offsets[0]
        return cs.verify_tree_hidden(tree, tokens, shifted, heads, self.bank, self.params, g)

"""Coalesce, de-coalesce and interpolate transformer models (docs/design.md, "Operator math")."""

from mlsys.operators.api import coalesce, decoalesce, derive_config, interpolate
from mlsys.operators.pairing import SCHEMES
from mlsys.operators.plan import DEPTH_MAPPINGS

__all__ = ["DEPTH_MAPPINGS", "SCHEMES", "coalesce", "decoalesce", "derive_config", "interpolate"]

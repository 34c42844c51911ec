"""`python -m pdk_config`: print where the Nangate45 PDK was found, or why it was not (exit 1)."""
import sys

from .nangate45 import PdkError, find_pdk

try:
    pdk = find_pdk()
except PdkError as e:
    sys.exit(f"pdk_config: {e}")
print(f"pdk_config: Nangate45 at {pdk.root} (found by {pdk.found_by}; corners {', '.join(pdk.corners)})")

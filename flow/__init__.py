"""The physical flow: synthesis, timing, placement, place-and-route designs and reports."""

"""Amaranth components of the nano-K3 chip; every block reads its sizes from one ``ChipParams``."""

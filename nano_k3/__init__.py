"""nano-K3: model, number formats, memory image and fixed-point C-model of the nano-KPU chip.

The chip contract (image layout, formats, value ranges) is /work/shared/SPEC_NANO_KPU.md.
"""

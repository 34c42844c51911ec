mac_sram.v

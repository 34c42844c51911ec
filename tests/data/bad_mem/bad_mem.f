bad_mem.v

regions_small.v

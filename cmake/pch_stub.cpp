// Empty translation unit: carries the precompiled torch header that tests and tools reuse.

"""The machine and the files every layer uses: devices, CPU classes, timed kernel choices
(wisdom), peak memory, atomic writes, run records and code hashes, plot helpers."""

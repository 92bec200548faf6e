"""The microbenchmark kit: measures a cluster's GEMMs, collectives, attention kernels and
host links on its GPUs and writes the `microbenchmarks` object that POST
/v1/calibration/runs (and `atlas-planner calibrate --microbenchmarks`) takes.

Owns: `results` (torch-free: FLOP counts, bus factors, entries, reading nccl-tests output,
writing the JSON) and `bench` (the measurements, with PyTorch on CUDA GPUs; started by
`torchrun ... -m calibration run`). Must not: import the planner's cost model, solver or
service (only `api_schemas`, whose `Microbenchmarks` is the file's shape), or fit anything
(the service fits). Installed with the `calibration` extra, which adds PyTorch.
"""

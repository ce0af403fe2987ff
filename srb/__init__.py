"""srb: scientific memory as budgeted context restoration (see README)."""

from srb.job_threads import normalise_thread_env

# Before anything imports torch/numpy: a `threads: 0` job (a model-server client) gets
# OMP_NUM_THREADS=0 from Snakemake, which OpenMP rejects (srb.job_threads).
normalise_thread_env()

"""tenet-byoc: run a Relax model's GEMMs on the CPU and charge them to a TENET cost model."""

__version__ = "0.1.0"

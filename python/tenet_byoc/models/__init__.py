"""Models for tenet-byoc: GPT-2 (prefill and decode) and the FashionMNIST MLP, in Relax."""

"""Experiments on the tenet backend: data, cases, the sweep, plots and the command line.

They use the backend (``tenet_byoc``) and the models (``tenet_byoc.models``); neither
imports them.
"""

"""The directory `rlsys profile` puts first on its command's PYTHONPATH (see sitecustomize.py).

A package only so that installing rlsys ships `sitecustomize.py`; nothing imports it as
`rlsys.profiler.bootstrap`.
"""

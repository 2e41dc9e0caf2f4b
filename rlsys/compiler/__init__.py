"""The recurrent-tensor compiler: programs -> dependence graph -> passes -> JAX.

User-facing names are re-exported by `rlsys.rt`.
"""

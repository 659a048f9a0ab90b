"""Server-side handles on the sandbox: the zygote, its workers and holders, the warm pool.

These run in the engine's process, on anyio, and treat every byte that comes out of a sandbox
as hostile. They talk to ``corral.sandbox.inside`` only through the boundary modules beside
this package (``corral.sandbox._protocol``, ``_control_protocol``, ``_case_protocol``,
``_seqpacket``, ``_descriptors``) and by starting the zygote as a separate process. Nothing
here is public API: ``corral.sandbox`` re-exports what the engine uses.
"""

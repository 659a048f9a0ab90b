"""Code that runs inside the sandbox: the zygote, the workers it forks and their runner.

Everything here executes in the zygote process or in a worker or session holder forked from
it: isolation (namespaces, root file system, seccomp, rlimits), the runner and its cell
semantics, the session holder. It is synchronous, imports only the standard library and the
boundary modules beside this package (``corral.sandbox._protocol``, ``_control_protocol``,
``_case_protocol``, ``_seqpacket``, ``_descriptors``, ``_syscalls``, and ``corral._mime``),
and never the server-side handles in ``corral.sandbox.host``. Nothing here is
public API.
"""
